// Package localonly guards what a node serves without a token because it
// listens on loopback only (a standalone peer or a search head with no
// token configured, `quarry dev`): such a request must also *come* from
// this machine's own clients, not from a web page the operator's browser
// happens to show. The security review's M7: without this, a page could
// rebind its own name to 127.0.0.1 (DNS rebinding) and read every event,
// or fire cross-origin POSTs at the fixed dev ports.
//
// Check accepts a request only when its Host names a loopback address or
// localhost, and its Origin — sent by every browser on a cross-origin or
// non-GET request — is absent or a loopback origin too. Command-line and
// program clients (curl, the CLI, SDKs) send the loopback Host they
// dialled and no Origin, so nothing changes for them; quarry's own pages,
// served from the node, carry its loopback origin.
package localonly

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// Check reports why a token-less request may not be served (nil: it may).
func Check(r *http.Request) error {
	if !loopbackHost(r.Host) {
		return fmt.Errorf("served without a token on loopback only: Host %q is not a loopback address or localhost", r.Host)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !loopbackHost(u.Host) {
			return fmt.Errorf("served without a token on loopback only: a request from origin %q (a web page) is refused", o)
		}
	}
	return nil
}

// loopbackHost reports whether a host[:port] is localhost or a loopback IP.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
