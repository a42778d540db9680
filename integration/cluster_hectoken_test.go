package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hecPost posts one envelope to a peer's /event and returns status and code.
func hecPost(t *testing.T, url, token, channel string) (int, int, *int64) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/services/collector/event", strings.NewReader(`{"event":"token test"}`))
	req.Header.Set("Authorization", "Splunk "+token)
	if channel != "" {
		req.Header.Set("X-Splunk-Request-Channel", channel)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Code  int    `json:"code"`
		AckID *int64 `json:"ackId"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("reply %q: %v", b, err)
	}
	return resp.StatusCode, r.Code, r.AckID
}

// TestHECTokensFromClusterConfig: a token with "use_ack": false in the
// cluster config needs no channel on a cluster peer, and a change through
// POST /v1/config (acks turned off for one token, a new token that leaves
// use_ack out and so acknowledges) reaches the running peers.
func TestHECTokensFromClusterConfig(t *testing.T) {
	c := Start(t, Options{PeersPerSite: 2})
	url := "http://" + c.Peer("site2-p1").Addr()
	const ch = "11111111-2222-3333-4444-555555555555"
	if s, code, id := hecPost(t, url, NoAckHECToken, ""); s != 200 || code != 0 || id != nil {
		t.Fatalf("use_ack false token without a channel: %d code %d ackId %v", s, code, id)
	}
	if s, code, _ := hecPost(t, url, HECToken, ""); s != 400 || code != 10 {
		t.Fatalf("acknowledging token without a channel: %d code %d, want 400 code 10", s, code)
	}
	// Read the config, change the tokens, write it back.
	req, _ := http.NewRequest("GET", "http://"+c.Leader().HTTPAddr()+"/v1/config", nil)
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	json.NewDecoder(resp.Body).Decode(&cfg)
	resp.Body.Close()
	cfg["hec_tokens"] = []map[string]any{
		{"token": HECToken, "use_ack": false},
		{"token": NoAckHECToken, "use_ack": false},
		{"token": "late", "indexes": []string{"main"}},
	}
	body, _ := json.Marshal(cfg)
	c.AdminPost("/v1/config", string(body))
	c.WaitFor(15*time.Second, func() error {
		if s, code, _ := hecPost(t, url, HECToken, ""); s != 200 || code != 0 {
			return fmt.Errorf("token turned to use_ack false: %d code %d", s, code)
		}
		return nil
	})
	if s, code, _ := hecPost(t, url, "late", ""); s != 400 || code != 10 {
		t.Fatalf("new token without use_ack (acknowledging) and no channel: %d code %d, want 400 code 10", s, code)
	}
	if s, code, id := hecPost(t, url, "late", ch); s != 200 || code != 0 || id == nil || *id != 0 {
		t.Fatalf("new token on a channel: %d code %d ackId %v", s, code, id)
	}
	// A typo in a token's fields is refused and changes nothing.
	cfg["hec_tokens"] = []map[string]any{{"token": "typo", "useack": false}}
	body, _ = json.Marshal(cfg)
	req, _ = http.NewRequest("POST", "http://"+c.Leader().HTTPAddr()+"/v1/config", strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+AdminToken)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(b), "useack") {
		t.Fatalf("config with a misspelt token field: %d %s, want 400 naming it", resp.StatusCode, b)
	}
	if s, code, _ := hecPost(t, url, "late", ch); s != 200 || code != 0 {
		t.Fatalf("after the refused config the tokens changed: %d code %d", s, code)
	}
}
