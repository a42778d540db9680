package knowledge

import (
	"fmt"
	"strings"
	"time"
)

// timeFormat is a compiled TIME_FORMAT (strptime).
type timeFormat struct {
	src   string
	items []tfItem
}

type tfKind uint8

const (
	tfLiteral tfKind = iota + 1 // one byte that must match exactly
	tfSpace                     // one or more whitespace bytes
	tfDirective
)

type tfItem struct {
	kind  tfKind
	b     byte // the literal byte, or the directive letter
	width int  // digits for %N %Q %f (subseconds), 0 otherwise
}

// tfExpand are directives that stand for a sequence of others.
var tfExpand = map[byte]string{
	'T': "%H:%M:%S",
	'F': "%Y-%m-%d",
	'D': "%m/%d/%y",
	'R': "%H:%M",
}

// tfDirectives are the single-letter directives parsed directly.
const tfDirectives = "YymdeHkIMSpbBhaAjZzsNQf"

// compileTimeFormat compiles a strptime format. Errors name the directive:
// `unknown directive %K`.
func compileTimeFormat(s string) (*timeFormat, error) {
	f := &timeFormat{src: s}
	if err := f.compile(s); err != nil {
		return nil, err
	}
	hasField := false
	for _, it := range f.items {
		if it.kind == tfDirective && it.b != 'p' && it.b != 'a' && it.b != 'A' {
			hasField = true
		}
	}
	if !hasField {
		return nil, fmt.Errorf("no date or time directive in %q", s)
	}
	return f, nil
}

func (f *timeFormat) compile(s string) error {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isSpace(c) {
			f.items = append(f.items, tfItem{kind: tfSpace})
			for i+1 < len(s) && isSpace(s[i+1]) {
				i++
			}
			continue
		}
		if c != '%' {
			f.items = append(f.items, tfItem{kind: tfLiteral, b: c})
			continue
		}
		start := i
		i++
		width := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' && width < 100 {
			width = width*10 + int(s[i]-'0')
			i++
		}
		colons := 0
		for i < len(s) && s[i] == ':' && colons < 3 {
			colons++
			i++
		}
		if i >= len(s) {
			return fmt.Errorf("unknown directive %s (a %% at the end; write %%%% for a literal %%)", s[start:])
		}
		d := s[i]
		unknown := fmt.Errorf("unknown directive %s", s[start:i+1])
		switch {
		case width > 0 && d != 'N' && d != 'Q', colons > 0 && d != 'z':
			return unknown
		case d == '%' && width == 0:
			f.items = append(f.items, tfItem{kind: tfLiteral, b: '%'})
		case tfExpand[d] != "":
			if err := f.compile(tfExpand[d]); err != nil {
				return err
			}
		case d == 'N' || d == 'Q':
			if width == 0 {
				width = 9
				if d == 'Q' {
					width = 3
				}
			}
			if width > 9 {
				return unknown
			}
			f.items = append(f.items, tfItem{kind: tfDirective, b: 'N', width: width})
		case d == 'f':
			f.items = append(f.items, tfItem{kind: tfDirective, b: 'N', width: 6})
		case d != '%' && strings.IndexByte(tfDirectives, d) >= 0:
			f.items = append(f.items, tfItem{kind: tfDirective, b: d})
		default:
			return unknown
		}
	}
	return nil
}

// tm collects the fields of one parse.
type tm struct {
	year, month, day, yday int
	hour, min, sec, nsec   int
	pm                     int8 // 0 none, 1 am, 2 pm
	hour12                 bool
	hasYear, hasDate       bool
	epoch                  int64
	hasEpoch               bool
	offset                 int // seconds east of UTC
	hasOffset              bool
}

// canStart reports whether a parse may begin at b[p]: the first item's
// byte class fits and, for a number or a word, p starts a token.
func (f *timeFormat) canStart(b []byte, p int) bool {
	it := f.items[0]
	c := b[p]
	switch it.kind {
	case tfLiteral:
		return c == it.b
	case tfSpace:
		return isSpace(c)
	}
	switch it.b {
	case 'b', 'B', 'h', 'a', 'A', 'p', 'Z':
		return isLetter(c) && (p == 0 || !isLetter(b[p-1]))
	case 'z':
		return c == '+' || c == '-' || c == 'Z'
	case 'e', 'k':
		if c == ' ' {
			return p == 0 || !isDigit(b[p-1])
		}
	}
	return isDigit(c) && (p == 0 || !isDigit(b[p-1]))
}

// parse parses b from its start; loc is the zone when the text names none,
// now fills a missing year or date.
func (f *timeFormat) parse(b []byte, loc *time.Location, now time.Time) (time.Time, bool) {
	var t tm
	p := 0
	for _, it := range f.items {
		switch it.kind {
		case tfLiteral:
			if p >= len(b) || b[p] != it.b {
				return time.Time{}, false
			}
			p++
		case tfSpace:
			if p >= len(b) || !isSpace(b[p]) {
				return time.Time{}, false
			}
			for p < len(b) && isSpace(b[p]) {
				p++
			}
		default:
			var ok bool
			if p, ok = t.directive(b, p, it); !ok {
				return time.Time{}, false
			}
		}
	}
	return t.time(loc, now)
}

// directive parses one directive at b[p] into t and returns the position after it.
func (t *tm) directive(b []byte, p int, it tfItem) (int, bool) {
	var v int
	var ok bool
	switch it.b {
	case 'Y':
		v, p, ok = digits(b, p, 4, 4)
		t.year, t.hasYear = v, true
	case 'y':
		v, p, ok = digits(b, p, 2, 2)
		t.year, t.hasYear = v+2000, true
		if v >= 69 {
			t.year = v + 1900
		}
	case 'm':
		v, p, ok = digits(b, p, 1, 2)
		t.month, t.hasDate = v, true
	case 'd', 'e':
		if it.b == 'e' && p < len(b) && b[p] == ' ' {
			p++
		}
		v, p, ok = digits(b, p, 1, 2)
		t.day, t.hasDate = v, true
	case 'H', 'k':
		if it.b == 'k' && p < len(b) && b[p] == ' ' {
			p++
		}
		v, p, ok = digits(b, p, 1, 2)
		t.hour = v
	case 'I':
		v, p, ok = digits(b, p, 1, 2)
		t.hour, t.hour12 = v, true
		ok = ok && v >= 1 && v <= 12
	case 'M':
		v, p, ok = digits(b, p, 1, 2)
		t.min = v
	case 'S':
		v, p, ok = digits(b, p, 1, 2)
		t.sec = v
	case 'j':
		v, p, ok = digits(b, p, 1, 3)
		t.yday, t.hasDate = v, true
		ok = ok && v >= 1 && v <= 366
	case 'N':
		return t.subsecond(b, p, it.width)
	case 's':
		v, p, ok = digits(b, p, 1, 10)
		t.epoch, t.hasEpoch = int64(v), true
	case 'p':
		return t.ampm(b, p)
	case 'b', 'B', 'h':
		v, p, ok = monthName(b, p)
		t.month, t.hasDate = v, true
	case 'a', 'A':
		_, p, ok = weekdayName(b, p)
	case 'z':
		return t.zoneOffset(b, p)
	case 'Z':
		return t.zoneName(b, p)
	}
	return p, ok
}

func (t *tm) subsecond(b []byte, p, width int) (int, bool) {
	start := p
	v, p, ok := digits(b, p, 1, width)
	if !ok {
		return p, false
	}
	for n := p - start; n < 9; n++ {
		v *= 10
	}
	t.nsec = v
	return p, true
}

func (t *tm) ampm(b []byte, p int) (int, bool) {
	if p+2 > len(b) || lower(b[p+1]) != 'm' {
		return p, false
	}
	switch lower(b[p]) {
	case 'a':
		t.pm = 1
	case 'p':
		t.pm = 2
	default:
		return p, false
	}
	return p + 2, true
}

// zoneOffset parses Z, ±hh, ±hhmm, ±hh:mm or ±hh:mm:ss.
func (t *tm) zoneOffset(b []byte, p int) (int, bool) {
	if p < len(b) && b[p] == 'Z' {
		t.offset, t.hasOffset = 0, true
		return p + 1, true
	}
	off, n, ok := parseOffset(b[p:])
	if !ok {
		return p, false
	}
	t.offset, t.hasOffset = off, true
	return p + n, true
}

// zoneName parses a zone abbreviation (%Z). A known one (zoneAbbrevs) sets
// the offset; an unknown word is skipped and the rule's TZ applies.
func (t *tm) zoneName(b []byte, p int) (int, bool) {
	start := p
	for p < len(b) && isLetter(b[p]) && p-start < 6 {
		p++
	}
	if p == start {
		if p < len(b) && (b[p] == '+' || b[p] == '-') {
			return t.zoneOffset(b, p)
		}
		return p, false
	}
	if off, ok := zoneAbbrevs[string(b[start:p])]; ok {
		t.offset, t.hasOffset = off*3600, true
		// "UTC+01:00" and "GMT-5" carry their own offset.
		if off == 0 && p < len(b) && (b[p] == '+' || b[p] == '-') {
			if o, n, ok := parseOffset(b[p:]); ok {
				t.offset = o
				p += n
			}
		}
	}
	return p, true
}

// zoneAbbrevs are the %Z abbreviations with one meaning, in hours east of UTC.
var zoneAbbrevs = map[string]int{
	"UTC": 0, "GMT": 0, "UT": 0, "Z": 0,
	"EST": -5, "EDT": -4, "CST": -6, "CDT": -5, "MST": -7, "MDT": -6,
	"PST": -8, "PDT": -7, "AKST": -9, "AKDT": -8, "HST": -10,
	"CET": 1, "CEST": 2, "EET": 2, "EEST": 3, "WET": 0, "WEST": 1,
	"JST": 9, "KST": 9, "AEST": 10, "AEDT": 11,
}

// time assembles the fields. The zone is the text's (%z, %Z) or loc.
func (t *tm) time(loc *time.Location, now time.Time) (time.Time, bool) {
	if t.hasEpoch {
		return time.Unix(t.epoch, int64(t.nsec)).UTC(), true
	}
	if t.hour12 {
		t.hour %= 12
		if t.pm == 2 {
			t.hour += 12
		}
	}
	if t.hour > 23 || t.min > 59 || t.sec > 60 {
		return time.Time{}, false
	}
	zone := loc
	if t.hasOffset {
		zone = time.UTC
	}
	local := now.In(zone)
	if !t.hasDate {
		t.year, t.month, t.day = local.Year(), int(local.Month()), local.Day()
		t.hasYear = true
	}
	year := t.year
	if !t.hasYear {
		year = local.Year()
	}
	var out time.Time
	for try := 0; try < 2; try++ {
		var ok bool
		if out, ok = t.date(year, zone); !ok {
			return time.Time{}, false
		}
		// A year-less date more than two days ahead is last year's.
		if t.hasYear || !out.After(now.Add(48*time.Hour)) {
			break
		}
		year--
	}
	if t.hasOffset {
		out = out.Add(-time.Duration(t.offset) * time.Second)
	}
	return out.UTC(), true
}

func (t *tm) date(year int, zone *time.Location) (time.Time, bool) {
	if t.yday > 0 && t.month == 0 {
		if t.yday > 365 && !isLeap(year) {
			return time.Time{}, false
		}
		d := time.Date(year, 1, 1, t.hour, t.min, t.sec, t.nsec, zone)
		return d.AddDate(0, 0, t.yday-1), true
	}
	if t.month < 1 || t.month > 12 || t.day < 1 || t.day > daysIn(t.month, year) {
		return time.Time{}, false
	}
	return time.Date(year, time.Month(t.month), t.day, t.hour, t.min, t.sec, t.nsec, zone), true
}

func isLeap(y int) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(m, y int) int {
	switch m {
	case 2:
		if isLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}
