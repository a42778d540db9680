// Command quarry is the single binary of the quarry indexer cluster: every
// server role (bus, manager, peer, search head, dev) and every admin and user
// command (cluster status, peers, buckets, search, ingest) is a subcommand.
// Flags follow SPEC §8; each flag can also be set from QUARRY_<FLAG>.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
)

func main() {
	app := &cli.App{
		Name:  "quarry",
		Usage: "a multisite indexer cluster for logs and events",
		Commands: []*cli.Command{
			busCommand(),
			managerCommand(),
			peerCommand(),
			clusterCommand(),
			peersCommand(),
			bucketsCommand(),
			maintenanceCommand(),
			rebalanceCommand(),
			searchCommand(),
			ingestCommand(),
			healthCommand(),
		},
		// Errors are printed once, as one clear line, by main.
		ExitErrHandler: func(*cli.Context, error) {},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "quarry: %v\n", err)
		os.Exit(1)
	}
}

// envVars returns the environment variable names of a flag: QUARRY_<FLAG>
// with dashes as underscores, upper case (SPEC §8).
func envVars(flag string) []string {
	b := []byte("QUARRY_" + flag)
	for i, c := range b {
		switch {
		case c == '-':
			b[i] = '_'
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		}
	}
	return []string{string(b)}
}

// repeatable is a flag value that appends one entry per occurrence without
// splitting on commas (a HEC token's index list has commas). From the
// environment, entries are separated by spaces or ';'.
type repeatable struct {
	values []string
}

func (r *repeatable) Set(v string) error {
	for _, e := range strings.FieldsFunc(v, func(c rune) bool { return c == ';' || c == ' ' || c == '\t' || c == '\n' }) {
		r.values = append(r.values, e)
	}
	return nil
}

func (r *repeatable) String() string { return strings.Join(r.values, ";") }
