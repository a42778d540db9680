package fsm

import (
	"errors"
	"strings"
	"testing"
)

func TestValidBucketID(t *testing.T) {
	for _, id := range []string{"main~0~G", "web_1-x~18446744073709551615~57AE2B1A-67A0-4C48-90B3-FC397077995C"} {
		if _, _, _, err := ValidBucketID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range []string{"", "main~7~x/../../..", "main~7~..", "..~7~G", "main~..~G", "main~7~G\\x", "Main~7~G",
		"main~7~G~x", "main~7", "main~~G", "_main~7~G", "main~7~-G", "main~+7~G", "main~7~G\x00", "main~7~" + strings.Repeat("G", 65)} {
		if _, _, _, err := ValidBucketID(id); !errors.Is(err, ErrBadID) {
			t.Errorf("%q: %v, want %v", id, err, ErrBadID)
		}
	}
	for _, n := range []string{"p1", "site1-p1", "m_1"} {
		if err := ValidName("peer", n); err != nil {
			t.Errorf("peer %q: %v", n, err)
		}
	}
	for _, n := range []string{"", "..", "p/1", "p\\1", "p 1", "p.1", "p*", ">", "a~b", strings.Repeat("p", 129)} {
		if err := ValidName("peer", n); !errors.Is(err, ErrBadID) {
			t.Errorf("peer %q: %v, want %v", n, err, ErrBadID)
		}
	}
}

// FuzzValidBucketID: an id the validator takes is three parts that rejoin
// to it, none of which can name a path or a parent folder.
func FuzzValidBucketID(f *testing.F) {
	for _, s := range []string{"main~0~G", "main~7~x/../../..", "main~7~..", "a~1~b~c", "~~", "web_1-x~42~57AE2B1A-67A0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		index, local, guid, err := ValidBucketID(id)
		if err != nil {
			if !errors.Is(err, ErrBadID) {
				t.Fatalf("%q: error %v does not wrap ErrBadID", id, err)
			}
			return
		}
		if BucketID(index, local, guid) != id {
			t.Fatalf("%q: parts %q %q %q do not rejoin to it", id, index, local, guid)
		}
		if strings.ContainsAny(id, "/\\.\x00") || strings.Contains(id, "..") {
			t.Fatalf("%q: valid, but can name a path", id)
		}
	})
}
