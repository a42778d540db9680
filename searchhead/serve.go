package searchhead

// The head's HTTP server: listening, routing, and the address it names.

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Start listens and serves HTTP until Close.
func (h *Head) Start() error {
	ln, err := net.Listen("tcp", h.cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("search head: listen %s: %w", h.cfg.HTTPAddr, err)
	}
	if !isLoopback(ln.Addr()) && h.cfg.AdminToken == "" && !h.hasTokens() {
		ln.Close()
		return fmt.Errorf("search head: listening on %s (not loopback) needs a search token in the cluster config (--search-token on the managers) or --admin-token", ln.Addr())
	}
	if h.cfg.AdminToken == "" && !h.hasTokens() {
		h.log.Warn("no search token configured: searches are served without a token because the head listens on loopback only", "addr", ln.Addr().String())
	}
	if ln, err = h.cfg.TLS.WrapListener(ln); err != nil { // HTTPS with a certificate
		ln.Close()
		return fmt.Errorf("search head: %w", err)
	}
	h.ln = ln
	mux := h.mux()
	h.srv = &http.Server{Handler: withBodyDeadline(h.cfg.BodyReadTimeout, mux), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idleTimeout}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		if err := h.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			h.log.Error("http server", "err", err)
		}
	}()
	h.mc.SetURL(h.cfg.Site, h.announcedURL())
	h.tables.refreshSoon() // the leader hears the URL at once
	h.log.Info("search head serving", "addr", ln.Addr().String(), "site", h.cfg.Site)
	return nil
}

// announcedURL is the URL this head names to the managers for the cluster
// page's link: URL(), with this machine's host name in place of an
// unspecified listen host (0.0.0.0, [::]), which no browser can open.
func (h *Head) announcedURL() string {
	host, port, err := net.SplitHostPort(h.Addr())
	if err != nil {
		return h.URL()
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if name, err := os.Hostname(); err == nil && name != "" {
			return h.cfg.TLS.Scheme() + "://" + net.JoinHostPort(name, port)
		}
	}
	return h.URL()
}

// mux routes the head's HTTP API: search, health, metrics, Splunk's
// search REST API, a clear answer to HEC sent here, and the search page.
func (h *Head) mux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/search", h.serveSearch)
	mux.HandleFunc("GET /healthz", h.serveHealthz)
	h.splunk.routes(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{}))
	// HEC sent here by mistake gets one clear line (it got a bare 405).
	notHEC := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_a_peer", fmt.Sprintf("%s is search head %s: HEC (%s) goes to a peer (indexer), which stores and replicates events", r.Host, h.cfg.ID, r.URL.Path))
	}
	for _, m := range []string{"POST", "GET"} {
		mux.HandleFunc(m+" /services/collector", notHEC)
		mux.HandleFunc(m+" /services/collector/", notHEC)
	}
	if h.Page != nil {
		mux.Handle("GET /", h.Page)
	}
	return mux
}

// Addr is the HTTP listen address (after Start).
func (h *Head) Addr() string {
	if h.ln == nil {
		return ""
	}
	return h.ln.Addr().String()
}

// URL is http://<addr>, or https://<addr> with a certificate.
func (h *Head) URL() string { return h.cfg.TLS.Scheme() + "://" + h.Addr() }
