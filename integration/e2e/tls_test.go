//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/quarry-dev/quarry/internal/tlsconfig"
)

// trustDemoCA copies the CA of the demo's certificates out of the certs
// volume (the one-shot service certs wrote it with `quarry tls gen`) and
// makes every HTTP client of the suite verify the servers against it: the
// suite's clients all use http.DefaultTransport, whose TLS config is set
// here once, before any scenario runs.
func trustDemoCA(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "quarry-e2e-ca-")
	if err != nil {
		return err
	}
	ca := filepath.Join(dir, tlsconfig.CAFile)
	if _, err := docker(ctx, "cp", container("certs")+":/certs/"+tlsconfig.CAFile, ca); err != nil {
		return fmt.Errorf("copy the demo's CA: %w", err)
	}
	cfg, err := tlsconfig.Files{CA: ca}.Client()
	if err != nil {
		return err
	}
	http.DefaultTransport.(*http.Transport).TLSClientConfig = cfg
	return nil
}
