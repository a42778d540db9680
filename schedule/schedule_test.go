package schedule

import (
	"testing"
	"time"
)

func TestParseForms(t *testing.T) {
	base := time.Date(2026, 12, 7, 10, 0, 30, 500, time.UTC)
	cases := []struct {
		spec string
		want time.Time
	}{
		{"*/5 * * * *", time.Date(2026, 12, 7, 10, 5, 0, 0, time.UTC)},
		{"* * * * * *", time.Date(2026, 12, 7, 10, 0, 31, 0, time.UTC)},
		{"*/10 * * * * *", time.Date(2026, 12, 7, 10, 0, 40, 0, time.UTC)},
		{"@every 10s", time.Date(2026, 12, 7, 10, 0, 40, 0, time.UTC)},
		{"@every 1s", time.Date(2026, 12, 7, 10, 0, 31, 0, time.UTC)},
		{"@hourly", time.Date(2026, 12, 7, 11, 0, 0, 0, time.UTC)},
		{"0 12 * * *", time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)},
		{"CRON_TZ=UTC 0 12 * * *", time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)},
		{"TZ=UTC @daily", time.Date(2026, 12, 8, 0, 0, 0, 0, time.UTC)},
	}
	for _, c := range cases {
		s, err := Parse(c.spec)
		if err != nil {
			t.Fatalf("%q: %v", c.spec, err)
		}
		if got := s.Next(base); !got.Equal(c.want) {
			t.Errorf("%q: next after %v = %v, want %v", c.spec, base, got, c.want)
		}
	}
	for _, bad := range []string{"", "TZ=", "CRON_TZ=", "TZ=UTC", "TZ=UTC TZ=UTC * * * * *", "CRON_TZ=Nowhere/Land * * * * *", "* * *", "@every 1500ms", "@every 0s", "@every x", "61 * * * *", "* * * * * * * *"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestDue(t *testing.T) {
	s, _ := Parse("@every 1s")
	after := time.Unix(100, 0)
	slots, more := Due(s, after, time.Unix(130, 200), 20)
	if len(slots) != 20 || more != 10 || slots[0].Unix() != 111 || slots[19].Unix() != 130 {
		t.Fatalf("due: %d slots from %v, %d more", len(slots), slots[0], more)
	}
	if slots, _ := Due(s, after, time.Unix(100, 999), 20); len(slots) != 0 {
		t.Fatalf("due before the next slot: %v", slots)
	}
}

func TestCondition(t *testing.T) {
	cases := []struct {
		s     string
		count int64
		holds bool
	}{
		{"count > 5", 6, true}, {"count>5", 5, false}, {"count >= 5", 5, true},
		{"count < 1", 0, true}, {"count <= 0", 1, false}, {"count == 3", 3, true}, {"count != 3", 3, false},
	}
	for _, c := range cases {
		cond, err := ParseCondition(c.s)
		if err != nil {
			t.Fatalf("%q: %v", c.s, err)
		}
		if cond.Holds(c.count) != c.holds {
			t.Errorf("%q on %d: holds=%v", c.s, c.count, !c.holds)
		}
	}
	for _, bad := range []string{"", "count", "count >", "rows > 5", "count => 5", "count > 5x", "count ~ 2"} {
		if _, err := ParseCondition(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/5 * * * * *", "@every 10s", "@daily", "CRON_TZ=Europe/Paris 0 9 * * 1-5", "bad"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := Parse(spec)
		if err != nil {
			return
		}
		base := time.Unix(1_800_000_000, 0)
		n := s.Next(base)
		if !n.IsZero() && (!n.After(base) || n.Nanosecond() != 0) {
			t.Fatalf("%q: next after %v is %v", spec, base, n)
		}
	})
}

func FuzzParseCondition(f *testing.F) {
	for _, s := range []string{"count > 5", "count>=0", "count != -1", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCondition(s)
		if err != nil {
			return
		}
		back, err := ParseCondition(c.String())
		if err != nil || back != c {
			t.Fatalf("%q → %q → %v, %v", s, c.String(), back, err)
		}
	})
}
