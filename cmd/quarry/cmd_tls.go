package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/internal/tlsconfig"
)

// TLS flags (SPEC §11, README "TLS"). Every server role takes the three;
// every client command takes --tls-ca. From the environment:
// QUARRY_TLS_CERT, QUARRY_TLS_KEY, QUARRY_TLS_CA.

func tlsCertFlag() cli.Flag {
	return &cli.StringFlag{Name: "tls-cert", Usage: "PEM certificate `FILE`: this process's servers speak TLS only (HTTPS; NATS and, between servers, mutual TLS)", EnvVars: envVars("tls-cert")}
}

func tlsKeyFlag() cli.Flag {
	return &cli.StringFlag{Name: "tls-key", Usage: "PEM private key `FILE` of --tls-cert", EnvVars: envVars("tls-key")}
}

func tlsCAFlag() cli.Flag {
	return &cli.StringFlag{Name: "tls-ca", Usage: "PEM `FILE` of the CA that signed the servers' certificates: servers are verified against it (default: the system roots); links between servers (Raft, NATS routes and gateways) need it", EnvVars: envVars("tls-ca")}
}

// tlsFiles reads the three TLS flags of a command.
func tlsFiles(c *cli.Context) tlsconfig.Files {
	return tlsconfig.Files{Cert: c.String("tls-cert"), Key: c.String("tls-key"), CA: c.String("tls-ca")}
}

// tlsClientConfig is the client side of --tls-ca (nil without it: Go's
// defaults, the system roots).
func tlsClientConfig(c *cli.Context) (*tls.Config, error) {
	return tlsconfig.Files{CA: c.String("tls-ca")}.Client()
}

// cliHTTPClient is the HTTP client of a client command: it verifies HTTPS
// servers against --tls-ca. An unreadable CA file makes every request fail
// with that error, so call sites stay one expression.
func cliHTTPClient(c *cli.Context, timeout time.Duration) *http.Client {
	tr, err := tlsconfig.Files{CA: c.String("tls-ca")}.Transport()
	if err != nil {
		return &http.Client{Transport: failingTransport{err}}
	}
	return &http.Client{Transport: tr, Timeout: timeout}
}

type failingTransport struct{ err error }

func (f failingTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }

// tlsCommand is `quarry tls gen`: a CA and one certificate signed by it,
// for the docker-compose demo and for trying TLS out.
func tlsCommand() *cli.Command {
	return &cli.Command{
		Name:  "tls",
		Usage: "TLS material for quarry's servers",
		Subcommands: []*cli.Command{{
			Name:  "gen",
			Usage: "write a new CA (ca.pem) and a certificate it signed for --hosts (cert.pem, key.pem) into --dir",
			Description: `Writes DIR/ca.pem, DIR/cert.pem and DIR/key.pem (ECDSA P-256, key readable by its
owner only). The certificate names every --hosts entry (DNS names and IP
addresses) and serves both as a server and as a client certificate, so one
certificate does for every process of a demo: pass --tls-cert DIR/cert.pem
--tls-key DIR/key.pem --tls-ca DIR/ca.pem to each. The CA's key is not kept.

When DIR already holds all three files they are kept (exit 0) unless
--force: a container that runs this at every start keeps the certificates
the running servers trust. A DIR holding only some of them is refused.
Production deployments give each process its own certificate from their
own CA.`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "dir", Required: true, Usage: "folder to write into (created)", EnvVars: envVars("tls-dir")},
				&cli.StringSliceFlag{Name: "hosts", Required: true, Usage: "DNS names and IP addresses the certificate names (comma-separated or repeated)", EnvVars: envVars("tls-hosts")},
				&cli.DurationFlag{Name: "valid-for", Value: tlsconfig.DefaultValidity, Usage: "validity of the CA and the certificate", EnvVars: envVars("tls-valid-for")},
				&cli.BoolFlag{Name: "force", Usage: "replace existing files"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() > 0 {
					return fmt.Errorf("tls gen: unexpected arguments %q", c.Args().Slice())
				}
				dir := c.String("dir")
				f, ok, err := tlsconfig.Existing(dir)
				if err != nil && !c.Bool("force") {
					return fmt.Errorf("tls gen: %w (--force replaces them)", err)
				}
				if ok && !c.Bool("force") {
					fmt.Fprintf(os.Stderr, "tls gen: %s already holds %s, %s and %s: kept\n", dir, tlsconfig.CAFile, tlsconfig.CertFile, tlsconfig.KeyFile)
					return nil
				}
				var hosts []string
				for _, h := range c.StringSlice("hosts") {
					hosts = append(hosts, strings.Split(h, ",")...)
				}
				if f, err = tlsconfig.Generate(dir, hosts, c.Duration("valid-for")); err != nil {
					return err
				}
				fmt.Fprintf(os.Stderr, "tls gen: wrote %s, %s and %s\n", f.CA, f.Cert, f.Key)
				return nil
			},
		}},
	}
}
