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
	app := newApp()
	if err := app.Run(helpFirst(app, os.Args)); err != nil {
		fmt.Fprintf(os.Stderr, "quarry: %v\n", err)
		os.Exit(1)
	}
}

// newApp builds the command tree (tests run it in process).
func newApp() *cli.App {
	return &cli.App{
		Name:  "quarry",
		Usage: "a multisite indexer cluster for logs and events",
		Commands: []*cli.Command{
			busCommand(),
			managerCommand(),
			peerCommand(),
			searchheadCommand(),
			devCommand(),
			sampleCommand(),
			clusterCommand(),
			peersCommand(),
			bucketsCommand(),
			maintenanceCommand(),
			rebalanceCommand(),
			indexCommand(),
			tokenCommand(),
			savedSearchCommand(),
			searchCommand(),
			ingestCommand(),
			healthCommand(),
			tlsCommand(),
		},
		// Errors are printed once, as one clear line, by main.
		ExitErrHandler: func(*cli.Context, error) {},
	}
}

// helpFirst makes `--help` (or `-h`) anywhere on the line print help and
// run nothing (SPEC §8): urfave/cli v2 stops parsing flags at the first
// argument, so `quarry peer offline p2 --help` ran the command with p2 —
// it took p2 offline. The command path (the leading words that name
// commands) is kept and every other word dropped, so the result is
// `quarry peer offline --help`. Words after a `--` are arguments, never
// help.
func helpFirst(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	help := false
	for _, a := range args[1:] {
		if a == "--" {
			break
		}
		if a == "--help" || a == "-help" || a == "-h" {
			help = true
			break
		}
	}
	if !help {
		return args
	}
	out := []string{args[0]}
	cmds := app.Commands
	for _, a := range args[1:] {
		var next *cli.Command
		for _, c := range cmds {
			if c.HasName(a) {
				next = c
				break
			}
		}
		if next == nil {
			break
		}
		out = append(out, a)
		cmds = next.Subcommands
	}
	return append(out, "--help")
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

// roleTokenEnv is the environment of a client command's --token: the
// role's own variable first (QUARRY_ADMIN_TOKEN, QUARRY_SEARCH_TOKEN,
// QUARRY_HEC_TOKEN; SPEC §8), then QUARRY_TOKEN as a fallback — so one
// shell can hold all three tokens and each command takes its own.
func roleTokenEnv(role string) []string {
	return append(envVars(role+"-token"), envVars("token")...)
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

// trailingFlags returns the positional arguments, applying any flags given
// after them (`quarry peer offline p1 --enforce-counts`, `quarry search
// 'error' --output json`, `quarry ingest FILE --hec URL`), which
// urfave/cli v2 leaves unparsed. SPEC §8 writes flags after the arguments.
func trailingFlags(c *cli.Context) ([]string, error) {
	raw := c.Args().Slice()
	var args []string
	for i := 0; i < len(raw); i++ {
		a := raw[i]
		if !strings.HasPrefix(a, "-") || a == "-" {
			args = append(args, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var fl cli.Flag
		for _, f := range c.Command.Flags {
			for _, n := range f.Names() {
				if n == name {
					fl = f
				}
			}
		}
		if fl == nil {
			return nil, fmt.Errorf("%s: unknown flag %s", c.Command.FullName(), a)
		}
		if _, isBool := fl.(*cli.BoolFlag); isBool {
			if !hasVal {
				val = "true"
			}
		} else if !hasVal {
			if i+1 >= len(raw) {
				return nil, fmt.Errorf("%s: flag %s needs a value", c.Command.FullName(), a)
			}
			i++
			val = raw[i]
		}
		if err := c.Set(name, val); err != nil {
			return nil, fmt.Errorf("%s: flag %s: %w", c.Command.FullName(), a, err)
		}
	}
	return args, nil
}
