package manager

import (
	"strconv"
	"testing"
	"time"
)

// FuzzParseRetentionPeriod: never panics; an accepted period is not
// negative, and a bare number of days is exactly that many days.
func FuzzParseRetentionPeriod(f *testing.F) {
	for _, s := range []string{"", "0", "90d", "2w", "720h", "1h30m", "86400", "-1h", "1.5d", "99999999999999999d", "d", "w", "1e9h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseRetentionPeriod(s)
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("ParseRetentionPeriod(%q) = %v, negative", s, d)
		}
		if d%(24*time.Hour) == 0 && d > 0 {
			if again, err := ParseRetentionPeriod(d.String()); err != nil || again != d {
				t.Fatalf("%q → %v, which reads back as %v, %v", s, d, again, err)
			}
		}
	})
}

// FuzzParseByteSize: never panics; an accepted size is not negative, and
// its decimal form reads back as itself.
func FuzzParseByteSize(f *testing.F) {
	for _, s := range []string{"", "0", "1048576", "10KB", "2 GB", "1TiB", "3g", "12b", "-1", "1.5GB", "9999999999TB", "kb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseByteSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseByteSize(%q) = %d, negative", s, n)
		}
		if again, err := ParseByteSize(strconv.FormatInt(n, 10)); err != nil || again != n {
			t.Fatalf("%q → %d, which reads back as %d, %v", s, n, again, err)
		}
	})
}
