package searchhead

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/bus"
)

// FuzzCheckRequest feeds POST /v1/search bodies, decoded as serveSearch
// decodes them, to the checks a search passes before anything is sent. A
// request is either accepted (a plan and a preference) or refused with a
// 400 RequestError naming a code and the input; it never panics.
func FuzzCheckRequest(f *testing.F) {
	for _, s := range []string{
		`{"query":"error | stats count by host"}`,
		`{"query":"*","earliest":"-15m","latest":"now","preference":"_local"}`,
		`{"query":"status=5* | timechart span=1m count","preference":"_only_nodes:p1,p2"}`,
		`{"query":"x","preference":"_prefer_nodes:p1","publish":"errors.web","site":"site1"}`,
		`{"query":"a | top limit=3 path","earliest":"2026-01-01T00:00:00Z","allow_partial":false,"fresh":true}`,
		`{"query":"(((","preference":"_shards:1"}`,
		`{"query":"x","publish":"a b"}`,
		`{"query":" ","site":"site9"}`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	subj, err := bus.NewSubjects(bus.DefaultPrefix)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body []byte, site0 bool) {
		if len(body) > maxRequestBytes {
			return
		}
		var req Request
		if json.NewDecoder(bytes.NewReader(body)).Decode(&req) != nil {
			return
		}
		site := "site1"
		if site0 {
			site = "site0"
		}
		pref, plan, err := checkRequest("sh1", site, subj, req, now, nil)
		if err != nil {
			var re *RequestError
			if !errors.As(err, &re) || re.Status != 400 || re.Code == "" || re.Msg == "" {
				t.Fatalf("request %q refused with %#v, want a 400 RequestError with a code and a message", body, err)
			}
			return
		}
		if pref == nil || plan == nil {
			t.Fatalf("request %q accepted without a preference or a plan", body)
		}
	})
}
