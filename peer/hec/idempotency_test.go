package hec

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/internal/testutil"
	"github.com/quarry-dev/quarry/peer/idem"
	"github.com/quarry-dev/quarry/peer/store"
)

func (f *fixture) postKeyed(t *testing.T, path, auth, channel, key, body string) (int, hecReply) {
	t.Helper()
	req, _ := http.NewRequest("POST", f.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Authorization", auth)
	if channel != "" {
		req.Header.Set("X-Splunk-Request-Channel", channel)
	}
	if key != "" {
		req.Header.Set(IdempotencyHeader, key)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var r hecReply
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("reply %q: %v", b, err)
	}
	return resp.StatusCode, r
}

// events counts what the store holds, by inventory.
func (f *fixture) events(t *testing.T) int {
	t.Helper()
	if err := f.st.Flush(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range f.st.Inventory() {
		n += int(c.Events)
	}
	return n
}

const chA = "11111111-2222-4333-8444-555555555555"
const chB = "11111111-2222-4333-8444-666666666666"

// TestIdempotencyKeyOnOnePeer: with a key, a resend (on another channel,
// /event and /raw, acks and no acks) is stored once and answered as a
// success whose ack turns true; another body under the key is 422 code 24
// and stores nothing; another token's same key is its own; a bad key is
// 400 code 25; two identical requests at once are stored once; without the
// header a resend is stored again, as before.
func TestIdempotencyKeyOnOnePeer(t *testing.T) {
	f := newFixture(t, store.Options{BlockInterval: 5 * time.Millisecond})
	body := good + good + good
	st, r := f.postKeyed(t, "/services/collector/event", "Splunk ack", chA, "k-1", body)
	if st != 200 || r.AckID == nil {
		t.Fatalf("first: %d %+v", st, r)
	}
	st, r2 := f.postKeyed(t, "/services/collector/event", "Splunk ack", chB, `"k-1"`, body) // sf-string form, another channel
	if st != 200 || r2.AckID == nil || r2.Code != 0 {
		t.Fatalf("resend: %d %+v", st, r2)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if !f.acks(t, "Splunk ack", chB, *r2.AckID)[fmt.Sprint(*r2.AckID)] {
			return errors.New("the resend's ack is not true")
		}
		return nil
	})
	if n := f.events(t); n != 3 {
		t.Fatalf("stored %d events, want 3", n)
	}
	if st, r := f.postKeyed(t, "/services/collector/event", "Splunk ack", chA, "k-1", good); st != 422 || r.Code != 24 {
		t.Fatalf("another body: %d %+v, want 422 code 24", st, r)
	}
	if st, r := f.postKeyed(t, "/services/collector/event?index=web", "Splunk ack", chA, "k-1", body); st != 422 || r.Code != 24 {
		t.Fatalf("same body, another index parameter: %d %+v, want 422 code 24", st, r)
	}
	if st, _ := f.postKeyed(t, "/services/collector/event", "Splunk ack2", chA, "k-1", good); st != 200 {
		t.Fatalf("another token's key: %d", st)
	}
	if n := f.events(t); n != 4 {
		t.Fatalf("stored %d events, want 4 (3 + another token's 1)", n)
	}
	for _, bad := range []string{`"unterminated`, "caf\u00e9", strings.Repeat("x", store.MaxKeyLen+1), `""`} {
		if st, r := f.postKeyed(t, "/services/collector/event", "Splunk ack", chA, bad, good); st != 400 || r.Code != 25 {
			t.Fatalf("key %q: %d %+v, want 400 code 25", bad, st, r)
		}
	}
	// no acks, /raw: the resend waits for durability and answers 200
	for i := 0; i < 2; i++ {
		if st, r := f.postKeyed(t, "/services/collector/raw", "Splunk noack", "", "raw-1", "a\nb\n"); st != 200 || r.Code != 0 {
			t.Fatalf("raw %d: %d %+v", i, st, r)
		}
	}
	if n := f.events(t); n != 6 {
		t.Fatalf("stored %d events, want 6", n)
	}
	// two identical requests at once
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, r := f.postKeyed(t, "/services/collector/event", "Splunk noack", "", "same-time", body); st != 200 {
				t.Errorf("concurrent: %d %+v", st, r)
			}
		}()
	}
	wg.Wait()
	if n := f.events(t); n != 9 {
		t.Fatalf("stored %d events, want 9 (eight identical requests at once stored once)", n)
	}
	// without the header nothing changes: a resend is stored again
	f.post(t, "/services/collector/event", "Splunk noack", "", good)
	f.post(t, "/services/collector/event", "Splunk noack", "", good)
	if n := f.events(t); n != 11 {
		t.Fatalf("stored %d events, want 11", n)
	}
}

// fakePeers answers key lookups as scripted.
type fakePeers struct {
	mu  sync.Mutex
	ans RemoteKey
	err error
}

func (p *fakePeers) LookupKey(context.Context, [32]byte, string, [32]byte) (RemoteKey, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ans, p.err
}

// TestIdempotencyKeyAcrossPeers: what the other peers hold decides — all
// of it: answered, nothing stored; part of it: only the rest stored;
// another body: 422; being stored elsewhere: 503 code 9, nothing stored.
func TestIdempotencyKeyAcrossPeers(t *testing.T) {
	fp := &fakePeers{}
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, func(c *Config) { c.KeyPeers = fp })
	body := good + good + good + good
	steps := []struct {
		key    string
		remote RemoteKey
		status int
		code   int
		stored int
	}{
		{"all", RemoteKey{Spans: []idem.Span{{First: 0, Count: 4}}}, 200, 0, 0},
		{"part", RemoteKey{Spans: []idem.Span{{First: 1, Count: 2}}}, 200, 0, 2},
		{"other-body", RemoteKey{Mismatch: true}, 422, 24, 2},
		{"elsewhere-now", RemoteKey{Pending: true}, 503, 9, 2},
		{"none", RemoteKey{}, 200, 0, 6},
	}
	for _, s := range steps {
		fp.mu.Lock()
		fp.ans = s.remote
		fp.mu.Unlock()
		st, r := f.postKeyed(t, "/services/collector/event", "Splunk noack", "", s.key, body)
		if st != s.status || r.Code != s.code {
			t.Fatalf("%s: %d %+v, want %d code %d", s.key, st, r, s.status, s.code)
		}
		if n := f.events(t); n != s.stored {
			t.Fatalf("%s: %d events stored, want %d", s.key, n, s.stored)
		}
	}
	// the key found whole elsewhere is now known here without asking
	fp.mu.Lock()
	fp.ans = RemoteKey{Mismatch: true}
	fp.mu.Unlock()
	if st, _ := f.postKeyed(t, "/services/collector/event", "Splunk noack", "", "all", body); st != 200 {
		t.Fatalf("a key learned from other peers: %d", st)
	}
}

// FuzzParseIdempotencyKey: no header value makes the parser panic; what
// it accepts is a valid key, and a bare valid key reads as itself.
func FuzzParseIdempotencyKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `abc`, `"a\"b\\c"`, `"open`, `"x"y`, ``, `  k  `, "\x00", `"\q"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		k, err := ParseIdempotencyKey(v)
		if err != nil {
			return
		}
		if !store.ValidKey(k) {
			t.Fatalf("%q parsed to invalid key %q", v, k)
		}
		if store.ValidKey(v) && !strings.HasPrefix(v, `"`) && v == strings.Trim(v, " \t") && k != v {
			t.Fatalf("bare key %q read as %q", v, k)
		}
	})
}

// TestIdempotencyAcrossTheTokenKey (review L1, issue 24): when the
// cluster's token key arrives and a token comes back as its keyed digest,
// a key its shipper used before the switch is still known — a retry that
// straddles the switch is answered, not stored again; with the header
// only on the retry a resend is stored, as without a key.
func TestIdempotencyAcrossTheTokenKey(t *testing.T) {
	key := bytes.Repeat([]byte{9}, fsm.TokenKeySize)
	const secret = "idem-secret-0001"
	f := newFixtureWith(t, store.Options{BlockInterval: 5 * time.Millisecond}, func(c *Config) {
		c.Tokens = []Token{{Value: fsm.TokenDigest(secret), Ack: true}}
	})
	body := good + good
	if st, r := f.postKeyed(t, "/services/collector/event", "Splunk "+secret, chA, "k-switch", body); st != 200 || r.Code != 0 {
		t.Fatalf("before the key: %d %+v", st, r)
	}
	f.h.SetTokens([]Token{{Value: fsm.KeyedDigest(key, secret), Ack: true, Key: key}})
	st, r := f.postKeyed(t, "/services/collector/event", "Splunk "+secret, chB, "k-switch", body)
	if st != 200 || r.Code != 0 || r.AckID == nil {
		t.Fatalf("the retry after the key: %d %+v", st, r)
	}
	testutil.WaitFor(t, 5*time.Second, func() error {
		if !f.acks(t, "Splunk "+secret, chB, *r.AckID)[fmt.Sprint(*r.AckID)] {
			return errors.New("the retry's ack is not true")
		}
		return nil
	})
	if n := f.events(t); n != 2 {
		t.Fatalf("stored %d events, want 2: the retry across the switch was stored again", n)
	}
	if st, r := f.postKeyed(t, "/services/collector/event", "Splunk "+secret, chA, "k-switch", good); st != 422 || r.Code != 24 {
		t.Fatalf("another body under the key after the switch: %d %+v, want 422 code 24", st, r)
	}
}
