package knowledge

import (
	"bytes"
	"time"
)

// Time finds the event's timestamp; ok=false means the caller uses the
// arrival time. DATETIME_CONFIG = CURRENT or NONE → ok=false. Otherwise the
// search starts after the first TIME_PREFIX match (no match → ok=false) and
// the timestamp must lie within MAX_TIMESTAMP_LOOKAHEAD bytes of that point;
// it is the earliest token there that TIME_FORMAT (or, without one, a
// built-in format) parses. The zone is the text's when the format reads one
// (%z, %Z, or a built-in format's zone), else TZ, else UTC. now fills a year
// or date the format lacks (a date more than two days ahead of now is taken
// as last year's). The result is in UTC.
func (r *Rule) Time(raw []byte, now time.Time) (time.Time, bool) {
	if r == nil || r.timeMode == timeArrival {
		return time.Time{}, false
	}
	return r.findTime(raw, now)
}

// findTime is Time without DATETIME_CONFIG: line merging looks for dates
// also when the event time is the arrival time.
func (r *Rule) findTime(raw []byte, now time.Time) (time.Time, bool) {
	if r.timeMode == timeJSON {
		return r.jsonTime(raw, now)
	}
	from, ok := r.prefixEnd(raw)
	if !ok {
		return time.Time{}, false
	}
	w := raw[from:]
	if r.lookahead > 0 && len(w) > r.lookahead {
		w = w[:r.lookahead]
	}
	return r.scan(w, now)
}

// prefixEnd is where the TIME_PREFIX match ends (0 without one).
func (r *Rule) prefixEnd(raw []byte) (int, bool) {
	switch {
	case r.timePrefix == nil || r.prefixStart:
		return 0, true
	case r.prefixLiteral != nil:
		i := bytes.Index(raw, r.prefixLiteral)
		return i + len(r.prefixLiteral), i >= 0
	}
	loc := r.timePrefix.FindIndex(raw)
	if loc == nil {
		return 0, false
	}
	return loc[1], true
}

// scan tries each token start of w, earliest first.
func (r *Rule) scan(w []byte, now time.Time) (time.Time, bool) {
	f := r.format
	for p := 0; p < len(w); p++ {
		if f == nil {
			if t, ok := autoTime(w, p, r.loc, now); ok && r.plausible(t, now) {
				return t, true
			}
			continue
		}
		if !f.canStart(w, p) {
			continue
		}
		if t, ok := f.parse(w[p:], r.loc, now); ok && r.plausible(t, now) {
			return t, true
		}
	}
	return time.Time{}, false
}

// jsonTime takes the time from the first "timestamp", "time" or
// "@timestamp" key in raw whose value parses: a string in a built-in
// format, or a number of epoch seconds (10 digits, optional fraction) or
// milliseconds (13 digits). A simple scan, not a JSON parser: nesting and
// escapes are not interpreted. One search for "time", which all three
// keys hold, finds them in a pass.
func (r *Rule) jsonTime(raw []byte, now time.Time) (time.Time, bool) {
	for p := 0; ; {
		i := bytes.Index(raw[p:], timeWord)
		if i < 0 {
			return time.Time{}, false
		}
		at := p + i
		p = at + len(timeWord)
		end := p
		if bytes.HasPrefix(raw[end:], stampWord) {
			end += len(stampWord)
		}
		start := at - 1
		if start >= 0 && raw[start] == '@' && end > p { // "@timestamp", not "@time"
			start--
		}
		if start < 0 || raw[start] != '"' || end >= len(raw) || raw[end] != '"' {
			continue
		}
		if t, ok := jsonValueTime(raw[end+1:], r.loc, now); ok && r.plausible(t, now) {
			return t, true
		}
	}
}

var timeWord, stampWord = []byte("time"), []byte("stamp")

// jsonValueTime parses the value after a key: `: "…"` or `: 123…`.
func jsonValueTime(b []byte, loc *time.Location, now time.Time) (time.Time, bool) {
	p := 0
	for p < len(b) && isSpace(b[p]) {
		p++
	}
	if p >= len(b) || b[p] != ':' {
		return time.Time{}, false
	}
	p++
	for p < len(b) && isSpace(b[p]) {
		p++
	}
	if p >= len(b) {
		return time.Time{}, false
	}
	if b[p] != '"' {
		return epochTime(b[p:])
	}
	v := b[p+1:]
	if end := bytes.IndexByte(v, '"'); end >= 0 {
		v = v[:end]
	}
	for i := 0; i < len(v); i++ {
		if t, ok := autoTime(v, i, loc, now); ok {
			return t, true
		}
	}
	return time.Time{}, false
}

// plausible applies MAX_DAYS_AGO and MAX_DAYS_HENCE (when set) around now;
// a zero now disables them.
func (r *Rule) plausible(t, now time.Time) bool {
	if now.IsZero() {
		return true
	}
	const day = 24 * time.Hour
	if r.maxDaysAgo >= 0 && t.Before(now.Add(-time.Duration(r.maxDaysAgo)*day)) {
		return false
	}
	return r.maxDaysHence < 0 || !t.After(now.Add(time.Duration(r.maxDaysHence)*day))
}
