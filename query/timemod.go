package query

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Time modifiers (SPEC §5): `now`, an RFC 3339 time, unix seconds, or a
// relative form — a sequence of signed offsets and snaps evaluated left to
// right from now: `-15m`, `-1h@h`, `@d`, `-1d@d+2h`, `-7d@w1`. Units: s sec
// secs second seconds, m min mins minute minutes, h hr hrs hour hours, d day
// days, w week weeks, mon month months, y yr yrs year years. A snap (@unit)
// rounds down to the start of that unit (weeks start on Sunday, @w1 on
// Monday) in UTC. An empty string means unbounded.

var timeUnits = map[string]string{
	"s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
	"m": "m", "min": "m", "mins": "m", "minute": "m", "minutes": "m",
	"h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h",
	"d": "d", "day": "d", "days": "d",
	"w": "w", "week": "w", "weeks": "w",
	"mon": "mon", "month": "mon", "months": "mon",
	"y": "y", "yr": "y", "yrs": "y", "year": "y", "years": "y",
}

// ParseTime resolves a time modifier against now.
func ParseTime(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	now = now.UTC()
	if s == "" {
		return time.Time{}, fmt.Errorf("empty time modifier")
	}
	if s == "now" || s == "now()" {
		return now, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && s[0] != '+' && s[0] != '-' {
		sec := int64(f)
		return time.Unix(sec, int64((f-float64(sec))*1e9)).UTC(), nil
	}
	t := now
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == '+' || c == '-':
			j := i + 1
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			n := 1
			if j > i+1 {
				n, _ = strconv.Atoi(s[i+1 : j])
			}
			k := j
			for k < len(s) && (s[k] >= 'a' && s[k] <= 'z' || s[k] >= 'A' && s[k] <= 'Z') {
				k++
			}
			u, ok := timeUnits[strings.ToLower(s[j:k])]
			if !ok {
				return time.Time{}, fmt.Errorf("time modifier %q: expected a unit (s, m, h, d, w, mon, y) at offset %d", s, j)
			}
			if c == '-' {
				n = -n
			}
			t = addUnits(t, n, u)
			i = k
		case c == '@':
			k := i + 1
			for k < len(s) && (s[k] >= 'a' && s[k] <= 'z' || s[k] >= 'A' && s[k] <= 'Z') {
				k++
			}
			u, ok := timeUnits[strings.ToLower(s[i+1:k])]
			if !ok {
				return time.Time{}, fmt.Errorf("time modifier %q: expected a snap unit after @ at offset %d", s, i+1)
			}
			wd := 0
			if u == "w" && k < len(s) && s[k] >= '0' && s[k] <= '6' {
				wd = int(s[k] - '0')
				k++
			}
			t = snap(t, u, wd)
			i = k
		default:
			return time.Time{}, fmt.Errorf("time modifier %q: expected now, an RFC 3339 time, or -N<unit>[@unit] at offset %d", s, i)
		}
	}
	return t, nil
}

func addUnits(t time.Time, n int, u string) time.Time {
	switch u {
	case "s":
		return t.Add(time.Duration(n) * time.Second)
	case "m":
		return t.Add(time.Duration(n) * time.Minute)
	case "h":
		return t.Add(time.Duration(n) * time.Hour)
	case "d":
		return t.AddDate(0, 0, n)
	case "w":
		return t.AddDate(0, 0, 7*n)
	case "mon":
		return t.AddDate(0, n, 0)
	}
	return t.AddDate(n, 0, 0)
}

func snap(t time.Time, u string, wd int) time.Time {
	y, mo, d := t.Date()
	switch u {
	case "s":
		return t.Truncate(time.Second)
	case "m":
		return t.Truncate(time.Minute)
	case "h":
		return t.Truncate(time.Hour)
	case "d":
		return time.Date(y, mo, d, 0, 0, 0, 0, time.UTC)
	case "w":
		day := time.Date(y, mo, d, 0, 0, 0, 0, time.UTC)
		back := (int(day.Weekday()) - wd + 7) % 7
		return day.AddDate(0, 0, -back)
	case "mon":
		return time.Date(y, mo, 1, 0, 0, 0, 0, time.UTC)
	}
	return time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC)
}

// parseSpan parses a timechart span: <N><unit>, units s m h d w.
func parseSpan(s string) (int64, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n := 1
	if i > 0 {
		n, _ = strconv.Atoi(s[:i])
	}
	u, ok := timeUnits[strings.ToLower(s[i:])]
	if !ok || n <= 0 {
		return 0, fmt.Errorf("span %q: expected <N><unit> with unit s, m, h, d or w", s)
	}
	var d time.Duration
	switch u {
	case "s":
		d = time.Second
	case "m":
		d = time.Minute
	case "h":
		d = time.Hour
	case "d":
		d = 24 * time.Hour
	case "w":
		d = 7 * 24 * time.Hour
	default:
		return 0, fmt.Errorf("span %q: months and years are not supported spans", s)
	}
	return int64(n) * int64(d), nil
}
