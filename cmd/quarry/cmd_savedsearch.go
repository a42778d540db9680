package main

import (
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/manager"
)

// savedSearchCommand is `quarry savedsearch add|list|remove|run`: the
// cluster's saved searches, through the managers' admin API
// (manager/savedapi.go); the search heads run them (README "Saved
// searches and alerts"). Flags also come from QUARRY_SAVEDSEARCH_<FLAG>
// (so they do not collide with `quarry search`'s QUARRY_EARLIEST, …).
func savedSearchCommand() *cli.Command {
	return &cli.Command{
		Name:  "savedsearch",
		Usage: "add, list, remove and run saved searches (scheduled searches and alerts)",
		Subcommands: []*cli.Command{
			{
				Name:      "add",
				Usage:     "add a saved search: run on a cron schedule by exactly one search head per slot",
				ArgsUsage: "NAME --search Q --cron SPEC [--earliest E] [--latest L] [--publish NAME] [--alert-if 'count > N']",
				Flags: append(adminFlags(),
					&cli.StringFlag{Name: "search", Usage: "the query", EnvVars: envVars("savedsearch-search")},
					&cli.StringFlag{Name: "cron", Usage: "schedule: 5 cron fields, 6 with leading seconds, @hourly/@daily/…, or @every 10s (UTC)", EnvVars: envVars("savedsearch-cron")},
					&cli.StringFlag{Name: "earliest", Usage: "earliest time of each run (e.g. -5m), relative to the run", EnvVars: envVars("savedsearch-earliest")},
					&cli.StringFlag{Name: "latest", Usage: "latest time of each run (e.g. now)", EnvVars: envVars("savedsearch-latest")},
					&cli.StringFlag{Name: "publish", Usage: "publish the rows to quarry.results.NAME (default: the saved search's name)", EnvVars: envVars("savedsearch-publish")},
					&cli.StringFlag{Name: "alert-if", Usage: "alert condition on the number of result rows, `count OP N` (OP: > >= < <= == !=); publishes to quarry.alerts.NAME", EnvVars: envVars("savedsearch-alert-if")},
				),
				Action: adminAction(1, "the saved search's name", runSavedSearchAdd),
			},
			{
				Name:   "list",
				Usage:  "list the saved searches with their last and next runs",
				Flags:  adminFlags(),
				Action: adminAction(0, "no arguments", runSavedSearchList),
			},
			{
				Name:      "remove",
				Usage:     "remove a saved search (its records go with it)",
				ArgsUsage: "NAME",
				Flags:     adminFlags(),
				Action:    adminAction(1, "the saved search's name", runSavedSearchRemove),
			},
			{
				Name:      "run",
				Usage:     "run a saved search now, once (one search head picks it up)",
				ArgsUsage: "NAME",
				Flags:     adminFlags(),
				Action:    adminAction(1, "the saved search's name", runSavedSearchRun),
			},
		},
	}
}

func runSavedSearchAdd(c *cli.Context, cl *manager.Client, args []string, out string) error {
	req := manager.SavedSearchRequest{Name: args[0], Search: c.String("search"), Cron: c.String("cron"),
		Earliest: c.String("earliest"), Latest: c.String("latest"), Publish: c.String("publish"), AlertIf: c.String("alert-if")}
	if strings.TrimSpace(req.Search) == "" || strings.TrimSpace(req.Cron) == "" {
		return fmt.Errorf("savedsearch add %s: --search and --cron are required", req.Name)
	}
	ctx, cancel := callCtx(c)
	defer cancel()
	v, err := cl.AddSavedSearch(ctx, req)
	if err != nil {
		return fmt.Errorf("savedsearch add %s: %w", req.Name, err)
	}
	if out == "json" {
		return printJSONTo(c.App.Writer, map[string]any{"savedsearch": v})
	}
	fmt.Fprintf(c.App.Writer, "saved search %s added; next run %s\n", v.Name, orDash(v.NextRun))
	return nil
}

func runSavedSearchList(c *cli.Context, cl *manager.Client, _ []string, out string) error {
	ctx, cancel := callCtx(c)
	defer cancel()
	list, err := cl.SavedSearches(ctx)
	if err != nil {
		return fmt.Errorf("savedsearch list: %w", err)
	}
	if out == "json" {
		return printJSONTo(c.App.Writer, map[string]any{"savedsearches": list})
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tCRON\tLAST_SLOT\tSTATUS\tDURATION\tCOUNT\tHEAD\tNEXT_RUN\tSEARCH")
	for _, v := range list {
		slot, status, dur, count, head := "-", "-", "-", "-", "-"
		if r := v.LastRun; r != nil {
			slot = time.Unix(r.Slot, 0).UTC().Format(time.RFC3339)
			if r.Manual {
				slot += " (manual)"
			}
			status, count, head = r.Status, fmt.Sprint(r.Count), orDash(r.Head)
			dur = (time.Duration(r.DurationMS) * time.Millisecond).String()
			if r.Error != "" {
				status += ": " + r.Error
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Name, v.Cron, slot, status, dur, count, head, orDash(v.NextRun), v.Search)
	}
	return tw.Flush()
}

func runSavedSearchRemove(c *cli.Context, cl *manager.Client, args []string, out string) error {
	ctx, cancel := callCtx(c)
	defer cancel()
	if err := cl.RemoveSavedSearch(ctx, args[0]); err != nil {
		return fmt.Errorf("savedsearch remove %s: %w", args[0], err)
	}
	if out == "json" {
		return printJSONTo(c.App.Writer, map[string]any{"removed": args[0]})
	}
	fmt.Fprintf(c.App.Writer, "saved search %s removed\n", args[0])
	return nil
}

func runSavedSearchRun(c *cli.Context, cl *manager.Client, args []string, out string) error {
	ctx, cancel := callCtx(c)
	defer cancel()
	slot, err := cl.RunSavedSearch(ctx, args[0])
	if err != nil {
		return fmt.Errorf("savedsearch run %s: %w", args[0], err)
	}
	if out == "json" {
		return printJSONTo(c.App.Writer, map[string]any{"name": args[0], "slot": slot, "queued": true})
	}
	fmt.Fprintf(c.App.Writer, "saved search %s queued to run once (slot %s/manual-%d)\n", args[0], args[0], slot)
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
