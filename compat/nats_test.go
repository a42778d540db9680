package compat

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/bus"
	"github.com/quarry-dev/quarry/fsm"
	"github.com/quarry-dev/quarry/manager"
	"github.com/quarry-dev/quarry/peer"
	"github.com/quarry-dev/quarry/searchhead"
)

// buildNATSCLI builds the NATS CLI (github.com/nats-io/natscli v0.5.1, a
// tool of this module) from the module cache.
func buildNATSCLI(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "nats")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/nats-io/natscli/nats")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the NATS CLI: %v\n%s", err, out)
	}
	return bin
}

// natsSub starts `nats sub SUBJECT --count 1` and returns its output lines.
func natsSub(t *testing.T, ctx context.Context, bin, url, user, pass, subject string) (*exec.Cmd, <-chan string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, "sub", subject, "--count", "1", "-s", url, "--user", user, "--password", pass)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	return cmd, lines
}

// TestNATSCLISubscriber: the real NATS CLI, with a quarry-issued
// subscriber credential (bus role subscriber), receives the managers'
// generation notices on quarry.gen and a search head's published results
// on quarry.results.> (rows, then the summary) — and is refused
// quarry.repl.>.
func TestNATSCLISubscriber(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the NATS CLI")
	}
	natsBin := buildNATSCLI(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	srv, err := bus.StartServer(ctx, bus.ServerConfig{Name: "n1", Site: "site1", Listen: "127.0.0.1:0",
		User: "admin", Password: "admin-pw", Users: []bus.User{
			{Name: "mgr", Password: "mgr-pw", Role: bus.RoleManager},
			{Name: "peer", Password: "peer-pw", Role: bus.RolePeer},
			{Name: "watch", Password: "watch-pw", Role: bus.RoleSubscriber},
			{Name: "sh", Password: "sh-pw", Role: bus.RoleSearchHead},
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	url := srv.ClientURL()
	seed := fsm.DefaultConfig()
	seed.ReplicationFactor, seed.SearchFactor = 1, 1
	seed.HECTokens = []fsm.HECToken{{Token: "noack", Ack: false}}
	m, err := manager.New(ctx, manager.Config{ID: "m1", DataDir: t.TempDir(), RaftAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		NATS: url, NATSUser: "mgr", NATSPassword: "mgr-pw", AdminToken: "adm", RaftLogLevel: "error", LogOutput: io.Discard,
		Bootstrap: []manager.Server{{ID: "m1", RaftAddr: "127.0.0.1:0"}}, Seed: &seed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	deadline := time.Now().Add(20 * time.Second)
	for !m.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("the manager did not become leader")
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}

	// Forbidden first: the subscriber credential cannot listen to replication.
	denied, deniedOut := natsSub(t, ctx, natsBin, url, "watch", "watch-pw", "quarry.repl.>")
	sawViolation := false
	for l := range deniedOut {
		if strings.Contains(strings.ToLower(l), "permissions violation") {
			sawViolation = true
			break
		}
	}
	denied.Process.Kill()
	denied.Wait()
	if !sawViolation {
		t.Fatal("nats sub quarry.repl.> with the subscriber credential: no permissions violation")
	}

	sub, lines := natsSub(t, ctx, natsBin, url, "watch", "watch-pw", "quarry.gen")
	for l := range lines {
		t.Logf("nats sub: %s", l)
		if strings.Contains(l, "Subscribing on") {
			break
		}
	}
	// A peer registering changes the generation: the manager publishes.
	p, err := peer.Start(peer.Config{ID: "p1", Site: "site1", DataDir: t.TempDir(), HTTPAddr: "127.0.0.1:0", Searchable: true,
		NATS: url, NATSUser: "peer", NATSPassword: "peer-pw", ManagerToken: "adm", JoinTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	var notice map[string]any
	for l := range lines {
		t.Logf("nats sub: %s", l)
		if strings.HasPrefix(strings.TrimSpace(l), "{") && json.Unmarshal([]byte(l), &notice) == nil {
			break
		}
	}
	if err := sub.Wait(); err != nil {
		t.Fatalf("nats sub: %v", err)
	}
	if notice == nil || notice["leader"] != "m1" {
		t.Fatalf("nats sub quarry.gen got %v, want a generation notice from m1", notice)
	}
	t.Logf("nats sub quarry.gen received %v", notice)

	ctx, cancel2 := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel2()
	// Published search results: 50 events in (the token without acks
	// answers once they are durable), a search head with its own
	// credential, `nats sub 'quarry.results.>' --count 2` (one batch, one
	// summary).
	var body strings.Builder
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&body, `{"event":"published event %d","time":1767225600}`, i)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+p.Addr()+"/services/collector/event", strings.NewReader(body.String()))
	req.Header.Set("Authorization", "Splunk noack")
	res, err := http.DefaultClient.Do(req)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("HEC: %v %v", err, res)
	}
	res.Body.Close()
	h, err := searchhead.New(ctx, searchhead.Config{ID: "sh1", Site: "site1", HTTPAddr: "127.0.0.1:0", NATS: url, NATSUser: "sh", NATSPassword: "sh-pw", Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if err := h.Start(); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, natsBin, "sub", "quarry.results.>", "--count", "2", "-s", url, "--user", "watch", "--password", "watch-pw")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewScanner(out)
	rd.Buffer(make([]byte, 1<<20), 1<<20)
	subscribed := make(chan struct{})
	var got []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		once := false
		for rd.Scan() {
			l := rd.Text()
			if !once && strings.Contains(l, "Subscribing on") {
				once = true
				close(subscribed)
				continue
			}
			got = append(got, l)
		}
	}()
	select {
	case <-subscribed:
	case <-ctx.Done():
		t.Fatal("nats sub did not subscribe")
	}
	// The CLI prints "Subscribing on" once its SUB is sent; a flush of
	// our own connection after a search round-trips through the same
	// server, and the search takes longer than that anyway.
	var sr struct {
		Results []map[string]any `json:"results"`
	}
	for i := 0; ; i++ {
		b, _ := json.Marshal(map[string]any{"query": "published | sort _raw", "publish": "compat"})
		res, err := http.Post(h.URL()+"/v1/search", "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		json.NewDecoder(res.Body).Decode(&sr)
		res.Body.Close()
		if len(sr.Results) == 50 || i > 100 {
			break
		}
		time.Sleep(100 * time.Millisecond) // polling: the peer's events become searchable
	}
	<-done
	if err := cmd.Wait(); err != nil {
		t.Fatalf("nats sub quarry.results.>: %v (%v)", err, got)
	}
	var rows []map[string]any
	summaries := 0
	for _, l := range got {
		l = strings.TrimSpace(l)
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("nats sub printed %q: %v", l, err)
		}
		if _, ok := m["summary"]; ok {
			summaries++
			continue
		}
		rows = append(rows, m)
	}
	if summaries != 1 || len(rows) != 50 || len(sr.Results) != 50 {
		t.Fatalf("nats sub quarry.results.> got %d rows and %d summaries (search gave %d rows), want 50 and 1", len(rows), summaries, len(sr.Results))
	}
	for i := range rows {
		if rows[i]["_raw"] != sr.Results[i]["_raw"] {
			t.Fatalf("published row %d out of order: %v vs %v", i, rows[i]["_raw"], sr.Results[i]["_raw"])
		}
	}
}
