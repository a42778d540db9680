package peer

import (
	"fmt"
	"net/http"

	"github.com/quarry-dev/quarry/internal/tlsconfig"
)

// verifyManagers makes the HTTP control plane's client verify the
// managers' HTTPS against the CA of files (Go's defaults without one).
// The peer's own HTTPS is Config.TLS's certificate, on the listener
// (Start); the bus connection trusts the same CA (joinCluster).
func verifyManagers(c *http.Client, files tlsconfig.Files) error {
	tr, err := files.Transport()
	if err != nil {
		return fmt.Errorf("peer: %w", err)
	}
	c.Transport = tr
	return nil
}
