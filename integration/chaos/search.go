package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/quarry-dev/quarry/integration"
	"github.com/quarry-dev/quarry/integration/proccluster"
	"github.com/quarry-dev/quarry/query"
)

// searchTimeout bounds one search over HTTP (a paused head holds it).
const searchTimeout = 60 * time.Second

var searchClient = &http.Client{Timeout: searchTimeout}

// outcome is one search and what the ledger said it must count.
type outcome struct {
	Head     string
	T0, T1   time.Time
	Count    int
	Min, Max int // the ledger's bounds
	Status   int // HTTP status; 0 when no answer came
	Err      string
	Summary  query.Summary
}

// exact: answered, complete, and within the ledger's bounds.
func (o outcome) exact() bool {
	return o.Err == "" && !o.Summary.Partial && o.Count >= o.Min && o.Count <= o.Max
}

func (o outcome) summaryJSON() string {
	b, _ := json.Marshal(o.Summary)
	return string(b)
}

// searchOnce runs q on head and returns the answer.
func searchOnce(ctx context.Context, head *proccluster.Proc, q string) (integration.SearchAnswer, error) {
	ctx, cancel := context.WithTimeout(ctx, searchTimeout)
	defer cancel()
	return integration.SearchHTTPWith(ctx, searchClient, head.URL, "", query.Request{Query: q})
}

// countOf reads the count of a `| stats count` answer.
func countOf(r query.Response) (int, error) {
	if len(r.Results) == 0 {
		return 0, nil // no event matched
	}
	return intOf(r.Results[0]["count"])
}

func intOf(v any) (int, error) {
	switch x := v.(type) {
	case json.Number:
		n, err := strconv.ParseInt(string(x), 10, 64)
		return int(n), err
	case float64:
		return int(x), nil
	case string:
		return strconv.Atoi(x)
	}
	return 0, fmt.Errorf("count %v (%T): not a number", v, v)
}

// searchers run searches back to back on every head and keep every
// outcome; the counts are checked against the ledger as they come.
type searchers struct {
	abort context.Context // ends searches under way (an interrupt)
	cl    *proccluster.Cluster
	led   *ledger
	grace time.Duration
	log   *slog.Logger

	mu sync.Mutex
	// outcomes keeps every search that was not exact and complete (they
	// are judged against the fault windows at the end); exact counts the
	// others per head.
	outcomes []outcome
	exact    map[string]int
	wg       sync.WaitGroup
}

func (s *searchers) start(ctx context.Context) {
	s.exact = map[string]int{}
	q := s.led.run + " | stats count"
	for _, h := range s.cl.Heads {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for ctx.Err() == nil {
				o := s.one(h, q)
				s.mu.Lock()
				if o.exact() {
					s.exact[o.Head]++
				} else {
					s.outcomes = append(s.outcomes, o)
				}
				s.mu.Unlock()
				if o.Status != http.StatusOK {
					select { // pace: a killed head refuses at once
					case <-ctx.Done():
					case <-time.After(200 * time.Millisecond):
					}
				}
			}
		}()
	}
}

func (s *searchers) one(h *proccluster.Proc, q string) outcome {
	o := outcome{Head: h.Name, T0: time.Now()}
	a, err := searchOnce(s.abort, h, q)
	o.T1 = time.Now()
	o.Min, o.Max = s.led.bounds(o.T0, o.T1, s.grace)
	o.Status = a.Status
	switch {
	case err != nil:
		o.Err = err.Error()
	case a.Status != http.StatusOK:
		o.Err = fmt.Sprintf("HTTP %d %s: %s", a.Status, a.Code, a.Error)
	default:
		o.Summary = a.Resp.Summary
		if o.Count, err = countOf(a.Resp); err != nil {
			o.Err = err.Error()
		}
	}
	if o.Err == "" && (o.Count > o.Max || (o.Count < o.Min && !o.Summary.Partial)) {
		s.log.Warn("wrong count", "head", o.Head, "count", o.Count, "min", o.Min, "max", o.Max, "summary", o.summaryJSON())
	}
	return o
}

// wait waits for the searchers to end and returns the searches that were
// not exact and the count of exact ones per head.
func (s *searchers) wait() ([]outcome, map[string]int) {
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outcomes, s.exact
}

// countsByRequest is `<run> | stats count by req` on head: each request's
// count, and the summary.
func countsByRequest(ctx context.Context, head *proccluster.Proc, run string) (map[string]int, query.Summary, error) {
	a, err := searchOnce(ctx, head, run+" | stats count by req")
	if err != nil {
		return nil, query.Summary{}, err
	}
	if a.Status != http.StatusOK {
		return nil, query.Summary{}, fmt.Errorf("HTTP %d %s: %s", a.Status, a.Code, a.Error)
	}
	out := map[string]int{}
	for _, row := range a.Resp.Results {
		id, _ := row["req"].(string)
		n, err := intOf(row["count"])
		if err != nil {
			return nil, a.Resp.Summary, err
		}
		out[id] += n
	}
	return out, a.Resp.Summary, nil
}
