package peer

import (
	"github.com/quarry-dev/quarry/peer/store"
)

// Detention (SPEC §3). The managers detain a peer whose disk is short (its
// heartbeats report the space, diskSpace) or on the operator's word; each
// heartbeat reply says the peer's state. While detained the peer takes no
// new data — HEC answers 503 code 9 "Server is busy", as Splunk's detained
// peers do, so a load balancer sends the events to another peer — and the
// managers choose it neither as an origin nor as a target (fsm). It keeps
// serving searches, its replicas of hot buckets already under way, and
// fixup tasks that copy from it. HEC's /health answers unhealthy meanwhile
// (it reads the same Busy), so a load balancer's health check also routes
// around it; the process's /healthz stays ok.

// hecStore is the store as HEC sees it: busy while the peer is detained.
type hecStore struct {
	*store.Store
	p *Peer
}

// Busy reports back-pressure, or detention.
func (h hecStore) Busy() bool { return h.p.detained.Load() || h.Store.Busy() }

// setDetained records the state a heartbeat reply gave, saying so when it
// changes.
func (p *Peer) setDetained(on bool) {
	if p.detained.Swap(on) == on {
		return
	}
	if on {
		p.log.Warn("in detention: HEC refuses new data (503 code 9); searches and fixup sources go on")
	} else {
		p.log.Info("out of detention: HEC takes data again")
	}
}

// Detained reports whether the managers hold this peer in detention (as of
// its last heartbeat).
func (p *Peer) Detained() bool { return p.detained.Load() }

// diskSpace is the data directory's free and total bytes: Config.DiskSpace
// when set (a test hook), else the file system's.
func (p *Peer) diskSpace() (free, total int64) {
	if p.cfg.DiskSpace != nil {
		return p.cfg.DiskSpace()
	}
	return diskSpace(p.cfg.DataDir)
}
