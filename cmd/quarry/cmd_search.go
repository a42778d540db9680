package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quarry-dev/quarry/query"
	"github.com/urfave/cli/v2"
)

// searchCommand is `quarry search '<query>'` (SPEC §8): it posts the search
// to a peer's /v1/search (single-peer search) and prints the results as a
// table, JSON or raw events. Search heads (--searchhead) come with their
// own issue.
func searchCommand() *cli.Command {
	return &cli.Command{
		Name:      "search",
		Usage:     "run an SPL search on a peer (--peer) or a search head (--searchhead)",
		ArgsUsage: "'<query>'",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "peer", Usage: "a peer's HTTP URL: search every searchable copy on it", EnvVars: envVars("peer")},
			&cli.StringFlag{Name: "searchhead", Usage: "a search head's HTTP URL (not built yet)", EnvVars: envVars("searchhead")},
			&cli.StringFlag{Name: "earliest", Usage: "earliest time: -15m, -1h@h, now, RFC 3339", EnvVars: envVars("earliest")},
			&cli.StringFlag{Name: "latest", Usage: "latest time (exclusive)", EnvVars: envVars("latest")},
			&cli.StringFlag{Name: "preference", Usage: "copy preference (search head only)", EnvVars: envVars("preference")},
			&cli.StringFlag{Name: "site", Usage: "search affinity site (search head only)", EnvVars: envVars("site")},
			&cli.StringFlag{Name: "publish", Usage: "publish results to quarry.results.<name>", EnvVars: envVars("publish")},
			&cli.StringFlag{Name: "output", Value: "table", Usage: "table, json or raw", EnvVars: envVars("output")},
			&cli.DurationFlag{Name: "timeout", Value: 30 * time.Second, Usage: "give up after this long", EnvVars: envVars("timeout")},
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
	out := c.String("output")
	if out != "table" && out != "json" && out != "raw" {
		return fmt.Errorf("search: --output %q: want table, json or raw", out)
	}
	target := c.String("peer")
	if c.String("searchhead") != "" && target == "" {
		return errors.New("search: --searchhead is not built yet in this version of quarry; use --peer URL")
	}
	if target == "" {
		return errors.New("search: need --peer URL (or QUARRY_PEER)")
	}
	// Answer a syntax error here, before any network call.
	if _, err := query.Parse(q); err != nil {
		return fmt.Errorf("search: %w", err)
	}
	if !strings.Contains(target, "://") {
		target = "http://" + target
	}
	body, _ := json.Marshal(query.Request{Query: q, Earliest: c.String("earliest"), Latest: c.String("latest"),
		Preference: c.String("preference"), Publish: c.String("publish")})
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(target, "/")+"/v1/search", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("search: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("search %s: %w", target, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("search %s: read answer: %w", target, err)
	}
	if res.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
			Code  string `json:"code"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Error != "" {
			return fmt.Errorf("search: %s (%s, HTTP %d)", e.Error, e.Code, res.StatusCode)
		}
		return fmt.Errorf("search %s: HTTP %d: %s", target, res.StatusCode, strings.TrimSpace(string(raw)))
	}
	if out == "json" {
		var buf bytes.Buffer
		if err := json.Indent(&buf, raw, "", "  "); err != nil {
			return fmt.Errorf("search %s: bad answer: %w", target, err)
		}
		buf.WriteByte('\n')
		_, err := os.Stdout.Write(buf.Bytes())
		return err
	}
	var resp query.Response
	d := json.NewDecoder(bytes.NewReader(raw))
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
