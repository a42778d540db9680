package query

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// WireVersion is the version of the partial-result wire form. A decoder
// refuses any other version rather than guess (see DESIGN.md). Version 2
// added the compact counts of count-only aggregates (Partial.Counts): a
// version-1 head would ignore them and answer wrong, so it must refuse.
const WireVersion = 2

// Partial is one bucket's answer from a peer half: either its matching
// events (newest first, pre-reduced by head/tail/dedup/sort when the
// pipeline splits at one of them) or its partial aggregates. A search head
// merges Partials from many peers and buckets with Plan.Merge.
type Partial struct {
	V       int     `json:"v"`
	Bucket  string  `json:"bucket"`
	Index   string  `json:"index"`
	Kind    string  `json:"kind"` // "events" or "agg"
	Skipped bool    `json:"skipped,omitempty"`
	Scanned int64   `json:"scanned"` // events decoded
	Events  []Row   `json:"-"`
	Groups  []group `json:"groups,omitempty"`
	// Counts is the wire form of a count-only aggregate (every aggregate
	// a plain count: stats count by …, top, rare): its joined keys in
	// order and their counts, instead of one group object per key — a
	// high-cardinality top (a path with ids) sends hundreds of thousands.
	Counts *countsWire `json:"counts,omitempty"`

	// agg is the peer's aggregator while the partial stays in process;
	// Encode turns it into Groups.
	agg *aggregator
}

// countsWire lists keys (joined with \x00 for several by-fields), sorted,
// and their counts.
type countsWire struct {
	K []string `json:"k"`
	N []int64  `json:"n"`
}

type wireRow struct {
	T int64          `json:"t"`
	B string         `json:"b"`
	C uint32         `json:"c"`
	F map[string]any `json:"f"`
}

type wirePartial struct {
	Partial
	Events []wireRow `json:"events,omitempty"`
}

// wireValue maps a row value to JSON: a Time is {"$t":"<ns>"} so that it
// survives the trip exactly.
func wireValue(v any) any {
	if t, ok := v.(Time); ok {
		return map[string]string{"$t": strconv.FormatInt(int64(t), 10)}
	}
	return v
}

// Encode writes the partial's versioned wire form (JSON).
func (p *Partial) Encode() ([]byte, error) {
	if p.agg != nil && p.Groups == nil && p.Counts == nil {
		if p.agg.countOnly {
			p.Counts = p.agg.wireCounts()
		} else {
			p.Groups = p.agg.wireGroups()
		}
	}
	w := wirePartial{Partial: *p}
	w.V = WireVersion
	w.Events = make([]wireRow, len(p.Events))
	for i, r := range p.Events {
		f := make(map[string]any, len(r.F))
		for k, v := range r.F {
			f[k] = wireValue(v)
		}
		w.Events[i] = wireRow{T: r.T, B: r.B, C: r.C, F: f}
	}
	return json.Marshal(&w)
}

// DecodePartial reads a partial's wire form; an unknown version is an error.
func DecodePartial(b []byte) (*Partial, error) {
	var probe struct {
		V int `json:"v"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return nil, fmt.Errorf("decode partial: %w", err)
	}
	if probe.V != WireVersion {
		return nil, fmt.Errorf("decode partial: wire version %d, this build speaks %d", probe.V, WireVersion)
	}
	var w wirePartial
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&w); err != nil {
		return nil, fmt.Errorf("decode partial: %w", err)
	}
	p := w.Partial
	p.Events = make([]Row, len(w.Events))
	for i, r := range w.Events {
		for k, v := range r.F {
			r.F[k] = normalizeWire(v)
		}
		p.Events[i] = Row{T: r.T, B: r.B, C: r.C, F: r.F}
	}
	if p.Kind != "events" && p.Kind != "agg" {
		return nil, fmt.Errorf("decode partial: unknown kind %q", p.Kind)
	}
	if c := p.Counts; c != nil && len(c.K) != len(c.N) {
		return nil, fmt.Errorf("decode partial: counts of %d keys with %d numbers", len(c.K), len(c.N))
	}
	return &p, nil
}

func normalizeWire(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	case []any:
		out := make([]string, 0, len(x))
		for _, e := range x {
			if s, ok := str(normalizeWire(e)); ok {
				out = append(out, s)
			}
		}
		return out
	case map[string]any:
		if t, ok := x["$t"].(string); ok {
			n, _ := strconv.ParseInt(t, 10, 64)
			return Time(n)
		}
		return nil
	}
	return v
}
