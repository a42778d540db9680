package query

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// WireVersion is the version of the partial-result wire form. A decoder
// refuses any other version rather than guess (see DESIGN.md).
const WireVersion = 1

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

	// agg is the peer's aggregator while the partial stays in process;
	// Encode turns it into Groups.
	agg *aggregator
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
	if p.agg != nil && p.Groups == nil {
		p.Groups = p.agg.wireGroups()
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
