package searchhead

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/query"
)

func TestClientSearch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req query.Request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/v1/search" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if r.Header.Get("Authorization") != "Bearer T" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":"no token","code":"unauthorized"}`))
			return
		}
		w.Write([]byte(`{"results":[{"count":3}],"summary":{"peers":[]}}`))
	}))
	defer srv.Close()
	ctx := context.Background()
	a, err := Client{URL: srv.URL, Token: "T"}.Search(ctx, query.Request{Query: "x | stats count"})
	if err != nil || a.Status != 200 || len(a.Resp.Results) != 1 || a.Resp.Results[0]["count"] != json.Number("3") {
		t.Fatalf("Search = %+v, %v", a, err)
	}
	a, err = Client{URL: srv.URL}.Search(ctx, query.Request{Query: "x"})
	if err != nil || a.Status != 401 || a.Error != "no token" || a.Code != "unauthorized" {
		t.Fatalf("refused search = %+v, %v", a, err)
	}
	a, err = Client{URL: srv.URL}.Search(ctx, "not a request")
	if err != nil || a.Status != 400 || a.Error != "bad request\n" {
		t.Fatalf("non-JSON refusal = %+v, %v", a, err)
	}
}

// TestClientStream pins what the CLI reads from a search head: the rows of
// an NDJSON answer as they come, the summary line (with a streamed
// | table's columns), an error line, an answer cut short of its summary,
// a refusal, a process of another role, and the head's site.
func TestClientStream(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		role := "searchhead"
		if r.URL.Path == "/peer/v1/search" {
			role = "peer"
		}
		w.Header().Set(api.RoleHeader, role)
		if r.URL.Path == "/healthz" {
			w.Write([]byte(`{"status":"ok","site":"site1"}`))
			return
		}
		if r.URL.Query().Get("stream") != "true" {
			w.WriteHeader(400)
			return
		}
		switch r.URL.Path {
		case "/ok/v1/search":
			w.Write([]byte(`{"host":"a","n":12345678901234567890}` + "\n" + `{"host":"b"}` + "\n" +
				`{"summary":{"generation":7,"peers":["p1"]},"fields":["host"]}` + "\n"))
		case "/fail/v1/search":
			w.Write([]byte(`{"host":"a"}` + "\n" + `{"error":"boom","code":"search_failed"}` + "\n"))
		case "/cut/v1/search":
			w.Write([]byte(`{"host":"a"}` + "\n"))
		case "/refused/v1/search":
			w.WriteHeader(429)
			w.Write([]byte(`{"error":"too many","code":"busy"}`))
		case "/plain/v1/search":
			w.WriteHeader(502)
			w.Write([]byte("down\n"))
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	var rows []map[string]any
	row := func(r map[string]any) { rows = append(rows, r) }
	c := Client{URL: srv.URL + "/ok", Role: api.RoleSearchHead}
	a, err := c.Stream(ctx, query.Request{Query: "x"}, row)
	if err != nil || a.Status != 200 || len(rows) != 2 || rows[0]["n"] != json.Number("12345678901234567890") ||
		a.Resp.Summary.Generation != 7 || !slices.Equal(a.Resp.Fields, []string{"host"}) {
		t.Fatalf("Stream = %+v %v, rows %v", a, err, rows)
	}
	rows = nil
	_, err = Client{URL: srv.URL + "/fail"}.Stream(ctx, query.Request{Query: "x"}, row)
	var se *StreamError
	if !errors.As(err, &se) || se.Msg != "boom" || se.Code != "search_failed" || len(rows) != 1 {
		t.Fatalf("error line = %v, rows %v", err, rows)
	}
	if _, err = (Client{URL: srv.URL + "/cut"}).Stream(ctx, query.Request{Query: "x"}, row); err == nil || !strings.Contains(err.Error(), "without a summary") {
		t.Fatalf("cut answer = %v", err)
	}
	a, err = Client{URL: srv.URL + "/refused"}.Stream(ctx, query.Request{Query: "x"}, row)
	if err != nil || a.Status != 429 || a.Error != "too many" || a.Code != "busy" || a.RawError {
		t.Fatalf("refused = %+v %v", a, err)
	}
	a, err = Client{URL: srv.URL + "/plain"}.Stream(ctx, query.Request{Query: "x"}, row)
	if err != nil || a.Status != 502 || a.Error != "down\n" || !a.RawError {
		t.Fatalf("refused with a plain body = %+v %v", a, err)
	}
	_, err = Client{URL: srv.URL + "/peer", Role: api.RoleSearchHead}.Stream(ctx, query.Request{Query: "x"}, row)
	var re *RoleError
	if !errors.As(err, &re) || re.Got != "peer" || re.Want != "searchhead" {
		t.Fatalf("a peer's answer = %v", err)
	}
	if site, err := (Client{URL: srv.URL}).Site(ctx); err != nil || site != "site1" {
		t.Fatalf("Site = %q %v", site, err)
	}
}

// TestClientPost: the whole answer as read, for a caller that prints it
// as it came.
func TestClientPost(t *testing.T) {
	const body = `{"results":[],"summary":{"peers":[]}}` + "\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.RoleHeader, api.RolePeer)
		w.Write([]byte(body))
	}))
	defer srv.Close()
	a, err := Client{URL: srv.URL, Role: api.RolePeer}.Post(context.Background(), query.Request{Query: "x"})
	if err != nil || a.Status != 200 || string(a.Body) != body {
		t.Fatalf("Post = %+v %v", a, err)
	}
	_, err = Client{URL: srv.URL, Role: api.RoleSearchHead}.Search(context.Background(), query.Request{Query: "x"})
	var re *RoleError
	if !errors.As(err, &re) {
		t.Fatalf("Search of a peer as a search head = %v", err)
	}
}
