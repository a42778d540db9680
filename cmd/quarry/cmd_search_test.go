package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quarry-dev/quarry/query"
	"github.com/urfave/cli/v2"
)

// fakePeer answers /v1/search over an in-memory segment, as a peer does.
func fakePeer(t *testing.T) *httptest.Server {
	t.Helper()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	seg := query.NewMemSegment("main~1~p1", "main", []query.Event{
		{Time: base, Raw: "GET /a 500 upstream error", Host: "web-01", Sourcetype: "access", Index: "main"},
		{Time: base + 1, Raw: "GET /b 200 ok", Host: "web-02", Sourcetype: "access", Index: "main"},
		{Time: base + 2, Raw: "GET /c 503 error", Host: "web-01", Sourcetype: "access", Index: "main"},
	})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req query.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/search" {
			w.WriteHeader(400)
			return
		}
		req.Server = "p1"
		resp, err := query.Search(r.Context(), req, []query.Segment{seg})
		var se *query.SyntaxError
		if errors.As(err, &se) {
			w.WriteHeader(400)
			json.NewEncoder(w).Encode(map[string]string{"error": se.Error(), "code": "bad_query"})
			return
		}
		json.NewEncoder(w).Encode(resp)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runCommand(searchCommand(), args...)
}

// runCommand runs one command of the CLI with args and returns what it
// wrote to stdout.
func runCommand(cmd *cli.Command, args ...string) (string, error) {
	app := &cli.App{Commands: []*cli.Command{cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	old := os.Stdout
	r, w, _ := os.Pipe()
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	err := app.Run(append([]string{"quarry", cmd.Name}, args...))
	w.Close()
	os.Stdout = old
	return <-done, err
}

func TestSearchCLI(t *testing.T) {
	srv := fakePeer(t)
	out, err := runCLI(t, "--peer", srv.URL, "error | stats count by host")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "host") || !strings.Contains(out, "web-01  2") {
		t.Errorf("table output = %q", out)
	}
	out, err = runCLI(t, "--peer", srv.URL, "--output", "raw", "error")
	if err != nil {
		t.Fatal(err)
	}
	if out != "GET /c 503 error\nGET /a 500 upstream error\n" {
		t.Errorf("raw output = %q", out)
	}
	out, err = runCLI(t, "--peer", srv.URL, "--output", "json", "| stats count")
	if err != nil {
		t.Fatal(err)
	}
	var resp query.Response
	if err := json.Unmarshal([]byte(out), &resp); err != nil || len(resp.Results) != 1 || resp.Results[0]["count"] != float64(3) {
		t.Errorf("json output = %q (%v)", out, err)
	}
	// Flags after the query, as SPEC §8 writes them.
	out, err = runCLI(t, "error", "--peer", srv.URL, "--output=raw")
	if err != nil || out != "GET /c 503 error\nGET /a 500 upstream error\n" {
		t.Errorf("flags after the query: %q %v", out, err)
	}
	if _, err = runCLI(t, "error", "--peer", srv.URL, "--no-such-flag"); err == nil || !strings.Contains(err.Error(), "unknown flag --no-such-flag") {
		t.Errorf("unknown trailing flag = %v", err)
	}
	// A syntax error is one clear line with its position, before any call.
	_, err = runCLI(t, "--peer", "127.0.0.1:1", "error | stats")
	if err == nil || !strings.Contains(err.Error(), "column 14") {
		t.Errorf("syntax error = %v, want its column", err)
	}
	// --preference, --site and --fresh route through a search head only.
	_, err = runCLI(t, "--peer", srv.URL, "--preference", "_local", "error")
	if err == nil || !strings.Contains(err.Error(), "need --searchhead") {
		t.Errorf("--preference with --peer = %v, want a refusal", err)
	}
	// --searchhead is built (searchhead/); pointed at a peer, which does
	// not stream a search head's answer, it fails with one clear line.
	_, err = runCLI(t, "--searchhead", srv.URL, "error")
	if err == nil || !strings.Contains(err.Error(), "without a summary") {
		t.Errorf("--searchhead at a peer = %v, want an answer without a summary", err)
	}
	_, err = runCLI(t, "--peer", "127.0.0.1:1", "--timeout", "2s", "error")
	if err == nil {
		t.Errorf("an unreachable peer did not fail")
	}
}
