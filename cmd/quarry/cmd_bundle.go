package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/knowledge"
	"github.com/quarry-dev/quarry/manager"
)

// bundleCommand is `quarry cluster bundle apply DIR|status` (SPEC §8): the
// configuration bundle — index-time props.conf/transforms.conf — that the
// managers push to every peer.
func bundleCommand() *cli.Command {
	return &cli.Command{
		Name:  "bundle",
		Usage: "the configuration bundle (index-time props.conf, transforms.conf) every peer applies",
		Subcommands: []*cli.Command{{
			Name:      "apply",
			Usage:     "check DIR's props.conf and transforms.conf and put them in force on every peer",
			ArgsUsage: "DIR",
			Flags:     adminFlags(),
			Action: adminAction(1, "one folder: quarry cluster bundle apply DIR", func(c *cli.Context, cl *manager.Client, args []string, out string) error {
				files, err := knowledge.LoadDir(args[0])
				if err != nil {
					return fmt.Errorf("cluster bundle apply: %w", err)
				}
				ctx, cancel := callCtx(c)
				defer cancel()
				st, err := cl.ApplyBundle(ctx, files.Text())
				if err != nil {
					return fmt.Errorf("cluster bundle apply: %w", err)
				}
				if out == "json" {
					return printJSON(st)
				}
				if st.Unchanged {
					fmt.Fprintf(os.Stdout, "bundle %s is already in force\n", st.Hash)
				} else {
					fmt.Fprintf(os.Stdout, "bundle %s in force; peers take it within seconds (quarry cluster bundle status)\n", st.Hash)
				}
				return nil
			}),
		}, {
			Name:  "status",
			Usage: "the bundle in force and the one each peer runs",
			Flags: adminFlags(),
			Action: adminAction(0, "no arguments", func(c *cli.Context, cl *manager.Client, _ []string, out string) error {
				ctx, cancel := callCtx(c)
				defer cancel()
				st, err := cl.Bundle(ctx)
				if err != nil {
					return fmt.Errorf("cluster bundle status: %w", err)
				}
				if out == "json" {
					return printJSON(st)
				}
				return printBundleStatus(os.Stdout, st)
			}),
		}},
	}
}

// printBundleStatus prints `cluster bundle status` for people.
func printBundleStatus(w io.Writer, st manager.BundleStatus) error {
	hash := st.Hash
	if hash == "" {
		hash = "(none: built-in sourcetypes only)"
	}
	fmt.Fprintf(w, "bundle\t%s\nin sync\t%s\n\n", hash, yesNo(st.InSync))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tSITE\tSTATE\tBUNDLE\tSINCE\tHEARD")
	for _, p := range st.Peers {
		b, since, heard := p.Bundle, "-", "-"
		if b == "" {
			b = "(none)"
		}
		if !p.Since.IsZero() {
			since = p.Since.Format(time.RFC3339)
		}
		if !p.HeardAt.IsZero() {
			heard = p.HeardAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.Site, p.State, b, since, heard)
	}
	return tw.Flush()
}
