package query

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
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
	// BX names B in the blobs after the JSON (wireblobs.go).
	BX *blobRef `json:"bx,omitempty"`
	O  int64    `json:"o,omitempty"`
	T  int64    `json:"t,omitempty"`
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
	k, n, err := frontWalk(c.B, true)
	if err != nil {
		return err
	}
	c.K, c.N, c.B = k, n, nil
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
func (p *Plan) SetBinaryCounts(on bool) { p.forms.counts = on }

// SetBinarySets makes EncodePartial front-code dc/values sets (aggState.SB;
// the head that sent the search asked for it, api.SearchRequest.SetsBinary).
func (p *Plan) SetBinarySets(on bool) { p.forms.sets = on }

// SetBinaryNums makes EncodePartial write perc/median values packed
// (aggState.NB, wirenums.go; the head that sent the search asked for it,
// api.SearchRequest.NumsBinary).
func (p *Plan) SetBinaryNums(on bool) { p.forms.nums = on }

// wireForms are the compact forms a partial is written in, each only for
// a head that asked for it; sole: each dc's count and perc's value instead
// of its set or values (sole.go).
type wireForms struct{ counts, sets, nums, blobs, sole bool }

// SetBlobs makes EncodePartial write byte fields after the JSON
// (wireblobs.go; the head that sent the search reads framed messages,
// api.SearchRequest.Framed).
func (p *Plan) SetBlobs(on bool) { p.forms.blobs = on }

// EncodePartial encodes a partial of this search for its head
// (Partial.EncodeCounts), a top's counts bounded when the head asked
// (SetCountsTop), sets front-coded when it asked (SetBinarySets).
func (p *Plan) EncodePartial(pt *Partial) ([]byte, error) {
	if p.countsTop > 0 && pt.agg != nil && pt.agg.countOnly && pt.Groups == nil && pt.Counts == nil {
		pt.Counts = pt.agg.boundedCounts(p.countsTop, p.TopLimit())
	}
	return pt.encode(p.forms)
}

// EncodeCounts is Encode with a count-only aggregate's keys front-coded
// (countsWire.B) when binaryCounts is set: only for a search head that
// asked for it (api.SearchRequest.CountsBinary).
func (p *Partial) EncodeCounts(binaryCounts bool) ([]byte, error) {
	return p.encode(wireForms{counts: binaryCounts})
}

// encode is the wire form, counts, sets and numbers in the compact forms
// asked.
func (p *Partial) encode(forms wireForms) ([]byte, error) {
	if p.agg != nil && p.Groups == nil && p.Counts == nil {
		if p.agg.countOnly {
			p.Counts = p.agg.wireCounts()
		} else {
			p.Groups = p.agg.wireGroups()
		}
	}
	w := wirePartial{Partial: *p}
	if forms.counts && p.Counts != nil {
		c := *p.Counts
		c.frontCode()
		w.Counts = &c
	}
	var sole []*AggSpec
	if forms.sole && p.agg != nil {
		sole = soleSpecs(p.agg.specs)
	}
	if forms.sets || forms.nums || sole != nil {
		w.Groups = compactStates(p.Groups, forms, sole)
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
	var bw blobWriter
	if forms.blobs {
		moveToBlobs(&w, &bw)
	}
	js, err := json.Marshal(&w)
	if err != nil || len(bw.b) == 0 {
		return js, err
	}
	out := make([]byte, 0, 1+binary.MaxVarintLen64+len(js)+len(bw.b))
	out = append(out, partialBlobs)
	out = binary.AppendUvarint(out, uint64(len(js)))
	out = append(out, js...)
	return append(out, bw.b...), nil
}

// DecodePartial reads a partial's wire form; an unknown version is an error.
func DecodePartial(b []byte) (*Partial, error) {
	// One pass: the version is checked after the decode (a partial of
	// another version that does not even decode is named by its version).
	b, blobs, err := splitBlobs(b)
	if err != nil {
		return nil, err
	}
	var w wirePartial
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(&w); err != nil {
		var probe struct {
			V int `json:"v"`
		}
		if json.Unmarshal(b, &probe) == nil && probe.V != WireVersion {
			return nil, fmt.Errorf("decode partial: wire version %d, this build speaks %d", probe.V, WireVersion)
		}
		return nil, fmt.Errorf("decode partial: %w", err)
	}
	if w.V != WireVersion {
		return nil, fmt.Errorf("decode partial: wire version %d, this build speaks %d", w.V, WireVersion)
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, fmt.Errorf("decode partial: data after the partial")
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
	if err := takeBlobs(&p, blobs); err != nil {
		return nil, fmt.Errorf("decode partial: %w", err)
	}
	if c := p.Counts; c != nil && c.B != nil {
		if len(c.K) > 0 || len(c.N) > 0 {
			return nil, fmt.Errorf("decode partial: counts both listed and front-coded")
		}
		if err := c.frontDecode(); err != nil {
			return nil, fmt.Errorf("decode partial: front-coded counts: %w", err)
		}
	}
	if err := expandStates(p.Groups); err != nil {
		return nil, fmt.Errorf("decode partial: compact state: %w", err)
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

// compactStates is groups with every dc/values set front-coded (SB: per
// value the length it shares with the value before it, then the length and
// bytes of the rest, each length a uvarint) when forms.sets, every
// perc/median value list packed (NB, packNums) when forms.nums, and each
// aggregate sole names in its final form (a dc's count DN, a perc's value
// PV: sole.go).
// The groups' states are copied, never changed.
func compactStates(groups []group, forms wireForms, sole []*AggSpec) []group {
	out, cloned := groups, false
	for i := range groups {
		var states []*aggState
		for j, st := range groups[i].States {
			if st == nil {
				continue
			}
			c, final := *st, false
			if j < len(sole) && sole[j] != nil {
				c, final = soleState(st, sole[j])
			}
			sets, nums := forms.sets && len(c.Set) > 0, forms.nums && len(c.Nums) > 0
			if !sets && !nums && !final {
				continue
			}
			if states == nil {
				states = slices.Clone(groups[i].States)
			}
			if sets {
				c.SB, c.Set = frontCodeStrings(c.Set), nil
			}
			if nums {
				c.NB, c.Nums = packNums(c.Nums), nil
			}
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

// expandStates turns every SB back into Set and every NB back into Nums;
// a state with both forms of either, or a malformed one, is an error,
// never a guess.
func expandStates(groups []group) error {
	for _, g := range groups {
		for _, st := range g.States {
			if st == nil {
				continue
			}
			if st.SB != nil {
				if len(st.Set) > 0 {
					return fmt.Errorf("a set both listed and front-coded")
				}
				vals, err := frontDecodeStrings(st.SB)
				if err != nil {
					return err
				}
				st.Set, st.SB = vals, nil
			}
			if st.NB != nil {
				if len(st.Nums) > 0 {
					return fmt.Errorf("values both listed and packed")
				}
				nums, err := unpackNums(st.NB)
				if err != nil {
					return err
				}
				st.Nums, st.NB = nums, nil
			}
		}
	}
	return nil
}

func frontDecodeStrings(b []byte) ([]string, error) {
	out, _, err := frontWalk(b, false)
	return out, err
}

// frontAppend appends v front-coded after prev: the length it shares with
// prev, then the length and bytes of the rest, each length a uvarint.
func frontAppend(b []byte, prev, v string) []byte {
	m := min(len(prev), len(v))
	l := 0
	for l < m && prev[l] == v[l] {
		l++
	}
	if r := len(v) - l; l < 0x80 && r < 0x80 { // the usual one-byte lengths
		b = append(b, byte(l), byte(r))
	} else {
		b = binary.AppendUvarint(b, uint64(l))
		b = binary.AppendUvarint(b, uint64(r))
	}
	return append(b, v[l:]...)
}

// frontWalk reads front-coded values (frontAppend), each followed by a
// uvarint count when counted; malformed input is an error, never a guess.
// A first pass checks the form and sums the values' lengths; the second
// builds them all in one buffer that becomes one string the values are
// substrings of (never written after): one allocation for the lot, not
// one per value or per buffer growth — a partial's set of 40k client
// addresses decoded in a third of the time.
func frontWalk(b []byte, counted bool) (vals []string, counts []int64, err error) {
	size, n, err := frontSize(b, counted)
	if err != nil || n == 0 {
		return nil, nil, err
	}
	arena := make([]byte, 0, size)
	ends := make([]int, 0, n)
	if counted {
		counts = make([]int64, 0, n)
	}
	prev, i := 0, 0 // where the previous value starts in arena; where b is read
	for i < len(b) {
		shared, k := uvarintAt(b, i)
		rest, k2 := uvarintAt(b, i+k)
		i += k + k2
		start := len(arena)
		arena = append(arena, arena[prev:prev+int(shared)]...)
		arena = append(arena, b[i:i+int(rest)]...)
		i += int(rest)
		ends = append(ends, len(arena))
		prev = start
		if counted {
			c, k := uvarintAt(b, i)
			i += k
			counts = append(counts, int64(c))
		}
	}
	all := unsafeString(arena)
	vals = make([]string, len(ends))
	from := 0
	for j, e := range ends {
		vals[j] = all[from:e]
		from = e
	}
	return vals, counts, nil
}

// uvarintAt is the uvarint at b[i:] and its length, for input frontSize
// checked.
func uvarintAt(b []byte, i int) (uint64, int) {
	if b[i] < 0x80 {
		return uint64(b[i]), 1
	}
	return binary.Uvarint(b[i:])
}

// frontSize checks front-coded input and returns the total length of its
// values and how many there are.
func frontSize(b []byte, counted bool) (size, n int, err error) {
	i, prevLen := 0, 0
	next := func() (uint64, error) {
		v, k := binary.Uvarint(b[i:])
		if k <= 0 {
			return 0, fmt.Errorf("bad varint at %d bytes from the end", len(b)-i)
		}
		i += k
		return v, nil
	}
	for i < len(b) {
		shared, err := next()
		if err != nil {
			return 0, 0, err
		}
		rest, err := next()
		if err != nil {
			return 0, 0, err
		}
		if shared > uint64(prevLen) || rest > uint64(len(b)-i) {
			return 0, 0, fmt.Errorf("a value sharing %d bytes with one of %d, with %d more of %d left", shared, prevLen, rest, len(b)-i)
		}
		i += int(rest)
		prevLen = int(shared) + int(rest)
		if size += prevLen; size > maxFrontBytes {
			return 0, 0, fmt.Errorf("front-coded values of more than %d bytes", maxFrontBytes)
		}
		n++
		if counted {
			c, err := next()
			if err != nil {
				return 0, 0, err
			}
			if c > math.MaxInt64 {
				return 0, 0, fmt.Errorf("a count of %d", c)
			}
		}
	}
	return size, n, nil
}

// maxFrontBytes bounds what a front-coded field may expand to (a value
// can share every byte of the one before: 3 bytes per value of any
// length). A partial's decoded size is charged to the search's memory
// budget after the decode; this keeps the decode itself bounded.
const maxFrontBytes = 1 << 30
