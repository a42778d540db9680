package query

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"
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
// and their counts: as JSON arrays K and N, or — when the search head asked
// for it (api.SearchRequest.CountsBinary) — front-coded in B: per key the
// length it shares with the key before it, the length and bytes of the
// rest, and its count, each length and count a uvarint. A high-cardinality
// top (a path with ids) sends a third of the bytes and decodes in a sixth
// of the time; a head that did not ask never gets B (it would read no keys).
//
// O and T make it bounded (topcounts.go; only for a head that asked,
// api.SearchRequest.CountsTop): the keys listed are the partial's largest
// counts, O the largest count of a key left out (> 0) and T the sum of
// every count, listed or not.
type countsWire struct {
	K []string `json:"k,omitempty"`
	N []int64  `json:"n,omitempty"`
	B []byte   `json:"b,omitempty"`
	O int64    `json:"o,omitempty"`
	T int64    `json:"t,omitempty"`
}

// frontCode fills B from K and N (which it clears).
func (c *countsWire) frontCode() {
	b := make([]byte, 0, 8*len(c.K))
	prev := ""
	for i, k := range c.K {
		b = frontAppend(b, prev, k)
		b = binary.AppendUvarint(b, uint64(c.N[i]))
		prev = k
	}
	c.B, c.K, c.N = b, nil, nil
}

// frontDecode fills K and N from B (which it clears); a malformed B is an
// error, never a guess.
func (c *countsWire) frontDecode() error {
	err := frontWalk(c.B, true, func(k string, n int64) {
		c.K, c.N = append(c.K, k), append(c.N, n)
	})
	if err != nil {
		return err
	}
	c.B = nil
	return nil
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
func (p *Partial) Encode() ([]byte, error) { return p.EncodeCounts(false) }

// SetBinaryCounts makes EncodePartial front-code count-only aggregates
// (the head that sent the search asked for it, api.SearchRequest.CountsBinary).
func (p *Plan) SetBinaryCounts(on bool) { p.binaryCounts = on }

// SetBinarySets makes EncodePartial front-code dc/values sets (aggState.SB;
// the head that sent the search asked for it, api.SearchRequest.SetsBinary).
func (p *Plan) SetBinarySets(on bool) { p.binarySets = on }

// EncodePartial encodes a partial of this search for its head
// (Partial.EncodeCounts), a top's counts bounded when the head asked
// (SetCountsTop), sets front-coded when it asked (SetBinarySets).
func (p *Plan) EncodePartial(pt *Partial) ([]byte, error) {
	if p.countsTop > 0 && pt.agg != nil && pt.agg.countOnly && pt.Groups == nil && pt.Counts == nil {
		pt.Counts = pt.agg.boundedCounts(p.countsTop)
	}
	return pt.encode(p.binaryCounts, p.binarySets)
}

// EncodeCounts is Encode with a count-only aggregate's keys front-coded
// (countsWire.B) when binaryCounts is set: only for a search head that
// asked for it (api.SearchRequest.CountsBinary).
func (p *Partial) EncodeCounts(binaryCounts bool) ([]byte, error) {
	return p.encode(binaryCounts, false)
}

// encode is the wire form, counts and sets front-coded as asked.
func (p *Partial) encode(binaryCounts, binarySets bool) ([]byte, error) {
	if p.agg != nil && p.Groups == nil && p.Counts == nil {
		if p.agg.countOnly {
			p.Counts = p.agg.wireCounts()
		} else {
			p.Groups = p.agg.wireGroups()
		}
	}
	w := wirePartial{Partial: *p}
	if binaryCounts && p.Counts != nil {
		c := *p.Counts
		c.frontCode()
		w.Counts = &c
	}
	if binarySets {
		w.Groups = frontCodeSets(p.Groups)
	}
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
	if c := p.Counts; c != nil && c.B != nil {
		if len(c.K) > 0 || len(c.N) > 0 {
			return nil, fmt.Errorf("decode partial: counts both listed and front-coded")
		}
		if err := c.frontDecode(); err != nil {
			return nil, fmt.Errorf("decode partial: front-coded counts: %w", err)
		}
	}
	if err := frontDecodeSets(p.Groups); err != nil {
		return nil, fmt.Errorf("decode partial: front-coded set: %w", err)
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

// frontCodeSets is groups with every dc/values set front-coded (SB): per
// value the length it shares with the value before it, then the length and
// bytes of the rest, each length a uvarint. The groups' states are copied,
// never changed.
func frontCodeSets(groups []group) []group {
	out, cloned := groups, false
	for i := range groups {
		var states []*aggState
		for j, st := range groups[i].States {
			if st == nil || len(st.Set) == 0 {
				continue
			}
			if states == nil {
				states = slices.Clone(groups[i].States)
			}
			c := *st
			c.SB, c.Set = frontCodeStrings(st.Set), nil
			states[j] = &c
		}
		if states != nil {
			if !cloned {
				out, cloned = slices.Clone(groups), true
			}
			out[i].States = states
		}
	}
	return out
}

func frontCodeStrings(vals []string) []byte {
	b := make([]byte, 0, 4*len(vals))
	prev := ""
	for _, v := range vals {
		b = frontAppend(b, prev, v)
		prev = v
	}
	return b
}

// frontDecodeSets turns every SB back into Set; a state with both, or a
// malformed SB, is an error, never a guess.
func frontDecodeSets(groups []group) error {
	for _, g := range groups {
		for _, st := range g.States {
			if st == nil || st.SB == nil {
				continue
			}
			if len(st.Set) > 0 {
				return fmt.Errorf("a set both listed and front-coded")
			}
			vals, err := frontDecodeStrings(st.SB)
			if err != nil {
				return err
			}
			st.Set, st.SB = vals, nil
		}
	}
	return nil
}

func frontDecodeStrings(b []byte) ([]string, error) {
	var out []string
	err := frontWalk(b, false, func(v string, _ int64) { out = append(out, v) })
	return out, err
}

// frontAppend appends v front-coded after prev: the length it shares with
// prev, then the length and bytes of the rest, each length a uvarint.
func frontAppend(b []byte, prev, v string) []byte {
	l := 0
	for l < len(prev) && l < len(v) && prev[l] == v[l] {
		l++
	}
	b = binary.AppendUvarint(b, uint64(l))
	b = binary.AppendUvarint(b, uint64(len(v)-l))
	return append(b, v[l:]...)
}

// frontWalk reads front-coded values (frontAppend), each followed by a
// uvarint count when counted, and calls each in order; malformed input
// is an error, never a guess.
func frontWalk(b []byte, counted bool, each func(v string, n int64)) error {
	prev := ""
	next := func() (uint64, error) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, fmt.Errorf("bad varint at %d bytes from the end", len(b))
		}
		b = b[n:]
		return v, nil
	}
	for len(b) > 0 {
		shared, err := next()
		if err != nil {
			return err
		}
		rest, err := next()
		if err != nil {
			return err
		}
		if shared > uint64(len(prev)) || rest > uint64(len(b)) {
			return fmt.Errorf("a value sharing %d bytes with one of %d, with %d more of %d left", shared, len(prev), rest, len(b))
		}
		v := prev[:shared] + string(b[:rest])
		b = b[rest:]
		var n uint64
		if counted {
			if n, err = next(); err != nil {
				return err
			}
			if n > math.MaxInt64 {
				return fmt.Errorf("a count of %d", n)
			}
		}
		each(v, int64(n))
		prev = v
	}
	return nil
}
