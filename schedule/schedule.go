// Package schedule parses what a saved search is scheduled by and alerts
// on: its cron spec (Parse; the slots it is due at) and its alert
// condition (ParseCondition). It imports nothing of ours: the managers
// validate with it at add, the search heads schedule with it.
//
// Slots are whole Unix seconds in UTC, computed from the spec alone, so
// every search head computes the same slots and the managers' lease on a
// slot (fsm/savedsearch.go) is what makes it run once.
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ErrBadSchedule: a cron spec that does not parse.
var ErrBadSchedule = errors.New("bad schedule")

// Schedule gives the slots of a cron spec.
type Schedule interface {
	// Next is the first slot strictly after t (whole seconds, UTC); the
	// zero time when there is none.
	Next(t time.Time) time.Time
}

// parser reads the 5-field form and the 6-field form with leading
// seconds, and the descriptors (@hourly, @daily, …).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// maxSpec bounds a spec's length.
const maxSpec = 256

// Parse reads a cron spec: 5 fields (minute hour day-of-month month
// day-of-week), 6 fields with leading seconds, a descriptor (@hourly,
// @daily, @weekly, @monthly, @yearly), or "@every D" with D a whole
// number of seconds, at least 1 s, whose slots are the multiples of D
// since the Unix epoch (so every head computes the same ones). Specs are
// read in UTC unless they start with CRON_TZ=<zone>.
func Parse(spec string) (Schedule, error) {
	s := strings.TrimSpace(spec)
	if s == "" || len(s) > maxSpec {
		return nil, fmt.Errorf("%w: cron %q: want 5 fields, 6 with leading seconds, or @every 10s", ErrBadSchedule, spec)
	}
	if d, ok := strings.CutPrefix(s, "@every"); ok {
		return parseEvery(spec, strings.TrimSpace(d))
	}
	loc := time.UTC
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		rest, ok := strings.CutPrefix(s, p)
		if !ok {
			continue
		}
		zone, fields, _ := strings.Cut(rest, " ")
		l, err := time.LoadLocation(zone)
		if zone == "" || err != nil {
			return nil, fmt.Errorf("%w: cron %q: time zone %q: want e.g. CRON_TZ=Europe/Paris 0 9 * * *", ErrBadSchedule, spec, zone)
		}
		loc, s = l, strings.TrimSpace(fields)
		break
	}
	sch, err := parseCron(s)
	if err != nil {
		return nil, fmt.Errorf("%w: cron %q: %v", ErrBadSchedule, spec, err)
	}
	if ss, ok := sch.(*cron.SpecSchedule); ok {
		ss.Location = loc
	}
	return cronSchedule{sch}, nil
}

// parseCron is the cron parser, its panics turned into errors (FuzzParse
// found "TZ=" panicking in it; the zone prefix is now read here, and this
// guard stays for what the fuzzer has not found yet).
func parseCron(s string) (sch cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			sch, err = nil, fmt.Errorf("unreadable: %v", r)
		}
	}()
	if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
		return nil, errors.New("one time zone prefix at most")
	}
	return parser.Parse(s)
}

func parseEvery(spec, d string) (Schedule, error) {
	dur, err := time.ParseDuration(d)
	if err != nil {
		return nil, fmt.Errorf("%w: cron %q: @every wants a duration such as 10s: %v", ErrBadSchedule, spec, err)
	}
	if dur < time.Second || dur%time.Second != 0 {
		return nil, fmt.Errorf("%w: cron %q: @every wants a whole number of seconds, at least 1s", ErrBadSchedule, spec)
	}
	return every(dur / time.Second), nil
}

// every is "@every D": the multiples of D seconds since the epoch.
type every int64

func (e every) Next(t time.Time) time.Time {
	n := t.Unix()
	next := (n/int64(e) + 1) * int64(e)
	if n < 0 && n%int64(e) != 0 {
		next = (n / int64(e)) * int64(e)
	}
	return time.Unix(next, 0).UTC()
}

type cronSchedule struct{ s cron.Schedule }

func (c cronSchedule) Next(t time.Time) time.Time {
	n := c.s.Next(t.Truncate(time.Second))
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// Due lists the slots of s in (after, now], oldest first: at most max of
// the newest, and how many older ones were left out.
func Due(s Schedule, after, now time.Time, max int) (slots []time.Time, more int) {
	for t := s.Next(after); !t.IsZero() && !t.After(now); t = s.Next(t) {
		slots = append(slots, t)
		if len(slots) > max {
			slots = slots[1:]
			more++
		}
		if more > 1<<20 { // a spec of seconds over years: stop counting
			break
		}
	}
	return slots, more
}
