package bus

import (
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the bus, shared by every role in the process. They are not
// registered anywhere until RegisterMetrics is called (so importing bus has
// no global side effect).
var (
	metricRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quarry_bus_requests_total",
		Help: "Typed requests sent, by subject family and outcome (ok, no_responders, timeout, denied, remote_error, error).",
	}, []string{"family", "outcome"})
	metricRequestSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "quarry_bus_request_duration_seconds",
		Help:    "Time from sending a typed request to its answer or failure, by subject family.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"family"})
	metricHandled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quarry_bus_handled_total",
		Help: "Typed requests handled by Serve, by subject family and outcome (ok, error, bad_request, expired).",
	}, []string{"family", "outcome"})
	metricStreamBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quarry_bus_stream_bytes_total",
		Help: "Stream payload bytes, by direction (sent, received).",
	}, []string{"direction"})
	metricStreamFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "quarry_bus_stream_failures_total",
		Help: "Streams that ended in failure, by end (sender, receiver) and reason (stalled, gap, corrupt, aborted, protocol, other).",
	}, []string{"end", "reason"})
)

// RegisterMetrics registers the bus metrics with reg (once per registry).
func RegisterMetrics(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{metricRequests, metricRequestSeconds, metricHandled, metricStreamBytes, metricStreamFailures} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// family is the subject family label: the quarry family after the prefix,
// or "other" — bounded, whatever subjects callers use.
func family(subject string) string {
	toks := strings.Split(subject, ".")
	for _, tok := range toks[1:] { // the family follows the prefix
		switch tok {
		case "mgr", "gen", "search", "repl", "fixup", "bundle", "results":
			return tok
		}
	}
	return "other"
}

func observeRequest(subject string, start time.Time, err error) {
	f := family(subject)
	metricRequestSeconds.WithLabelValues(f).Observe(time.Since(start).Seconds())
	outcome := "ok"
	var re *RemoteError
	switch {
	case err == nil:
	case errors.Is(err, ErrNoResponders):
		outcome = "no_responders"
	case errors.Is(err, ErrTimeout):
		outcome = "timeout"
	case errors.Is(err, ErrPermissionDenied):
		outcome = "denied"
	case errors.As(err, &re):
		outcome = "remote_error"
	default:
		outcome = "error"
	}
	metricRequests.WithLabelValues(f, outcome).Inc()
}

func streamFailure(end string, err error) {
	reason := "other"
	switch {
	case errors.Is(err, ErrStreamStalled):
		reason = "stalled"
	case errors.Is(err, ErrStreamGap):
		reason = "gap"
	case errors.Is(err, ErrStreamCorrupt):
		reason = "corrupt"
	case errors.Is(err, ErrStreamAborted):
		reason = "aborted"
	case errors.Is(err, ErrStreamProtocol):
		reason = "protocol"
	}
	metricStreamFailures.WithLabelValues(end, reason).Inc()
}
