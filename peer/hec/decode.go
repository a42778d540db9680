package hec

import (
	"bytes"
	"math"
	"strconv"
	"time"
	"unsafe"

	"github.com/quarry-dev/quarry/peer/store"
	"github.com/valyala/fastjson"
)

// Defaults fill what an envelope leaves out.
type Defaults struct {
	Index      string
	Host       string
	Source     string
	Sourcetype string
	Now        int64 // unix ns, the time of events without one
}

// Reply is a HEC answer: Splunk's shape, plus the HTTP status.
type Reply struct {
	Status int
	Code   int
	Text   string
	// InvalidEvent is the 0-based number of the offending event for codes
	// 6, 7, 12, 13 and 15; -1 when it does not apply.
	InvalidEvent int
	AckID        int64 // -1 when none
}

// Splunk's HEC replies (SPEC §4).
var (
	replySuccess       = Reply{Status: 200, Code: 0, Text: "Success", InvalidEvent: -1, AckID: -1}
	replyTokenDisabled = Reply{Status: 403, Code: 1, Text: "Token disabled", InvalidEvent: -1, AckID: -1}
	replyTokenRequired = Reply{Status: 401, Code: 2, Text: "Token is required", InvalidEvent: -1, AckID: -1}
	replyInvalidAuth   = Reply{Status: 401, Code: 3, Text: "Invalid authorization", InvalidEvent: -1, AckID: -1}
	replyInvalidToken  = Reply{Status: 403, Code: 4, Text: "Invalid token", InvalidEvent: -1, AckID: -1}
	replyNoData        = Reply{Status: 400, Code: 5, Text: "No data", InvalidEvent: -1, AckID: -1}
	replyInvalidFormat = Reply{Status: 400, Code: 6, Text: "Invalid data format", InvalidEvent: -1, AckID: -1}
	replyIncorrectIdx  = Reply{Status: 400, Code: 7, Text: "Incorrect index", InvalidEvent: -1, AckID: -1}
	replyInternal      = Reply{Status: 500, Code: 8, Text: "Internal server error", InvalidEvent: -1, AckID: -1}
	replyBusy          = Reply{Status: 503, Code: 9, Text: "Server is busy", InvalidEvent: -1, AckID: -1}
	replyNoChannel     = Reply{Status: 400, Code: 10, Text: "Data channel is missing", InvalidEvent: -1, AckID: -1}
	replyBadChannel    = Reply{Status: 400, Code: 11, Text: "Invalid data channel", InvalidEvent: -1, AckID: -1}
	replyEventRequired = Reply{Status: 400, Code: 12, Text: "Event field is required", InvalidEvent: -1, AckID: -1}
	replyEventBlank    = Reply{Status: 400, Code: 13, Text: "Event field cannot be blank", InvalidEvent: -1, AckID: -1}
	replyAckDisabled   = Reply{Status: 400, Code: 14, Text: "ACK is disabled", InvalidEvent: -1, AckID: -1}
	replyBadFields     = Reply{Status: 400, Code: 15, Text: "Error in handling indexed fields", InvalidEvent: -1, AckID: -1}
	replyHealthy       = Reply{Status: 200, Code: 17, Text: "HEC is healthy", InvalidEvent: -1, AckID: -1}
	replyUnhealthy     = Reply{Status: 503, Code: 18, Text: "HEC is unhealthy, queues are full", InvalidEvent: -1, AckID: -1}
	replyTooLarge      = Reply{Status: 413, Code: 6, Text: "Content too large", InvalidEvent: -1, AckID: -1}
)

func (r Reply) at(event int) Reply {
	r.InvalidEvent = event
	return r
}

// appendJSON writes the reply body.
func (r Reply) appendJSON(dst []byte) []byte {
	dst = append(dst, `{"text":`...)
	dst = strconv.AppendQuote(dst, r.Text)
	dst = append(dst, `,"code":`...)
	dst = strconv.AppendInt(dst, int64(r.Code), 10)
	if r.InvalidEvent >= 0 {
		dst = append(dst, `,"invalid-event-number":`...)
		dst = strconv.AppendInt(dst, int64(r.InvalidEvent), 10)
	}
	if r.AckID >= 0 {
		dst = append(dst, `,"ackId":`...)
		dst = strconv.AppendInt(dst, r.AckID, 10)
	}
	return append(dst, '}')
}

// decoder turns a /services/collector/event body into store events. It is
// reused across requests once the store has released a request's events:
// the events point into the scanner's copy of the body (zero-copy views,
// COSTS.md: 795 ns/event against 6,910 for encoding/json).
type decoder struct {
	sc     fastjson.Scanner
	evs    []store.Event
	fields []store.Field
	num    []byte
	raws   []byte // JSON text of non-string events

	// maxValues bounds the JSON values of one envelope (0: the default).
	maxValues int
	// charge, when set, reserves what the decoder's memory grows by from
	// the in-flight budget (nil in tests and benchmarks: no accounting);
	// charged is what it holds. The footprint counts the scanner's copy of
	// the largest body and the value cache of the largest envelope it has
	// parsed, as fastjson keeps both for reuse.
	charge    func(n int64) *Reply
	charged   int64
	bodyCap   int
	valuesCap int
}

// DefaultMaxEventValues bounds the JSON values (objects, arrays, strings,
// numbers…) of one envelope: fastjson spends about valueBytes on each, so
// an 8 MiB body of "0," would otherwise cost 2 GB.
const DefaultMaxEventValues = 65536

const (
	valueBytes = 192 // a fastjson Value, its place in its parent, the cache's doubling
	eventBytes = int64(unsafe.Sizeof(store.Event{}))
	fieldBytes = int64(unsafe.Sizeof(store.Field{}))
)

// footprint is the memory the decoder holds.
func (d *decoder) footprint() int64 {
	return int64(d.bodyCap) + int64(d.valuesCap)*valueBytes + int64(cap(d.evs))*eventBytes +
		int64(cap(d.fields))*fieldBytes + int64(cap(d.raws)) + int64(cap(d.num))
}

// chargeGrowth reserves what the footprint grew by since the last charge.
func (d *decoder) chargeGrowth() *Reply {
	fp := d.footprint()
	if fp <= d.charged {
		return nil
	}
	if rp := d.charge(fp - d.charged); rp != nil {
		return rp
	}
	d.charged = fp
	return nil
}

// eventSize is what the 1 MiB event limit (MaxEventBytes) measures: the
// whole event as stored — _raw, host, source, sourcetype, index and every
// indexed field's name and value.
func eventSize(e *store.Event) int {
	n := len(e.Raw) + len(e.Host) + len(e.Source) + len(e.Sourcetype) + len(e.Index)
	for i := range e.Fields {
		n += len(e.Fields[i].Name) + len(e.Fields[i].Value)
	}
	return n
}

// envelopeValues bounds the JSON values of each top-level value of body
// before anything parses it: it returns the most values one of them holds
// and the number of the first holding more than limit (-1 when none).
// Every value but a top-level one follows a ',', ':' or '[' outside a
// string, so counting those bounds the values from above. It stops at a
// top-level value that is not an object or an array, or one cut short: the
// parser refuses that envelope on its own.
func envelopeValues(body []byte, limit int) (most, bad int) {
	i := 0
	for n := 0; ; n++ {
		for i < len(body) && (body[i] == ' ' || body[i] == '\n' || body[i] == '\t' || body[i] == '\r') {
			i++
		}
		if i >= len(body) || (body[i] != '{' && body[i] != '[') {
			return most, -1
		}
		depth, vals := 0, 1
	scan:
		for i < len(body) {
			switch body[i] {
			case '"':
				j := endOfString(body, i+1)
				if j < 0 {
					break scan
				}
				i = j
			case '{':
				depth++
			case '[':
				depth++
				vals++
			case ',', ':':
				vals++
			case '}', ']':
				depth--
				if depth == 0 {
					i++
					break scan
				}
			}
			i++
		}
		most = max(most, vals)
		if vals > limit {
			return most, n
		}
		if depth != 0 {
			return most, -1
		}
	}
}

// countValues counts the values the parser built for v.
func countValues(v *fastjson.Value) int {
	n := 1
	switch v.Type() {
	case fastjson.TypeObject:
		o, _ := v.Object()
		o.Visit(func(_ []byte, c *fastjson.Value) { n += countValues(c) })
	case fastjson.TypeArray:
		a, _ := v.Array()
		for _, c := range a {
			n += countValues(c)
		}
	}
	return n
}

// endOfString is the index of the quote that closes the JSON string
// starting at from, -1 when the string is cut short.
func endOfString(b []byte, from int) int {
	for {
		k := bytes.IndexByte(b[from:], '"')
		if k < 0 {
			return -1
		}
		q := from + k
		esc := 0
		for p := q - 1; p >= 0 && b[p] == '\\'; p-- {
			esc++
		}
		if esc%2 == 0 {
			return q
		}
		from = q + 1
	}
}

// indexAllowed decides whether a token may write to an index.
type indexAllowed func(index string) bool

// decodeEnvelopes parses concatenated envelopes. It validates every event
// before returning any: the request is all or nothing.
func (d *decoder) decodeEnvelopes(body []byte, def Defaults, allowed indexAllowed, maxEvent int) ([]store.Event, Reply) {
	d.evs = d.evs[:0]
	d.fields = d.fields[:0]
	d.raws = d.raws[:0]
	maxValues := d.maxValues
	if maxValues <= 0 {
		maxValues = DefaultMaxEventValues
	}
	// No envelope holds more values than the body has ',', ':' and '['
	// (plus one); only a body with more than maxValues of them is scanned
	// envelope by envelope, which costs a sixth of what parsing does.
	bound := valuesBound(body)
	if bound > maxValues {
		most, bad := envelopeValues(body, maxValues)
		if bad >= 0 {
			return nil, replyInvalidFormat.at(bad)
		}
		bound = most
	}
	d.bodyCap = max(d.bodyCap, len(body))
	if d.charge != nil {
		if rp := d.chargeGrowth(); rp != nil {
			return nil, *rp
		}
	}
	evs, r := d.decodeAll(body, def, allowed, maxEvent)
	if r.Code != 0 {
		// A refused envelope was parsed whole before it was refused: the
		// parser's value cache may now be as large as the bound.
		d.valuesCap = max(d.valuesCap, bound)
	}
	return evs, r
}

// valuesBound bounds the JSON values of any one top-level value of body:
// every value but a top-level one follows a ',', ':' or '['.
func valuesBound(body []byte) int {
	return bytes.Count(body, []byte{','}) + bytes.Count(body, []byte{':'}) + bytes.Count(body, []byte{'['}) + 1
}

// decodeAll decodes the envelopes of a body whose values are bounded.
func (d *decoder) decodeAll(body []byte, def Defaults, allowed indexAllowed, maxEvent int) ([]store.Event, Reply) {
	// Slices into d.fields and d.raws stay valid when those grow: the old
	// backing arrays are never written again during this request.
	d.sc.InitBytes(body)
	n := 0
	for d.sc.Next() {
		v := d.sc.Value()
		o, err := v.Object()
		if err != nil {
			return nil, replyInvalidFormat.at(n)
		}
		env := pendingEnvelope{e: store.Event{Time: def.Now}, n: n}
		env.bad.Code = -1
		fieldStart := len(d.fields)
		env.vals = 1 // the values of this envelope, as the parser holds them
		o.Visit(func(key []byte, v *fastjson.Value) {
			d.envelopeKey(&env, key, v)
		})
		if rp, ok := d.addEvent(&env, fieldStart, def, allowed, maxEvent); !ok {
			return nil, rp
		}
		n++
	}
	if err := d.sc.Error(); err != nil {
		return nil, replyInvalidFormat.at(n)
	}
	if n == 0 {
		return nil, replyNoData
	}
	return d.evs, replySuccess
}

// pendingEnvelope is one envelope being decoded: its event so far, the
// reply that refuses it (Code -1 while none does), whether it has an
// "event" key, the values the parser holds for it, and its number in the
// body.
type pendingEnvelope struct {
	e        store.Event
	bad      Reply
	hasEvent bool
	vals     int
	n        int
}

// envelopeKey reads one key of an envelope into env (an unknown key is
// ignored, its values counted all the same); after a refusal it only
// counts values.
func (d *decoder) envelopeKey(env *pendingEnvelope, key []byte, v *fastjson.Value) {
	env.vals++
	if env.bad.Code >= 0 {
		return
	}
	n := env.n
	switch string(key) {
	case "event":
		env.hasEvent = true
		switch v.Type() {
		case fastjson.TypeString:
			s, _ := v.StringBytes()
			if len(s) == 0 {
				env.bad = replyEventBlank.at(n)
				return
			}
			env.e.Raw = s
		case fastjson.TypeNull:
			env.bad = replyEventBlank.at(n)
		default:
			off := len(d.raws)
			d.raws = v.MarshalTo(d.raws)
			env.e.Raw = d.raws[off:len(d.raws):len(d.raws)]
			env.vals += valuesBound(env.e.Raw) - 1
		}
	case "time":
		t, ok := d.parseTime(v)
		if !ok {
			env.bad = replyInvalidFormat.at(n)
			return
		}
		env.e.Time = t
	case "host", "source", "sourcetype", "index":
		if v.Type() == fastjson.TypeNull {
			return
		}
		s, err := v.StringBytes()
		if err != nil {
			env.bad = replyInvalidFormat.at(n)
			return
		}
		switch string(key) {
		case "host":
			env.e.Host = s
		case "source":
			env.e.Source = s
		case "sourcetype":
			env.e.Sourcetype = s
		case "index":
			env.e.Index = string(s)
		}
	case "fields":
		d.envelopeFields(env, v)
	default: // ignored, but held by the parser all the same
		if t := v.Type(); t == fastjson.TypeObject || t == fastjson.TypeArray {
			env.vals += countValues(v) - 1
		}
	}
}

// envelopeFields appends the indexed fields of an envelope's "fields"
// object (null: none) to d.fields: each a string or a number, or an array
// of them (one field per element).
func (d *decoder) envelopeFields(env *pendingEnvelope, v *fastjson.Value) {
	n := env.n
	if v.Type() == fastjson.TypeNull {
		return
	}
	fo, err := v.Object()
	if err != nil {
		env.bad = replyBadFields.at(n)
		return
	}
	fo.Visit(func(k []byte, fv *fastjson.Value) {
		env.vals++
		if env.bad.Code >= 0 {
			return
		}
		if !validFieldName(k) {
			env.bad = replyBadFields.at(n)
			return
		}
		if fv.Type() == fastjson.TypeArray {
			arr, _ := fv.Array()
			env.vals += len(arr)
			for _, el := range arr {
				val, ok := d.fieldValue(el)
				if !ok {
					env.bad = replyBadFields.at(n)
					return
				}
				d.fields = append(d.fields, store.Field{Name: k, Value: val})
			}
			return
		}
		val, ok := d.fieldValue(fv)
		if !ok {
			env.bad = replyBadFields.at(n)
			return
		}
		d.fields = append(d.fields, store.Field{Name: k, Value: val})
	})
}

// addEvent checks a read envelope, fills what it left out from def, and
// appends its event (with the fields from fieldStart on) to d.evs; it
// returns the reply that refuses it, false, when it may not be stored.
func (d *decoder) addEvent(env *pendingEnvelope, fieldStart int, def Defaults, allowed indexAllowed, maxEvent int) (Reply, bool) {
	n := env.n
	if env.bad.Code >= 0 {
		return env.bad, false
	}
	if !env.hasEvent {
		return replyEventRequired.at(n), false
	}
	e := &env.e
	if e.Index == "" {
		e.Index = def.Index
	}
	if e.Host == nil {
		e.Host = []byte(def.Host)
	}
	if e.Source == nil {
		e.Source = []byte(def.Source)
	}
	if e.Sourcetype == nil {
		e.Sourcetype = []byte(def.Sourcetype)
	}
	if len(d.fields) > fieldStart {
		e.Fields = d.fields[fieldStart:len(d.fields):len(d.fields)]
	}
	if isMetric(e) {
		if !store.ValidIndexName(e.Index) || !allowed(e.Index) {
			return replyIncorrectIdx.at(n), false
		}
		return d.addMetric(env, maxEvent) // metric.go: each measure's size checked
	}
	if hasValueField(e.Fields) {
		return replyBadFields.at(n), false // _value names a metric's measure
	}
	if eventSize(e) > maxEvent {
		return replyInvalidFormat.at(n), false
	}
	if !store.ValidIndexName(e.Index) || !allowed(e.Index) {
		return replyIncorrectIdx.at(n), false
	}
	d.evs = append(d.evs, *e)
	d.valuesCap = max(d.valuesCap, env.vals)
	if d.charge != nil {
		if rp := d.chargeGrowth(); rp != nil {
			return *rp, false
		}
	}
	return Reply{}, true
}

// validFieldName refuses empty names, NUL bytes, and names that would
// shadow the event's own metadata in the field postings (host, source,
// sourcetype, index, and Splunk's internal _ names such as _time, _raw),
// but for _value, a metric's measure (metric.go; refused on other events).
func validFieldName(k []byte) bool {
	if len(k) == 0 || (k[0] == '_' && !bytes.Equal(k, valueField)) || bytes.IndexByte(k, 0) >= 0 {
		return false
	}
	switch string(k) {
	case "host", "source", "sourcetype", "index":
		return false
	}
	return true
}

// fieldValue accepts a string or a number (its JSON text).
func (d *decoder) fieldValue(v *fastjson.Value) ([]byte, bool) {
	switch v.Type() {
	case fastjson.TypeString:
		s, _ := v.StringBytes()
		return s, true
	case fastjson.TypeNumber:
		start := len(d.raws)
		d.raws = v.MarshalTo(d.raws)
		return d.raws[start:len(d.raws):len(d.raws)], true
	}
	return nil, false
}

// parseTime reads epoch seconds (with an optional fraction) from a number or
// a numeric string, exactly to the nanosecond for up to 9 decimals.
func (d *decoder) parseTime(v *fastjson.Value) (int64, bool) {
	var s []byte
	switch v.Type() {
	case fastjson.TypeNumber:
		d.num = v.MarshalTo(d.num[:0])
		s = d.num
	case fastjson.TypeString:
		s, _ = v.StringBytes()
	default:
		return 0, false
	}
	return parseEpoch(s)
}

func parseEpoch(s []byte) (int64, bool) {
	if len(s) == 0 {
		return 0, false
	}
	var sec, frac int64
	i := 0
	neg := false
	if s[0] == '-' {
		neg = true
		i++
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		sec = sec*10 + int64(s[i]-'0')
		if sec > math.MaxInt64/int64(time.Second)-1 {
			return 0, false
		}
		i++
	}
	if i == start {
		return 0, false
	}
	scale := int64(time.Second)
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			if scale > 1 {
				scale /= 10
				frac += int64(s[i]-'0') * scale
			}
			i++
		}
	}
	if i != len(s) {
		// exponent or junk: fall back to a float parse
		f, err := strconv.ParseFloat(string(s), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || math.Abs(f) > 9e9 {
			return 0, false
		}
		return int64(f * 1e9), true
	}
	ns := sec*int64(time.Second) + frac
	if neg {
		ns = -ns
	}
	return ns, true
}
