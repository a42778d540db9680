package fsm

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, TokenKeySize) }

// TestSetTokenKey: refused below TokenKeyVersion, a key of another length
// refused, set once (the same key again a no-op, another refused), kept
// by a SetConfig, deep in a clone.
func TestSetTokenKey(t *testing.T) {
	h := newHarness(t)
	h.config(singleSite(1, 1))
	h.must(&SetClusterVersion{Version: TokenKeyVersion - 1})
	h.refuse(&SetTokenKey{Key: testKey(1)}, ErrClusterVersion)
	if TokenKeyOf(h.s) != nil {
		t.Fatal("a key below the version")
	}
	h.must(&SetClusterVersion{Version: TokenKeyVersion})
	h.refuse(&SetTokenKey{Key: testKey(1)[:16]}, ErrBadTokenKey)
	h.refuse(&SetTokenKey{}, ErrBadTokenKey)
	h.must(&SetTokenKey{Key: testKey(1)})
	if !bytes.Equal(TokenKeyOf(h.s), testKey(1)) {
		t.Fatalf("key %x", TokenKeyOf(h.s))
	}
	h.must(&SetTokenKey{Key: testKey(1)})
	h.refuse(&SetTokenKey{Key: testKey(2)}, ErrTokenKeyExists)
	h.config(singleSite(1, 1))
	if !bytes.Equal(TokenKeyOf(h.s), testKey(1)) {
		t.Fatal("a SetConfig dropped the key")
	}
	TokenKeyOf(h.s)[0] = 9
	c := h.s.Clone()
	c.d.TokenKey[0] = 9
	if !bytes.Equal(TokenKeyOf(h.s), testKey(1)) || !bytes.Equal(TokenKeyOf(c), append([]byte{9}, testKey(1)[1:]...)) {
		t.Fatal("a clone or TokenKeyOf shares the key's bytes")
	}
	if s := (SetTokenKey{Key: testKey(7)}).String(); strings.Contains(s, "0707") {
		t.Fatalf("String shows the key: %s", s)
	}
}

// TestTokenKeyVersionGate: the command needs TokenKeyVersion, and a build
// of the version before stops on it rather than diverge.
func TestTokenKeyVersionGate(t *testing.T) {
	if v := NeedsClusterVersion(&SetTokenKey{}); v != TokenKeyVersion || TokenKeyVersion != Version {
		t.Fatalf("SetTokenKey needs %d, TokenKeyVersion %d, Version %d", v, TokenKeyVersion, Version)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a build of version 9 applied SetTokenKey")
		}
	}()
	f := NewAt(TokenKeyVersion - 1)
	b, _ := Encode(&SetTokenKey{Key: testKey(1)})
	f.Apply(1, b)
}

// TestTokenKeySnapshot: the key survives the binary snapshot (the group's
// format from BinarySnapshotVersion), the JSON one (State.Marshal, which
// Restore reads too) and a restore of each ends byte-identical.
func TestTokenKeySnapshot(t *testing.T) {
	f := New()
	for i, c := range []Command{
		&SetConfig{Config: singleSite(1, 1)},
		&SetClusterVersion{Version: Version},
		&SetTokenKey{Key: testKey(3)},
	} {
		b, _ := Encode(c)
		if r, ok := f.Apply(uint64(i+1), b).(error); ok {
			t.Fatal(r)
		}
	}
	bin := snapshotBytes(t, f)
	if !bytes.HasPrefix(bin, []byte(binSnapshotMagic)) {
		t.Fatal("snapshot not binary")
	}
	js := marshal(t, f)
	for name, b := range map[string][]byte{"binary": bin, "json": js} {
		f2 := restored(t, b)
		if !bytes.Equal(marshal(t, f2), js) {
			t.Fatalf("%s: restored state differs", name)
		}
		f2.Read(func(s *State) {
			if !bytes.Equal(TokenKeyOf(s), testKey(3)) {
				t.Fatalf("%s: restored key %x", name, TokenKeyOf(s))
			}
		})
	}
	// A state without a key writes no key field: older snapshots and a
	// group below the version stay byte-identical.
	if b, _ := NewState().Marshal(); bytes.Contains(b, []byte("token_key")) {
		t.Fatal("an empty state writes token_key")
	}
}

// TestKeyedDigests: the keyed and unkeyed forms, what matches what, and
// that Redacted uses the key and WithoutTokens leaves no digest.
func TestKeyedDigests(t *testing.T) {
	key, other := testKey(1), testKey(2)
	kd, ud := KeyedDigest(key, "s3cret"), TokenDigest("s3cret")
	if !strings.HasPrefix(kd, KeyedDigestPrefix) || !IsTokenDigest(kd) || !IsTokenDigest(ud) || KeyedDigest(nil, "s3cret") != ud {
		t.Fatalf("forms: %s %s", kd, ud)
	}
	if IsTokenDigest("hmac-sha256:"+strings.Repeat("A", 64)) || IsTokenDigest("hmac-sha256:00") || IsTokenDigest("s3cret") {
		t.Fatal("IsTokenDigest takes a non-digest")
	}
	for _, c := range []struct {
		key             []byte
		stored, present string
		want            bool
	}{
		{key, kd, "s3cret", true},
		{key, kd, "s3creT", false},
		{other, kd, "s3cret", false},
		{nil, kd, "s3cret", false},
		{key, ud, "s3cret", true}, // a stored unkeyed digest still works (rolling upgrade)
		{nil, ud, "s3cret", true},
		{key, ud, "nope", false},
		{key, "s3cret", "s3cret", true},
		{key, "s3cret", kd, false}, // a digest is no secret
		{key, kd, kd, false},
		{key, kd, "", false},
	} {
		if got := TokenMatches(c.key, c.stored, c.present); got != c.want {
			t.Errorf("TokenMatches(%x, %q, %q) = %v", c.key, c.stored, c.present, got)
		}
	}
	cfg := singleSite(1, 1)
	cfg.HECTokens = []HECToken{{Token: "hec-1", Ack: true}}
	cfg.SearchTokens = []SearchToken{{Token: "search-1", Indexes: []string{"main"}}}
	r := cfg.Redacted(key)
	if r.HECTokens[0].Token != KeyedDigest(key, "hec-1") || r.SearchTokens[0].Token != KeyedDigest(key, "search-1") || cfg.HECTokens[0].Token != "hec-1" {
		t.Fatalf("Redacted(key): %+v %+v", r.HECTokens, r.SearchTokens)
	}
	if r := cfg.Redacted(nil); r.HECTokens[0].Token != TokenDigest("hec-1") {
		t.Fatalf("Redacted(nil): %+v", r.HECTokens)
	}
	w := cfg.WithoutTokens()
	if w.HECTokens[0].Token != "" || w.SearchTokens[0].Token != "" || len(w.SearchTokens[0].Indexes) != 1 || cfg.SearchTokens[0].Token != "search-1" {
		t.Fatalf("WithoutTokens: %+v %+v", w.HECTokens, w.SearchTokens)
	}
}

// TestStatusShowsNoDigest: /v1/status's view carries no token secret and
// no digest of either form, keyed cluster or not, but keeps the count.
func TestStatusShowsNoDigest(t *testing.T) {
	h := newHarness(t)
	cfg := singleSite(1, 1)
	cfg.HECTokens = []HECToken{{Token: "hec-secret-1", Ack: true}}
	cfg.SearchTokens = []SearchToken{{Token: "search-secret-1"}}
	h.config(cfg)
	check := func(when string) {
		t.Helper()
		b, err := json.Marshal(h.s.Status())
		if err != nil {
			t.Fatal(err)
		}
		for _, bad := range []string{"sha256:", "hmac-sha256:", "hec-secret-1", "search-secret-1"} {
			if bytes.Contains(b, []byte(bad)) {
				t.Fatalf("%s: status shows %q: %s", when, bad, b)
			}
		}
		if st := h.s.Status(); len(st.Config.HECTokens) != 1 || len(st.Config.SearchTokens) != 1 {
			t.Fatalf("%s: status lost the token count", when)
		}
	}
	check("no key")
	h.must(&SetClusterVersion{Version: Version})
	h.must(&SetTokenKey{Key: testKey(4)})
	check("keyed")
}

// TestShortTokenWarning: a short secret is warned about by kind, never
// named; long secrets, digests and empty values are not.
func TestShortTokenWarning(t *testing.T) {
	if w := ShortTokenWarning("admin token", "T"); !strings.Contains(w, "admin token") || strings.Contains(w, `"T"`) {
		t.Fatalf("short: %q", w)
	}
	if w := ShortTokenWarning("HEC token", "a-long-enough-token", "", TokenDigest("x"), KeyedDigest(testKey(1), "x")); w != "" {
		t.Fatalf("nothing short: %q", w)
	}
	if w := ShortTokenWarning("HEC token", "a-long-enough-token", "short"); w == "" {
		t.Fatal("one short among long ones: no warning")
	}
}
