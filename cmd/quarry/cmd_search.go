package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/query"
	"github.com/quarry-dev/quarry/searchhead"
	"github.com/urfave/cli/v2"
)

// searchCommand is `quarry search '<query>'` (SPEC §8): it posts the search
// to a search head's /v1/search (--searchhead, the cluster) or a peer's
// (--peer, single-peer search) and prints the results as a table, JSON or
// raw events. Through a search head, an event search streams
// (?stream=true): rows print as the head releases them.
func searchCommand() *cli.Command {
	return &cli.Command{
		Name:      "search",
		Usage:     "run an SPL search on a peer (--peer) or a search head (--searchhead)",
		ArgsUsage: "'<query>'",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "peer", Usage: "a peer's HTTP URL: search every searchable copy on it", EnvVars: envVars("peer")},
			&cli.StringFlag{Name: "searchhead", Usage: "a search head's HTTP URL: search the cluster", EnvVars: envVars("searchhead")},
			&cli.StringFlag{Name: "token", Usage: "search token (Authorization: Bearer)", EnvVars: roleTokenEnv("search")},
			secretFileFlag("token", "the search token"),
			&cli.BoolFlag{Name: "fresh", Usage: "read hot buckets from their origin (search head only)", EnvVars: envVars("fresh")},
			&cli.StringFlag{Name: "earliest", Usage: "earliest time: -15m, -1h@h, now, RFC 3339", EnvVars: envVars("earliest")},
			&cli.StringFlag{Name: "latest", Usage: "latest time (exclusive)", EnvVars: envVars("latest")},
			&cli.StringFlag{Name: "preference", Usage: "copy preference (search head only)", EnvVars: envVars("preference")},
			&cli.StringFlag{Name: "site", Usage: "the search affinity site expected of the search head: refused when the head serves another (search head only)", EnvVars: envVars("site")},
			&cli.StringFlag{Name: "publish", Usage: "publish results to quarry.results.<name>", EnvVars: envVars("publish")},
			&cli.StringFlag{Name: "output", Value: "table", Usage: "table, json or raw", EnvVars: envVars("output")},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up after this long", EnvVars: envVars("timeout")},
			tlsCAFlag(),
		},
		Action: runSearch,
	}
}

func runSearch(c *cli.Context) error {
	args, err := trailingFlags(c)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return fmt.Errorf("search: want exactly one query argument (quote it), got %d", len(args))
	}
	q := args[0]
	token, err := secretValue(c, "token")
	if err != nil {
		return fmt.Errorf("search: %w", err)
	}
	out := c.String("output")
	if out != "table" && out != "json" && out != "raw" {
		return fmt.Errorf("search: --output %q: want table, json or raw", out)
	}
	target := c.String("peer")
	if sh := c.String("searchhead"); sh != "" && target == "" {
		return searchHead(c, q, sh, out, token)
	}
	if target == "" {
		return errors.New("search: need --searchhead URL (or QUARRY_SEARCHHEAD), or --peer URL for one peer")
	}
	if c.String("site") != "" || c.String("preference") != "" || c.Bool("fresh") {
		return errors.New("search: --site, --preference and --fresh need --searchhead (a peer searches all its copies)")
	}
	// Answer a syntax error here, before any network call.
	if _, err := query.Parse(q); err != nil {
		return fmt.Errorf("search: %w", err)
	}
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	base := strings.TrimRight(target, "/")
	// A URL that does not parse is the flag's fault: said as such.
	if _, err := url.Parse(base + "/v1/search"); err != nil {
		return fmt.Errorf("search: %w", err)
	}
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	sc := searchhead.Client{URL: base, Token: token, HTTP: cliHTTPClient(c, 0), Role: api.RolePeer}
	a, err := sc.Post(ctx, query.Request{Query: q, Earliest: c.String("earliest"), Latest: c.String("latest"),
		Preference: c.String("preference"), Publish: c.String("publish")})
	if err != nil {
		return searchFailed(target, err)
	}
	if a.Status != http.StatusOK {
		return searchRefused(target, a)
	}
	if out == "json" {
		var buf bytes.Buffer
		if err := json.Indent(&buf, a.Body, "", "  "); err != nil {
			return fmt.Errorf("search %s: bad answer: %w", target, err)
		}
		buf.WriteByte('\n')
		_, err := os.Stdout.Write(buf.Bytes())
		return err
	}
	var resp query.Response
	d := json.NewDecoder(bytes.NewReader(a.Body))
	d.UseNumber()
	if err := d.Decode(&resp); err != nil {
		return fmt.Errorf("search %s: bad answer: %w", target, err)
	}
	printResults(os.Stdout, &resp, out)
	s := resp.Summary
	fmt.Fprintf(os.Stderr, "%d results; buckets: %d total, %d successful, %d skipped, %d failed; %.1f ms\n",
		len(resp.Results), s.Buckets.Total, s.Buckets.Successful, s.Buckets.Skipped, s.Buckets.Failed, s.TookMS)
	if s.Partial {
		for _, f := range s.Buckets.Failures {
			fmt.Fprintf(os.Stderr, "partial: bucket %s on %s: %s\n", f.Bucket, f.Peer, f.Reason)
		}
	}
	return nil
}

func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []any:
		var parts []string
		for _, e := range x {
			parts = append(parts, cell(e))
		}
		return strings.Join(parts, ",")
	}
	return fmt.Sprint(v)
}

func printResults(w io.Writer, resp *query.Response, mode string) {
	cols := resp.Fields
	isEvents := false
	for _, c := range cols {
		if c == "_raw" {
			isEvents = true
		}
	}
	if mode == "raw" {
		for _, r := range resp.Results {
			if raw, ok := r["_raw"].(string); ok {
				fmt.Fprintln(w, raw)
				continue
			}
			var parts []string
			for _, c := range cols {
				parts = append(parts, cell(r[c]))
			}
			fmt.Fprintln(w, strings.Join(parts, "\t"))
		}
		return
	}
	if isEvents {
		cols = []string{"_time", "host", "sourcetype", "_raw"}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	for _, r := range resp.Results {
		parts := make([]string, len(cols))
		for i, c := range cols {
			parts[i] = strings.ReplaceAll(cell(r[c]), "\t", " ")
		}
		fmt.Fprintln(tw, strings.Join(parts, "\t"))
	}
	tw.Flush()
}

// searchHead runs a search through a search head with ?stream=true and
// prints rows as they arrive (an event search's rows come bucket by
// bucket; a transforming search's at the end).
func searchHead(c *cli.Context, q, target, out, token string) error {
	plan, err := query.Compile(query.Request{Query: q, Earliest: c.String("earliest"), Latest: c.String("latest")})
	if err != nil {
		return fmt.Errorf("search: %w", err)
	}
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	target = strings.TrimRight(target, "/")
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	sc := searchhead.Client{URL: target, Token: token, HTTP: cliHTTPClient(c, 0), Role: api.RoleSearchHead}
	if site := c.String("site"); site != "" {
		got, err := sc.Site(ctx)
		if err != nil {
			return fmt.Errorf("search %s: %w", target, err)
		}
		if got != site {
			return fmt.Errorf("search: the search head at %s serves site %q, not %q (--site): use that site's search head", target, got, site)
		}
	}
	req := map[string]any{"query": q, "earliest": c.String("earliest"), "latest": c.String("latest"),
		"preference": c.String("preference"), "publish": c.String("publish"), "fresh": c.Bool("fresh")}
	// An event search streams (rows print as buckets finish); a
	// transforming search's table comes whole, with its columns.
	if !plan.Streamable() {
		a, err := sc.Search(ctx, req)
		if err != nil {
			return searchFailed(target, err)
		}
		if a.Status != http.StatusOK {
			return searchRefused(target, a)
		}
		if out == "json" {
			for _, r := range a.Resp.Results {
				var line bytes.Buffer
				_ = query.AppendRowJSON(&line, r, a.Resp.Fields)
				os.Stdout.Write(line.Bytes())
			}
		} else {
			printResults(os.Stdout, &a.Resp, out)
		}
		return searchSummary(&a.Resp.Summary)
	}
	var rows []map[string]any
	isEvent := func(r map[string]any) bool { _, ok := r["_raw"]; return ok }
	a, err := sc.Stream(ctx, req, func(line map[string]any) {
		switch {
		case out == "json":
			b, _ := json.Marshal(line)
			fmt.Println(string(b))
		case isEvent(line) && out == "raw":
			fmt.Println(cell(line["_raw"]))
		case isEvent(line):
			fmt.Printf("%s\t%s\t%s\t%s\n", cell(line["_time"]), cell(line["host"]), cell(line["sourcetype"]), strings.ReplaceAll(cell(line["_raw"]), "\t", " "))
		default:
			rows = append(rows, line)
		}
	})
	if err != nil {
		return searchFailed(target, err)
	}
	if a.Status != http.StatusOK {
		return searchRefused(target, a)
	}
	if len(rows) > 0 {
		printResults(os.Stdout, &query.Response{Results: rows, Fields: a.Resp.Fields}, out)
	}
	return searchSummary(&a.Resp.Summary)
}

// searchSummary prints a search head's summary line and warnings, and
// fails on a partial result.
func searchSummary(s *query.Summary) error {
	fmt.Fprintf(os.Stderr, "generation %d, site %s, peers %s; buckets: %d total, %d successful, %d skipped, %d failed, %d missing; %.1f ms\n",
		s.Generation, s.Site, strings.Join(s.Peers, ","), s.Buckets.Total, s.Buckets.Successful, s.Buckets.Skipped, s.Buckets.Failed, s.Buckets.Missing, s.TookMS)
	for _, w := range s.Warnings {
		fmt.Fprintf(os.Stderr, "warning: %s\n", w)
	}
	if s.Partial {
		return fmt.Errorf("search: partial results (%d failed, %d missing buckets)", s.Buckets.Failed, s.Buckets.Missing)
	}
	return nil
}

// searchFailed says why a search got no answer: the process at target
// has another role than the flag naming it promised (api.RoleHeader) — a
// peer's /v1/search searches only that peer's copies, so a peer given as
// --searchhead would answer part of the data as if it were all of it —,
// the search head's answer broke off with an error, or the transport or
// the answer failed.
func searchFailed(target string, err error) error {
	var re *searchhead.RoleError
	var se *searchhead.StreamError
	switch {
	case errors.As(err, &re) && re.Want == api.RoleSearchHead:
		return fmt.Errorf("search: %s is a %s, not a search head: its /v1/search searches only its own copies, not the cluster; give a search head's URL to --searchhead, or use --peer %s to search that one peer", target, re.Got, target)
	case errors.As(err, &re):
		return fmt.Errorf("search: %s is a %s, not a peer: use --searchhead %s to search the cluster through it", target, re.Got, target)
	case errors.As(err, &se):
		return fmt.Errorf("search: %s", se.Msg)
	}
	return fmt.Errorf("search %s: %w", target, err)
}

// searchRefused says why a search was refused: the answer's error and
// code, or its body when it carried none.
func searchRefused(target string, a searchhead.Answer) error {
	if !a.RawError {
		return fmt.Errorf("search: %s (%s, HTTP %d)", a.Error, a.Code, a.Status)
	}
	return fmt.Errorf("search %s: HTTP %d: %s", target, a.Status, strings.TrimSpace(a.Error))
}
