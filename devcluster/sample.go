package devcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer/hec"
	"github.com/quarry-dev/quarry/sampledata"
	"github.com/quarry-dev/quarry/searchhead"
)

// LoadSample loads n sample events (the bench event model) into index
// sample through the first peer's HEC, with acknowledgements, unless
// dev.json says a load was made before: then it returns that load. A load
// interrupted before its last ack is not repeated (it would duplicate what
// was acknowledged); it is reported with Acked false.
func (c *Cluster) LoadSample(ctx context.Context, n int) (Sample, error) {
	if s := c.Layout.Sample; s != nil {
		return *s, nil
	}
	base := time.Now().UTC().Add(-24 * time.Hour).Truncate(time.Hour)
	file := filepath.Join(c.opts.DataDir, "sample.hec.json")
	f, err := os.Create(file)
	if err != nil {
		return Sample{}, fmt.Errorf("dev: sample data: %w", err)
	}
	counts, err := sampledata.Write(f, n, 1, base, SampleIndex)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Sample{}, fmt.Errorf("dev: sample data: %w", err)
	}
	s := Sample{Index: SampleIndex, Events: counts.Events, Status5xx: counts.Status5xx, Errors: counts.Errors,
		Rare: counts.Rare, Base: base, Seed: 1}
	if err := c.SaveSample(s); err != nil { // started: never load twice
		return s, err
	}
	if _, err := hec.Ingest(ctx, hec.ClientConfig{URL: "http://" + c.Layout.Peers[0].HTTPAddr, Token: c.Tokens().HEC,
		Streams: 2, Batch: 1000}, []string{file}); err != nil {
		return s, fmt.Errorf("dev: load sample data: %w", err)
	}
	os.Remove(file)
	s.Acked = true
	return s, c.SaveSample(s)
}

// SearchAnswer is a search head's answer to one search.
type SearchAnswer = searchhead.Answer

// Search posts a search to a search head (token may be empty).
func Search(ctx context.Context, url, token string, req map[string]any) (SearchAnswer, error) {
	return searchhead.Client{URL: url, Token: token}.Search(ctx, req)
}

// Count runs `<q> | stats count` on a search head and returns the count
// of a complete (not partial) answer.
func Count(ctx context.Context, url, token, q string) (int64, error) {
	a, err := Search(ctx, url, token, map[string]any{"query": q + " | stats count", "allow_partial": false})
	if err != nil {
		return 0, err
	}
	if a.Status != http.StatusOK {
		return 0, fmt.Errorf("%s: HTTP %d %s", url, a.Status, a.Error)
	}
	if a.Resp.Summary.Partial {
		return 0, fmt.Errorf("%s: partial answer: %v", url, a.Resp.Summary.Warnings)
	}
	if len(a.Resp.Results) != 1 {
		return 0, fmt.Errorf("%s: %d result rows, want 1", url, len(a.Resp.Results))
	}
	switch v := a.Resp.Results[0]["count"].(type) {
	case json.Number:
		return v.Int64()
	case string:
		var n int64
		_, err := fmt.Sscan(v, &n)
		return n, err
	default:
		return 0, fmt.Errorf("%s: count is %T %v", url, v, v)
	}
}

// WaitSearchable waits (bounded by ctx) until every search head answers
// the exact sample count, complete.
func (c *Cluster) WaitSearchable(ctx context.Context, s Sample) error {
	return testutil.Poll(ctx, pollEvery, func() error {
		for _, h := range c.Layout.Heads {
			n, err := Count(ctx, "http://"+h.HTTPAddr, "", "index="+s.Index)
			if err != nil {
				return err
			}
			if n != int64(s.Events) {
				return fmt.Errorf("search head %s counts %d sample events, want %d", h.ID, n, s.Events)
			}
		}
		return nil
	})
}

// CountsDuring runs `<q> | stats count` on a search head back to back,
// each answer required to be complete and equal to want, for as long as
// during runs (at least once). It returns each search's latency in order:
// how a test shows that a normal search of another caller still succeeds,
// and how fast, while a hostile request is being refused.
func CountsDuring(ctx context.Context, url, token, q string, want int64, during func()) ([]time.Duration, error) {
	done := make(chan struct{})
	go func() { defer close(done); during() }()
	var lat []time.Duration
	for first := true; ; first = false {
		select {
		case <-done:
			if !first {
				return lat, nil
			}
		default:
		}
		start := time.Now()
		n, err := Count(ctx, url, token, q)
		if err == nil && n != want {
			err = fmt.Errorf("%s counts %d, want %d", url, n, want)
		}
		if err != nil {
			<-done
			return lat, err
		}
		lat = append(lat, time.Since(start))
	}
}

// Spread is the median and the maximum of latencies (0, 0 for none).
func Spread(lat []time.Duration) (median, most time.Duration) {
	if len(lat) == 0 {
		return 0, 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[len(s)/2], s[len(s)-1]
}
