package localonly

import (
	"net/http/httptest"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		host, origin string
		ok           bool
	}{
		{"127.0.0.1:18031", "", true},
		{"localhost:18031", "", true},
		{"[::1]:18031", "", true},
		{"127.0.0.1", "", true},
		{"127.0.0.1:18031", "http://127.0.0.1:18031", true},
		{"localhost:18031", "http://localhost:18031", true},
		{"attacker.example:32973", "", false},                              // DNS rebinding, no Origin (GET)
		{"attacker.example:32973", "http://attacker.example:32973", false}, // DNS rebinding, POST
		{"127.0.0.1:18031", "http://attacker.example", false},              // cross-origin POST
		{"127.0.0.1:18031", "null", false},                                 // sandboxed page
		{"10.0.0.1:18031", "", false},
		{"", "", false},
	} {
		r := httptest.NewRequest("POST", "http://x/v1/search", nil)
		r.Host = tc.host
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if err := Check(r); (err == nil) != tc.ok {
			t.Errorf("Host %q Origin %q: err %v, want ok=%v", tc.host, tc.origin, err, tc.ok)
		}
	}
}
