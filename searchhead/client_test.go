package searchhead

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

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
