package main

import (
	"errors"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/manager"
)

// indexCommand is `quarry index add|list|remove`: the cluster's declared
// indexes and their retention, through the managers' admin API
// (manager/adminapi.go). Changes reach running peers within a heartbeat.
func indexCommand() *cli.Command {
	return &cli.Command{
		Name:  "index",
		Usage: "declare, list and remove indexes (with retention)",
		Subcommands: []*cli.Command{
			{
				Name:      "list",
				Usage:     "list the indexes: declared ones with their retention, and those known only from buckets",
				Flags:     adminFlags(),
				Action:    adminAction(0, "no arguments", runIndexList),
				ArgsUsage: " ",
			},
			{
				Name:      "add",
				Usage:     "declare an index",
				ArgsUsage: "<name> [--frozen-time-period 90d] [--max-total-bytes 500GB] [--max-data-size 750MB]",
				Flags: append(adminFlags(),
					&cli.StringFlag{Name: "frozen-time-period", Usage: "freeze (delete) buckets whose newest event is older than this: 90d, 2w, 720h or seconds; 0 = never", EnvVars: envVars("frozen-time-period")},
					&cli.StringFlag{Name: "max-total-bytes", Usage: "freeze the oldest buckets while the index holds more than this: bytes or KB/MB/GB/TB (powers of 1024); 0 = no limit", EnvVars: envVars("max-total-bytes")},
					&cli.StringFlag{Name: "max-data-size", Usage: "roll a hot bucket of the index at this size (Splunk's maxDataSize): bytes or KB/MB/GB/TB; 0 = the peers' own limit", EnvVars: envVars("max-data-size")},
				),
				Action: adminAction(1, "one index name", runIndexAdd),
			},
			{
				Name:      "remove",
				Usage:     "stop declaring an index: HEC refuses its events; its buckets stay until retention",
				ArgsUsage: "<name>",
				Flags:     adminFlags(),
				Action:    adminAction(1, "one index name", runIndexRemove),
			},
		},
	}
}

func runIndexList(c *cli.Context, cl *manager.Client, _ []string, out string) error {
	ctx, cancel := callCtx(c)
	defer cancel()
	list, err := cl.Indexes(ctx)
	if err != nil {
		return fmt.Errorf("index list: %w", err)
	}
	if out == "json" {
		return printJSONTo(c.App.Writer, map[string]any{"indexes": list})
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tDECLARED\tFROZEN_TIME_PERIOD\tMAX_TOTAL_BYTES\tMAX_DATA_SIZE")
	orDash := func(n int64) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprint(n)
	}
	for _, ix := range list {
		period := ix.FrozenTimePeriod
		if period == "" {
			period = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", ix.Name, yesNo(ix.Declared), period, orDash(ix.MaxTotalBytes), orDash(ix.MaxDataSize))
	}
	return tw.Flush()
}

func runIndexAdd(c *cli.Context, cl *manager.Client, args []string, out string) error {
	name := args[0]
	if _, err := manager.ParseRetentionPeriod(c.String("frozen-time-period")); err != nil {
		return fmt.Errorf("index add %s: --frozen-time-period: %w", name, err)
	}
	size, err := manager.ParseByteSize(c.String("max-total-bytes"))
	if err != nil {
		return fmt.Errorf("index add %s: --max-total-bytes: %w", name, err)
	}
	dataSize, err := manager.ParseByteSize(c.String("max-data-size"))
	if err != nil {
		return fmt.Errorf("index add %s: --max-data-size: %w", name, err)
	}
	ctx, cancel := callCtx(c)
	defer cancel()
	v, err := cl.AddIndex(ctx, manager.IndexRequest{Name: name, FrozenTimePeriod: c.String("frozen-time-period"), MaxTotalBytes: size, MaxDataSize: dataSize})
	if err != nil {
		return fmt.Errorf("index add %s: %w", name, err)
	}
	if out == "json" {
		return printJSONTo(c.App.Writer, map[string]any{"index": v})
	}
	fmt.Fprintf(c.App.Writer, "index %s added\n", v.Name)
	return nil
}

func runIndexRemove(c *cli.Context, cl *manager.Client, args []string, out string) error {
	name := args[0]
	ctx, cancel := callCtx(c)
	defer cancel()
	if err := cl.RemoveIndex(ctx, name); err != nil {
		var ae *manager.APIError
		if errors.As(err, &ae) && ae.Code == "unknown_index" {
			return fmt.Errorf("index remove %s: no such declared index", name)
		}
		return fmt.Errorf("index remove %s: %w", name, err)
	}
	if out == "json" {
		return printJSONTo(c.App.Writer, map[string]any{"removed": name})
	}
	fmt.Fprintf(c.App.Writer, "index %s removed: HEC refuses its events; its buckets stay until retention\n", name)
	return nil
}
