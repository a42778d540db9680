// Package ui owns the search page of a search head (SPEC §7 GET /): one
// HTML page, its script and its style sheet, embedded in the binary (no
// build step, nothing fetched from elsewhere). The page speaks only POST
// /v1/search on its own origin, with SPEC §7's request and its ?stream=true
// NDJSON answer, so it works in front of a search head or a standalone peer.
package ui

import (
	"embed"
	"encoding/json"
	"fmt"
	"net/http"
)

//go:embed assets
var assets embed.FS

// asset is one embedded file and its content type.
type asset struct {
	file, contentType string
}

var served = map[string]asset{
	"/":              {"assets/index.html", "text/html; charset=utf-8"},
	"/ui/search.js":  {"assets/search.js", "text/javascript; charset=utf-8"},
	"/ui/search.css": {"assets/search.css", "text/css; charset=utf-8"},
}

// Handler serves the search page at / and its assets under /ui/; any other
// path is a JSON 404 (SPEC §7's error shape). Mount it at "/" beside the
// search head's API.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := served[r.URL.Path]
		if !ok {
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no such page: %s", r.URL.Path))
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s %s: only GET", r.Method, r.URL.Path))
			return
		}
		b, err := assets.ReadFile(a.file)
		if err != nil {
			writeError(w, http.StatusInternalServerError, "internal", fmt.Sprintf("read embedded %s: %v", a.file, err))
			return
		}
		w.Header().Set("Content-Type", a.contentType)
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Write(b)
	})
}

// Size is the number of bytes of the embedded assets (the page weight).
func Size() int {
	n := 0
	for _, a := range served {
		b, _ := assets.ReadFile(a.file)
		n += len(b)
	}
	return n
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
}
