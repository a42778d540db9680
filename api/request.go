package api

// Request is a message a receiver answers (a peer's request to the
// managers, a manager's fixup task to a peer): it knows its own wire
// version, the V field, which the receiver checks with CheckVersion before
// anything else. The managers' operation table accepts only handlers of a
// Request, so an operation cannot skip the check.
type Request interface {
	Version() int
}

// Version is the request's wire version.
func (r Register) Version() int { return r.V }

// Version is the request's wire version.
func (r Heartbeat) Version() int { return r.V }

// Version is the request's wire version.
func (r TargetsRequest) Version() int { return r.V }

// Version is the request's wire version.
func (r BucketEvent) Version() int { return r.V }

// Version is the request's wire version.
func (r GenerationRequest) Version() int { return r.V }

// Version is the request's wire version.
func (r ConfigRequest) Version() int { return r.V }

func (r BundleRequest) Version() int { return r.V }

// Version is the request's wire version.
func (r ConfirmRequest) Version() int { return r.V }

// Version is the request's wire version.
func (r FixupResult) Version() int { return r.V }

// Version is the request's wire version.
func (r BucketsRequest) Version() int { return r.V }

// Version is the request's wire version.
func (r FixupTask) Version() int { return r.V }
