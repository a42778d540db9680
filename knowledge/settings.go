package knowledge

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // zones also on machines without a zone database
)

// settings are the index-time keys one stanza sets; set says which, so
// layers merge key by key.
type settings struct {
	set             uint32
	breaker         *lineBreaker // nil: the default ([\r\n]+), scanned by hand
	lineMerge       bool
	breakBefore     *regexp.Regexp
	breakBeforeDate bool
	maxEvents       int
	truncate        int
	timePrefix      *regexp.Regexp
	format          *timeFormat
	lookahead       int
	loc             *time.Location
	datetime        datetimeMode
	maxDaysAgo      int  // -1: no limit
	maxDaysHence    int  // -1: no limit
	jsonTime        bool // built-in _json/json: time from a JSON key
}

type datetimeMode uint8

const (
	datetimeAuto    datetimeMode = iota // find the timestamp in the event
	datetimeArrival                     // CURRENT or NONE: the caller's arrival time
)

const (
	setBreaker uint32 = 1 << iota
	setLineMerge
	setBreakBefore
	setBreakBeforeDate
	setMaxEvents
	setTruncate
	setTimePrefix
	setFormat
	setLookahead
	setTZ
	setDatetime
	setMaxDaysAgo
	setMaxDaysHence
)

// Splunk's defaults for the keys, with quarry's SHOULD_LINEMERGE=false.
const (
	defaultBreaker   = `([\r\n]+)`
	defaultMaxEvents = 256
	defaultTruncate  = 10000
	defaultLookahead = 128
)

func defaultSettings() settings {
	return settings{
		breakBeforeDate: true,
		maxEvents:       defaultMaxEvents,
		truncate:        defaultTruncate,
		lookahead:       defaultLookahead,
		loc:             time.UTC,
		maxDaysAgo:      -1,
		maxDaysHence:    -1,
	}
}

// merge layers o over s: each key o sets replaces s's.
func (s *settings) merge(o *settings) {
	copyIf := func(bit uint32, f func()) {
		if o.set&bit != 0 {
			f()
		}
	}
	copyIf(setBreaker, func() { s.breaker = o.breaker })
	copyIf(setLineMerge, func() { s.lineMerge = o.lineMerge })
	copyIf(setBreakBefore, func() { s.breakBefore = o.breakBefore })
	copyIf(setBreakBeforeDate, func() { s.breakBeforeDate = o.breakBeforeDate })
	copyIf(setMaxEvents, func() { s.maxEvents = o.maxEvents })
	copyIf(setTruncate, func() { s.truncate = o.truncate })
	copyIf(setTimePrefix, func() { s.timePrefix = o.timePrefix })
	copyIf(setFormat, func() { s.format = o.format })
	copyIf(setLookahead, func() { s.lookahead = o.lookahead })
	copyIf(setTZ, func() { s.loc = o.loc })
	copyIf(setDatetime, func() { s.datetime = o.datetime })
	copyIf(setMaxDaysAgo, func() { s.maxDaysAgo = o.maxDaysAgo })
	copyIf(setMaxDaysHence, func() { s.maxDaysHence = o.maxDaysHence })
	s.set |= o.set
	s.jsonTime = s.jsonTime || o.jsonTime
}

// indexKey parses one index-time key's value into s. An empty value sets
// the key back to its default.
type indexKey struct {
	bit   uint32
	parse func(s *settings, v string) error
}

// indexKeys are the props.conf keys quarry applies at index time; every
// other key is search-time or unsupported and is left to others.
var indexKeys = map[string]indexKey{
	"LINE_BREAKER":            {setBreaker, parseBreaker},
	"SHOULD_LINEMERGE":        {setLineMerge, func(s *settings, v string) error { return parseBool(v, false, &s.lineMerge) }},
	"BREAK_ONLY_BEFORE":       {setBreakBefore, func(s *settings, v string) error { return parseRegex(v, &s.breakBefore) }},
	"BREAK_ONLY_BEFORE_DATE":  {setBreakBeforeDate, func(s *settings, v string) error { return parseBool(v, true, &s.breakBeforeDate) }},
	"MAX_EVENTS":              {setMaxEvents, func(s *settings, v string) error { return parseInt(v, defaultMaxEvents, 1, &s.maxEvents) }},
	"TRUNCATE":                {setTruncate, func(s *settings, v string) error { return parseInt(v, defaultTruncate, 0, &s.truncate) }},
	"TIME_PREFIX":             {setTimePrefix, func(s *settings, v string) error { return parseRegex(v, &s.timePrefix) }},
	"TIME_FORMAT":             {setFormat, parseFormat},
	"MAX_TIMESTAMP_LOOKAHEAD": {setLookahead, func(s *settings, v string) error { return parseInt(v, defaultLookahead, -1, &s.lookahead) }},
	"TZ":                      {setTZ, parseTZ},
	"DATETIME_CONFIG":         {setDatetime, parseDatetime},
	"MAX_DAYS_AGO":            {setMaxDaysAgo, func(s *settings, v string) error { return parseInt(v, -1, 0, &s.maxDaysAgo) }},
	"MAX_DAYS_HENCE":          {setMaxDaysHence, func(s *settings, v string) error { return parseInt(v, -1, 0, &s.maxDaysHence) }},
}

// parseSettings reads the index-time keys of one stanza; errors read
// "FILE:LINE: KEY: what".
func parseSettings(file string, st *Stanza) (settings, []error) {
	var s settings
	var errs []error
	for _, kv := range st.Keys {
		k, ok := indexKeys[kv.Key]
		if !ok {
			continue
		}
		if err := k.parse(&s, kv.Value); err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %s: %w", file, kv.Line, kv.Key, err))
			continue
		}
		s.set |= k.bit
	}
	return s, errs
}

func parseBool(v string, def bool, out *bool) error {
	switch strings.ToLower(v) {
	case "":
		*out = def
	case "true", "t", "1", "yes", "y":
		*out = true
	case "false", "f", "0", "no", "n":
		*out = false
	default:
		return fmt.Errorf("not a boolean: %q (want true or false)", v)
	}
	return nil
}

func parseInt(v string, def, min int, out *int) error {
	if v == "" {
		*out = def
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min {
		return fmt.Errorf("not an integer >= %d: %q", min, v)
	}
	*out = n
	return nil
}

// lookaround is RE2's missing syntax, refused with a hint.
var lookaround = []string{"(?=", "(?!", "(?<=", "(?<!"}

func compileRegex(v string) (*regexp.Regexp, error) {
	for _, l := range lookaround {
		if strings.Contains(v, l) {
			return nil, fmt.Errorf("%q uses %s: Go's RE2 regular expressions have no lookahead or lookbehind", v, l)
		}
	}
	re, err := regexp.Compile(v)
	if err != nil {
		return nil, fmt.Errorf("bad regular expression %q: %w", v, err)
	}
	return re, nil
}

func parseRegex(v string, out **regexp.Regexp) error {
	*out = nil
	if v == "" {
		return nil
	}
	re, err := compileRegex(v)
	*out = re
	return err
}

func parseBreaker(s *settings, v string) error {
	s.breaker = nil
	if v == "" || v == defaultBreaker {
		return nil
	}
	re, err := compileRegex(v)
	if err != nil {
		if strings.Contains(err.Error(), "lookahead") {
			return fmt.Errorf("%w; write what must follow the delimiter after the first capture group instead, "+
				`e.g. ([\r\n]+)\d{4}- : the first group is the dropped delimiter, the rest of the match starts the next event`, err)
		}
		return err
	}
	if re.NumSubexp() < 1 {
		return fmt.Errorf("%q has no capture group: the first group is the delimiter between events, e.g. ([\\r\\n]+)", v)
	}
	s.breaker = newLineBreaker(re)
	return nil
}

func parseFormat(s *settings, v string) error {
	s.format = nil
	if v == "" {
		return nil
	}
	f, err := compileTimeFormat(v)
	s.format = f
	return err
}

func parseTZ(s *settings, v string) error {
	s.loc = time.UTC
	if v == "" {
		return nil
	}
	if strings.EqualFold(v, "local") {
		return fmt.Errorf("%q depends on each machine's zone; name the zone, e.g. Europe/Paris", v)
	}
	loc, err := time.LoadLocation(v)
	if err != nil {
		return fmt.Errorf("unknown time zone %q", v)
	}
	s.loc = loc
	return nil
}

func parseDatetime(s *settings, v string) error {
	switch v {
	case "", "/etc/datetime.xml":
		s.datetime = datetimeAuto
	case "CURRENT", "NONE":
		s.datetime = datetimeArrival
	default:
		return fmt.Errorf("unsupported value %q (want CURRENT, NONE or /etc/datetime.xml; a custom datetime.xml is not supported)", v)
	}
	return nil
}
