package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/manager"
)

// Detention (SPEC §3; fsm/detention.go): the managers' free-disk rule is
// set by two manager flags, and an operator detains a peer by hand.

func detentionFreeBytesFlag() cli.Flag {
	return &cli.Int64Flag{Name: "detention-free-bytes", Value: manager.DefaultDetentionFreeBytes,
		Usage:   "a peer whose data directory has less free space than this many bytes enters detention (no new data, still searchable); default 5000 MiB, Splunk's minFreeSpace; negative: never automatically",
		EnvVars: envVars("detention-free-bytes")}
}

func detentionHysteresisBytesFlag() cli.Flag {
	return &cli.Int64Flag{Name: "detention-hysteresis-bytes", Value: manager.DefaultDetentionHysteresisBytes,
		Usage:   "a peer in automatic detention leaves it once it has --detention-free-bytes plus this many bytes free (default 500 MiB)",
		EnvVars: envVars("detention-hysteresis-bytes")}
}

// peerDetentionCommand is `quarry peer detention <id> on|off`.
func peerDetentionCommand() *cli.Command {
	return &cli.Command{
		Name:      "detention",
		Usage:     "put a peer in manual detention (it takes no new data and no replication, keeps serving searches) or take it out of any detention",
		ArgsUsage: "<id> on|off",
		Flags:     adminFlags(),
		Action: adminAction(2, "a peer id and on or off", func(c *cli.Context, cl *manager.Client, args []string, out string) error {
			id := args[0]
			var on bool
			switch args[1] {
			case "on":
				on = true
			case "off":
			default:
				return fmt.Errorf("peer detention %s %q: want on or off", id, args[1])
			}
			ctx, cancel := callCtx(c)
			defer cancel()
			if err := cl.SetDetention(ctx, id, on); err != nil {
				var ae *manager.APIError
				if errors.As(err, &ae) && ae.Code == "unknown_peer" {
					return fmt.Errorf("peer detention %s: no such peer", id)
				}
				return fmt.Errorf("peer detention %s: %w", id, err)
			}
			if out == "json" {
				return printJSON(map[string]any{"peer": id, "detention": on})
			}
			if on {
				fmt.Printf("peer %s in manual detention: no new data or replication; it keeps serving searches (only `quarry peer detention %s off` lifts it)\n", id, id)
			} else {
				fmt.Printf("peer %s out of detention (it goes back if its disk is still short)\n", id)
			}
			return nil
		}),
	}
}
