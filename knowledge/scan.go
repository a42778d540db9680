package knowledge

import "time"

// Byte-level readers shared by the strptime parser and the built-in
// timestamp formats. None allocates.

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}
func lower(c byte) byte { return c | 0x20 }

// digits reads between min and max decimal digits at b[p] (greedy).
func digits(b []byte, p, min, max int) (v, end int, ok bool) {
	end = p
	for end < len(b) && end-p < max && isDigit(b[end]) {
		v = v*10 + int(b[end]-'0')
		end++
	}
	return v, end, end-p >= min
}

var monthNames = [12]string{"january", "february", "march", "april", "may", "june",
	"july", "august", "september", "october", "november", "december"}

var weekdayNames = [7]string{"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"}

// monthName reads a month's full name or its three-letter abbreviation, in
// any case, and returns 1..12.
func monthName(b []byte, p int) (int, int, bool) {
	i, end, ok := name(b, p, monthNames[:])
	return i + 1, end, ok
}

func weekdayName(b []byte, p int) (int, int, bool) { return name(b, p, weekdayNames[:]) }

func name(b []byte, p int, names []string) (int, int, bool) {
	if p+3 > len(b) {
		return 0, p, false
	}
	for i, n := range names {
		if lower(b[p]) != n[0] || lower(b[p+1]) != n[1] || lower(b[p+2]) != n[2] {
			continue
		}
		if hasFoldPrefix(b[p:], n) {
			return i, p + len(n), true
		}
		return i, p + 3, true
	}
	return 0, p, false
}

func hasFoldPrefix(b []byte, s string) bool {
	if len(b) < len(s) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if lower(b[i]) != s[i] {
			return false
		}
	}
	return true
}

// parseOffset reads ±hh, ±hhmm, ±hh:mm or ±hh:mm:ss and returns seconds east
// of UTC and the bytes read.
func parseOffset(b []byte) (int, int, bool) {
	if len(b) < 3 || (b[0] != '+' && b[0] != '-') {
		return 0, 0, false
	}
	hh, p, ok := digits(b, 1, 2, 2)
	if !ok || hh > 23 {
		return 0, 0, false
	}
	var mm, ss int
	if p < len(b) && b[p] == ':' {
		if mm, p, ok = digits(b, p+1, 2, 2); !ok {
			return 0, 0, false
		}
		if p < len(b) && b[p] == ':' {
			if ss, p, ok = digits(b, p+1, 2, 2); !ok {
				return 0, 0, false
			}
		}
	} else if v, q, ok := digits(b, p, 2, 2); ok {
		mm, p = v, q
	}
	if mm > 59 || ss > 59 {
		return 0, 0, false
	}
	off := hh*3600 + mm*60 + ss
	if b[0] == '-' {
		off = -off
	}
	return off, p, true
}

// autoTime tries the built-in formats at b[p], which starts a token:
// ISO 8601 / RFC 3339 ("2006-01-02T15:04:05.000Z07:00", "2006-01-02 15:04:05"),
// access log ("02/Jan/2006:15:04:05 -0700"), epoch seconds (10 digits,
// optional fraction), epoch milliseconds (13 digits) and syslog
// ("Jan _2 15:04:05", year inferred from now).
func autoTime(b []byte, p int, loc *time.Location, now time.Time) (time.Time, bool) {
	c := b[p]
	if isLetter(c) {
		if p > 0 && isLetter(b[p-1]) {
			return time.Time{}, false
		}
		return syslogTime(b[p:], loc, now)
	}
	if !isDigit(c) || (p > 0 && isDigit(b[p-1])) {
		return time.Time{}, false
	}
	if t, ok := isoTime(b[p:], loc); ok {
		return t, true
	}
	if t, ok := accessTime(b[p:], loc); ok {
		return t, true
	}
	return epochTime(b[p:])
}

// clock reads "15:04:05" with an optional ".fff" or ",fff" fraction.
func clock(b []byte, p int, t *tm) (int, bool) {
	var ok bool
	if t.hour, p, ok = digits(b, p, 2, 2); !ok || p >= len(b) || b[p] != ':' {
		return p, false
	}
	if t.min, p, ok = digits(b, p+1, 2, 2); !ok || p >= len(b) || b[p] != ':' {
		return p, false
	}
	if t.sec, p, ok = digits(b, p+1, 2, 2); !ok {
		return p, false
	}
	if p+1 < len(b) && (b[p] == '.' || b[p] == ',') && isDigit(b[p+1]) {
		p, _ = t.subsecond(b, p+1, 9)
		for p < len(b) && isDigit(b[p]) { // digits past nanoseconds
			p++
		}
	}
	return p, true
}

func isoTime(b []byte, loc *time.Location) (time.Time, bool) {
	if len(b) < 19 || b[4] != '-' || b[7] != '-' || (b[10] != 'T' && b[10] != ' ') {
		return time.Time{}, false
	}
	var t tm
	var ok bool
	t.hasYear, t.hasDate = true, true
	if t.year, _, ok = digits(b, 0, 4, 4); !ok {
		return time.Time{}, false
	}
	if t.month, _, ok = digits(b, 5, 2, 2); !ok {
		return time.Time{}, false
	}
	if t.day, _, ok = digits(b, 8, 2, 2); !ok {
		return time.Time{}, false
	}
	p, ok := clock(b, 11, &t)
	if !ok {
		return time.Time{}, false
	}
	if p < len(b) && b[p] == 'Z' {
		t.hasOffset = true
	} else if p < len(b) && (b[p] == '+' || b[p] == '-') {
		t.offset, _, t.hasOffset = parseOffset(b[p:])
	}
	return t.time(loc, time.Time{})
}

func accessTime(b []byte, loc *time.Location) (time.Time, bool) {
	if len(b) < 20 || b[2] != '/' || b[6] != '/' || b[11] != ':' {
		return time.Time{}, false
	}
	var t tm
	var ok bool
	t.hasYear, t.hasDate = true, true
	if t.day, _, ok = digits(b, 0, 2, 2); !ok {
		return time.Time{}, false
	}
	if t.month, _, ok = monthName(b, 3); !ok {
		return time.Time{}, false
	}
	if t.year, _, ok = digits(b, 7, 4, 4); !ok {
		return time.Time{}, false
	}
	p, ok := clock(b, 12, &t)
	if !ok {
		return time.Time{}, false
	}
	if p+1 < len(b) && b[p] == ' ' {
		t.offset, _, t.hasOffset = parseOffset(b[p+1:])
	}
	return t.time(loc, time.Time{})
}

func epochTime(b []byte) (time.Time, bool) {
	v, p, _ := digits(b, 0, 0, 14)
	if p < len(b) && isDigit(b[p]) {
		return time.Time{}, false
	}
	switch p {
	case 13:
		return time.UnixMilli(int64(v)).UTC(), true
	case 10:
		var t tm
		if p+1 < len(b) && b[p] == '.' && isDigit(b[p+1]) {
			if _, ok := t.subsecond(b, p+1, 9); !ok {
				return time.Time{}, false
			}
		}
		return time.Unix(int64(v), int64(t.nsec)).UTC(), true
	}
	return time.Time{}, false
}

func syslogTime(b []byte, loc *time.Location, now time.Time) (time.Time, bool) {
	var t tm
	month, p, ok := monthName(b, 0)
	if !ok || p != 3 || p >= len(b) || b[p] != ' ' {
		return time.Time{}, false
	}
	for p < len(b) && b[p] == ' ' {
		p++
	}
	t.month, t.hasDate = month, true
	if t.day, p, ok = digits(b, p, 1, 2); !ok || p >= len(b) || b[p] != ' ' {
		return time.Time{}, false
	}
	if _, ok = clock(b, p+1, &t); !ok {
		return time.Time{}, false
	}
	return t.time(loc, now)
}
