package peer_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/peer/hec"
)

// TestHECEventsAsSearched: what HEC kept is what a search finds — a JSON
// object event is JSON _raw whose fields are extracted at search time,
// multivalue indexed fields match each value, and /raw's query-parameter
// metadata is searchable. The token has no acks: each 200 means durable.
func TestHECEventsAsSearched(t *testing.T) {
	tok, err := hec.ParseTokenFlag("N=main:useack=false")
	if err != nil {
		t.Fatal(err)
	}
	p, err := peer.Start(peer.Config{ID: "p1", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", Tokens: []hec.Token{tok}, Searchable: true})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	url := "http://" + p.Addr()
	post := func(path, body string) {
		t.Helper()
		req, _ := http.NewRequest("POST", url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Splunk N")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("POST %s: %d", path, resp.StatusCode)
		}
	}
	post("/services/collector", `{"time":1767225600,"event":{"user":"ann","action":"login","n":3}}`+
		`{"time":1767225601,"event":{"user":"bob","action":"login"}}`+
		`{"time":1767225602,"event":"plain text","fields":{"tag":["red","blue"],"size":42}}`)
	post("/services/collector/raw?sourcetype=syslog&host=gw1&time=1767225603", "line one\nline two\n")
	if err := p.Store().WaitIdle(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]int{
		"user=ann | stats count":                   1,
		"action=login | stats count":               2,
		"tag=red | stats count":                    1,
		"tag=blue | stats count":                   1,
		"size=42 | stats count":                    1,
		"sourcetype=syslog host=gw1 | stats count": 2,
		"* | stats count":                          5,
	} {
		body, _ := json.Marshal(map[string]string{"query": q})
		resp, err := http.Post(url+"/v1/search", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Results []map[string]any `json:"results"`
		}
		json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		got := -1
		if len(out.Results) == 1 {
			fmt.Sscan(fmt.Sprint(out.Results[0]["count"]), &got)
		}
		if got != want {
			t.Errorf("%s: %v, want count %d", q, out.Results, want)
		}
	}
}
