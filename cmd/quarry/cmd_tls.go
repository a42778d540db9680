package main

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/internal/tlsconfig"
)

// TLS flags (SPEC §11, README "TLS"). Every server role takes the three;
// every client command takes --tls-ca. From the environment:
// QUARRY_TLS_CERT, QUARRY_TLS_KEY, QUARRY_TLS_CA.

func tlsCertFlag() cli.Flag {
	return &cli.StringFlag{Name: "tls-cert", Usage: "PEM certificate `FILE`: this process's servers speak TLS only (HTTPS; NATS and, between servers, mutual TLS); it names the process's role (OU quarry-manager, quarry-bus, …: quarry tls gen)", EnvVars: envVars("tls-cert")}
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

// tlsCommand is `quarry tls gen`: a CA and one certificate per role
// signed by it, for the docker-compose demo and for trying TLS out.
func tlsCommand() *cli.Command {
	return &cli.Command{
		Name:  "tls",
		Usage: "TLS material for quarry's servers",
		Subcommands: []*cli.Command{{
			Name:  "gen",
			Usage: "write a new CA (ca.pem) and, per role, a certificate it signed for --hosts (ROLE/cert.pem, ROLE/key.pem) into --dir; with --process, one per process (process/NAME/)",
			Description: `Writes DIR/ca.pem and, for each role of --roles (default: all four), a
certificate that carries that role and no other: DIR/manager/, DIR/bus/,
DIR/peer/ and DIR/searchhead/, each holding cert.pem and key.pem (ECDSA
P-256, key readable by its owner only). A certificate names its role in its
Subject's OrganizationalUnit (OU=quarry-manager, quarry-bus, quarry-peer,
quarry-searchhead), and the links between servers check it: the managers'
Raft transport accepts a manager certificate only, NATS routes and gateways
a bus or manager one. Every certificate names every --hosts entry (DNS names
and IP addresses) and serves both as a server and as a client certificate.

Give each process its role's files: a manager --tls-cert DIR/manager/cert.pem
--tls-key DIR/manager/key.pem, a NATS node (quarry bus) DIR/bus/, a peer
DIR/peer/, a search head DIR/searchhead/; all of them, and every client
command, --tls-ca DIR/ca.pem. The CA's key is not kept: no certificate can
be added later.

When DIR already holds ca.pem and every asked-for role's files they are
kept (exit 0) unless --force: a container that runs this at every start
keeps the certificates the running servers trust. A DIR holding only some
of them, or the single cert.pem and key.pem an older quarry wrote, is
refused; --force replaces everything (a new CA; other roles' certificates
and an older cert.pem and key.pem, signed by the CA it replaces, are
removed). Production deployments issue each process its own certificate
from their own CA, with the role's OU.

--process NAME:ROLE (repeated or comma-separated) issues a certificate of
that one process instead: DIR/process/NAME/cert.pem and key.pem, its
CommonName NAME, its one OU the role's, naming every --hosts entry and NAME
itself. No two processes then share a key (review M6): the docker-compose
demo gives each service its own. With --process, role certificates are
written only for the roles --roles names.`,
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "dir", Required: true, Usage: "folder to write into (created)", EnvVars: envVars("tls-dir")},
				&cli.StringSliceFlag{Name: "hosts", Required: true, Usage: "DNS names and IP addresses the certificates name (comma-separated or repeated)", EnvVars: envVars("tls-hosts")},
				&cli.StringSliceFlag{Name: "roles", Usage: "roles to issue a certificate for, of " + strings.Join(tlsconfig.AllRoles, ", ") + " (comma-separated or repeated; default all)", EnvVars: envVars("tls-roles")},
				&cli.StringSliceFlag{Name: "process", Usage: "`NAME:ROLE` of a process to issue its own certificate for, in DIR/process/NAME/ (comma-separated or repeated); with it, --roles defaults to none", EnvVars: envVars("tls-process")},
				&cli.DurationFlag{Name: "valid-for", Value: tlsconfig.DefaultValidity, Usage: "validity of the CA and the certificates", EnvVars: envVars("tls-valid-for")},
				&cli.BoolFlag{Name: "force", Usage: "replace existing files"},
			},
			Action: tlsGen,
		}},
	}
}

func tlsGen(c *cli.Context) error {
	if c.NArg() > 0 {
		return fmt.Errorf("tls gen: unexpected arguments %q", c.Args().Slice())
	}
	dir := c.String("dir")
	roles, procs, err := tlsGenSubjects(c)
	if err != nil {
		return err
	}
	files, ok, err := tlsconfig.ExistingFor(dir, roles, procs)
	if err != nil && !c.Bool("force") {
		return fmt.Errorf("tls gen: %w (--force replaces them)", err)
	}
	if ok && !c.Bool("force") {
		fmt.Fprintf(os.Stderr, "tls gen: %s already holds %s and the certificates of %s: kept\n", dir, tlsconfig.CAFile, strings.Join(sortedSubjects(files, procs), ", "))
		return nil
	}
	if files, err = tlsconfig.GenerateFor(dir, splitList(c.StringSlice("hosts")), c.Duration("valid-for"), roles, procs); err != nil {
		return err
	}
	for _, r := range sortedSubjects(files, procs) {
		fmt.Fprintf(os.Stderr, "tls gen: %s certificate %s, key %s\n", r, files[r].Cert, files[r].Key)
	}
	fmt.Fprintf(os.Stderr, "tls gen: CA %s (give it to every process as --tls-ca)\n", filepath.Join(dir, tlsconfig.CAFile))
	return nil
}

// splitList splits comma-separated entries of a repeated flag.
func splitList(values []string) []string {
	var out []string
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// tlsGenSubjects reads --roles and --process: every role when neither is
// given, only the roles --roles names when --process is.
func tlsGenSubjects(c *cli.Context) ([]string, []tlsconfig.Process, error) {
	var procs []tlsconfig.Process
	for _, s := range splitList(c.StringSlice("process")) {
		p, err := tlsconfig.ParseProcess(s)
		if err != nil {
			return nil, nil, err
		}
		procs = append(procs, p)
	}
	named := splitList(c.StringSlice("roles"))
	if len(procs) > 0 && len(named) == 0 {
		return nil, procs, nil
	}
	roles, err := tlsconfig.PickRoles(named)
	return roles, procs, err
}

// sortedSubjects lists files' keys: roles in tlsconfig.AllRoles order,
// then the processes in the order given.
func sortedSubjects(files map[string]tlsconfig.Files, procs []tlsconfig.Process) []string {
	var out []string
	for _, r := range tlsconfig.AllRoles {
		if _, ok := files[r]; ok {
			out = append(out, r)
		}
	}
	for _, p := range procs {
		out = append(out, tlsconfig.ProcessKey(p.Name))
	}
	return out
}
