package main

import (
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/sampledata"
)

// sampleCommand is `quarry sample` (an addition to SPEC §8): writes sample
// events of the bench event model as HEC envelopes to stdout (for `quarry
// ingest`), and their exact counts to stderr.
func sampleCommand() *cli.Command {
	return &cli.Command{
		Name:  "sample",
		Usage: "write sample events (HEC envelopes, bench event model) to stdout; their counts to stderr",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "events", Value: 20000, Usage: "how many events", EnvVars: envVars("events")},
			&cli.StringFlag{Name: "index", Value: "sample", Usage: "the events' index", EnvVars: envVars("index")},
			&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "generator seed", EnvVars: envVars("seed")},
			&cli.StringFlag{Name: "base", Usage: "start of the 24 h the events span, RFC 3339 (default: the hour 24 h ago)", EnvVars: envVars("base")},
		},
		Action: func(c *cli.Context) error {
			base := time.Now().UTC().Add(-24 * time.Hour).Truncate(time.Hour)
			if s := c.String("base"); s != "" {
				t, err := time.Parse(time.RFC3339, s)
				if err != nil {
					return fmt.Errorf("sample: --base %q: %w", s, err)
				}
				base = t
			}
			n, err := sampledata.Write(c.App.Writer, c.Int("events"), c.Uint64("seed"), base, c.String("index"))
			if err != nil {
				return fmt.Errorf("sample: %w", err)
			}
			fmt.Fprintf(os.Stderr, "events=%d status_5xx=%d errors=%d rare=%d index=%s base=%s\n",
				n.Events, n.Status5xx, n.Errors, n.Rare, c.String("index"), base.Format(time.RFC3339))
			return nil
		},
	}
}
