package knowledge

import (
	"bytes"
	"regexp"
	"time"
	"unicode/utf8"
)

// Rule is the resolved index-time rule for one (sourcetype, source, host):
// how a /raw body splits into events and where an event's time is.
// Immutable and safe for concurrent use. A nil *Rule splits one event per
// line without truncation and finds no time.
type Rule struct {
	breaker         *lineBreaker // nil: ([\r\n]+), scanned by hand
	lineMerge       bool
	breakBefore     *regexp.Regexp
	breakBeforeDate bool
	maxEvents       int
	truncate        int
	timeMode        timeMode
	timePrefix      *regexp.Regexp
	prefixLiteral   []byte // timePrefix when it is a plain string
	prefixStart     bool   // timePrefix is "^"
	format          *timeFormat
	lookahead       int // <= 0: no limit
	loc             *time.Location
	maxDaysAgo      int // < 0: no limit
	maxDaysHence    int // < 0: no limit
}

type timeMode uint8

const (
	timeSearch  timeMode = iota // TIME_PREFIX, lookahead, TIME_FORMAT or the built-in formats
	timeJSON                    // the built-in JSON sourcetypes: a "timestamp"/"time"/"@timestamp" key
	timeArrival                 // DATETIME_CONFIG = CURRENT or NONE
)

func newRule(s *settings) *Rule {
	r := &Rule{
		breaker:         s.breaker,
		lineMerge:       s.lineMerge,
		breakBefore:     s.breakBefore,
		breakBeforeDate: s.breakBeforeDate,
		maxEvents:       s.maxEvents,
		truncate:        s.truncate,
		timePrefix:      s.timePrefix,
		format:          s.format,
		lookahead:       s.lookahead,
		loc:             s.loc,
		maxDaysAgo:      s.maxDaysAgo,
		maxDaysHence:    s.maxDaysHence,
	}
	switch {
	case s.datetime == datetimeArrival:
		r.timeMode = timeArrival
	case s.jsonTime && s.format == nil && s.timePrefix == nil:
		r.timeMode = timeJSON
	}
	if p := s.timePrefix; p != nil {
		if lit, complete := p.LiteralPrefix(); complete {
			r.prefixLiteral = []byte(lit)
		}
		r.prefixStart = p.String() == "^"
	}
	return r
}

// Truncate is the TRUNCATE in effect, in bytes; 0 means none.
func (r *Rule) Truncate() int {
	if r == nil {
		return 0
	}
	return r.truncate
}

// Events splits a /raw body into events and calls emit with each (a
// sub-slice of body) in order, stopping at emit's first error, which it
// returns. LINE_BREAKER splits the body into lines (its first capture group
// is the dropped delimiter; what the match holds before it ends the line,
// what follows it starts the next one); with SHOULD_LINEMERGE lines merge
// into events (BREAK_ONLY_BEFORE, else BREAK_ONLY_BEFORE_DATE, capped at
// MAX_EVENTS lines); TRUNCATE cuts each event at a UTF-8 boundary at or
// below the limit; whitespace-only events are dropped.
func (r *Rule) Events(body []byte, emit func(raw []byte) error) error {
	if r == nil {
		r = &nilRule
	}
	m := merger{r: r, body: body, emit: emit}
	var err error
	if r.breaker == nil {
		err = splitLines(body, m.line)
	} else {
		err = r.breaker.split(body, m.line)
	}
	if err != nil {
		return err
	}
	return m.flush()
}

// nilRule is what a nil *Rule does: one event per line, no limit.
var nilRule = Rule{maxEvents: defaultMaxEvents, loc: time.UTC, timeMode: timeArrival, maxDaysAgo: -1, maxDaysHence: -1}

// splitLines calls fn with each line of body, lines ending at runs of \r
// and \n (the default LINE_BREAKER, without a regular expression).
func splitLines(body []byte, fn func(start, end int) error) error {
	start := 0
	for start < len(body) {
		// Two vectorised byte searches beat bytes.IndexAny's byte loop.
		seg := body[start:]
		i := bytes.IndexByte(seg, '\n')
		lim := i
		if i < 0 {
			lim = len(seg)
		}
		if j := bytes.IndexByte(seg[:lim], '\r'); j >= 0 {
			i = j
		}
		if i < 0 {
			break
		}
		end := start + i
		if err := fn(start, end); err != nil {
			return err
		}
		start = end + 1
		for start < len(body) && (body[start] == '\n' || body[start] == '\r') {
			start++
		}
	}
	return fn(start, len(body))
}

// merger turns lines into events.
type merger struct {
	r          *Rule
	body       []byte
	emit       func([]byte) error
	start, end int // the open event's span
	lines      int // lines in the open event; 0: none open
}

func (m *merger) line(start, end int) error {
	if !m.r.lineMerge {
		return m.out(start, end)
	}
	line := m.body[start:end]
	if m.lines > 0 && blank(line) {
		return nil // a blank line joins only when a later line does
	}
	if m.lines > 0 && m.lines < m.r.maxEvents && !m.r.startsEvent(line) {
		m.end = end
		m.lines++
		return nil
	}
	if err := m.flush(); err != nil {
		return err
	}
	if blank(line) {
		return nil // no event starts with a blank line
	}
	m.start, m.end, m.lines = start, end, 1
	return nil
}

func (m *merger) flush() error {
	if m.lines == 0 {
		return nil
	}
	m.lines = 0
	return m.out(m.start, m.end)
}

func (m *merger) out(start, end int) error {
	ev := m.body[start:end]
	if t := m.r.truncate; t > 0 && len(ev) > t {
		cut := t
		for k := 0; k < utf8.UTFMax-1 && cut > 0 && !utf8.RuneStart(ev[cut]); k++ {
			cut--
		}
		ev = ev[:cut]
	}
	if blank(ev) {
		return nil
	}
	return m.emit(ev)
}

// startsEvent says whether a line begins a new merged event.
func (r *Rule) startsEvent(line []byte) bool {
	if r.breakBefore != nil {
		return r.breakBefore.Match(line)
	}
	if r.breakBeforeDate {
		_, ok := r.findTime(line, time.Time{})
		return ok
	}
	return false
}

func blank(b []byte) bool {
	for _, c := range b {
		if !isSpace(c) {
			return false
		}
	}
	return true
}

// defaultRule is the rule of no stanza: every key at its default, so its
// Time tries the built-in timestamp forms (DefaultRule).
var defaultRule = func() *Rule { s := defaultSettings(); return newRule(&s) }()

// DefaultRule is the rule where no stanza applies but a caller wants an
// event's time from its text anyway (HEC /event with
// ?auto_extract_timestamp=true): the built-in timestamp forms, UTC unless
// the text names a zone, one event per line.
func DefaultRule() *Rule { return defaultRule }
