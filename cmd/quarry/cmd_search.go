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

	"github.com/quarry-dev/quarry/api"
	"github.com/quarry-dev/quarry/query"
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
	body, _ := json.Marshal(query.Request{Query: q, Earliest: c.String("earliest"), Latest: c.String("latest"),
		Preference: c.String("preference"), Publish: c.String("publish")})
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(target, "/")+"/v1/search", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("search: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if t := token; t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	res, err := cliHTTPClient(c, 0).Do(req)
	if err != nil {
		return fmt.Errorf("search %s: %w", target, err)
	}
	defer res.Body.Close()
	if err := answeredBy(res, api.RolePeer, target); err != nil {
		return err
	}
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
	h := &headClient{c: c, target: target, token: token}
	if site := c.String("site"); site != "" {
		if err := h.checkSite(ctx, site); err != nil {
			return err
		}
	}
	body, _ := json.Marshal(map[string]any{"query": q, "earliest": c.String("earliest"), "latest": c.String("latest"),
		"preference": c.String("preference"), "publish": c.String("publish"), "fresh": c.Bool("fresh")})
	// An event search streams (rows print as buckets finish); a
	// transforming search's table comes whole, with its columns.
	path := "/v1/search"
	if plan.Streamable() {
		path += "?stream=true"
	}
	res, err := h.do(ctx, http.MethodPost, path, body)
	if err != nil {
		return fmt.Errorf("search %s: %w", target, err)
	}
	defer res.Body.Close()
	if err := answeredBy(res, api.RoleSearchHead, target); err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return headRefusal(res, target)
	}
	if !plan.Streamable() {
		return printHeadTable(res.Body, target, out)
	}
	return printHeadStream(res.Body, target, out)
}

// headClient sends the requests of one search to a search head (target,
// its URL without a trailing slash) with the search's token.
type headClient struct {
	c      *cli.Context
	target string
	token  string
}

// do sends a request with a JSON body to path on the search head.
func (h *headClient) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, h.target+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if t := h.token; t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	return cliHTTPClient(h.c, 0).Do(req)
}

// checkSite refuses a search head that serves another site than the one
// --site expects (its /healthz says which).
func (h *headClient) checkSite(ctx context.Context, site string) error {
	res, err := h.do(ctx, http.MethodGet, "/healthz", nil)
	if err != nil {
		return fmt.Errorf("search %s: %w", h.target, err)
	}
	var hz struct {
		Site string `json:"site"`
	}
	_ = json.NewDecoder(res.Body).Decode(&hz)
	res.Body.Close()
	if hz.Site != site {
		return fmt.Errorf("search: the search head at %s serves site %q, not %q (--site): use that site's search head", h.target, hz.Site, site)
	}
	return nil
}

// headRefusal is the error a search head's answer other than 200 OK
// stands for: its JSON error and code when it has them, else its body.
func headRefusal(res *http.Response, target string) error {
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	var e struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		return fmt.Errorf("search: %s (%s, HTTP %d)", e.Error, e.Code, res.StatusCode)
	}
	return fmt.Errorf("search %s: HTTP %d: %s", target, res.StatusCode, strings.TrimSpace(string(raw)))
}

// printHeadTable prints a transforming search's whole answer (one JSON
// response): its rows as NDJSON for --output json, else as printResults
// does, then the summary.
func printHeadTable(body io.Reader, target, out string) error {
	var resp query.Response
	d := json.NewDecoder(body)
	d.UseNumber()
	if err := d.Decode(&resp); err != nil {
		return fmt.Errorf("search %s: bad answer: %w", target, err)
	}
	if out == "json" {
		for _, r := range resp.Results {
			var line bytes.Buffer
			_ = query.AppendRowJSON(&line, r, resp.Fields)
			os.Stdout.Write(line.Bytes())
		}
	} else {
		printResults(os.Stdout, &resp, out)
	}
	return searchSummary(&resp.Summary)
}

// printHeadStream prints a streamed answer (NDJSON) as it arrives: events
// at once, other rows as a table once the summary line has named their
// columns, then the summary.
func printHeadStream(body io.Reader, target, out string) error {
	dec := json.NewDecoder(body)
	dec.UseNumber()
	var rows []map[string]any
	var sum *query.Summary
	var fields []string
	isEvent := func(r map[string]any) bool { _, ok := r["_raw"]; return ok }
	for {
		var line map[string]any
		if err := dec.Decode(&line); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("search %s: bad answer: %w", target, err)
		}
		if e, ok := line["error"].(string); ok && len(line) <= 2 {
			return fmt.Errorf("search: %s", e)
		}
		if s, ok := line["summary"]; ok && len(line) <= 2 {
			b, _ := json.Marshal(s)
			sum = &query.Summary{}
			_ = json.Unmarshal(b, sum)
			if f, ok := line["fields"].([]any); ok {
				for _, x := range f {
					fields = append(fields, fmt.Sprint(x))
				}
			}
			continue
		}
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
	}
	if sum == nil {
		return fmt.Errorf("search %s: the answer ended without a summary", target)
	}
	if len(rows) > 0 {
		printResults(os.Stdout, &query.Response{Results: rows, Fields: fields}, out)
	}
	return searchSummary(sum)
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

// answeredBy checks that the process at target has the role the flag
// naming it promised (api.RoleHeader): a peer's /v1/search searches only
// that peer's copies, so a peer given as --searchhead would answer part
// of the data as if it were all of it.
func answeredBy(res *http.Response, want, target string) error {
	got := res.Header.Get(api.RoleHeader)
	switch {
	case got == "" || got == want:
		return nil
	case want == api.RoleSearchHead:
		return fmt.Errorf("search: %s is a %s, not a search head: its /v1/search searches only its own copies, not the cluster; give a search head's URL to --searchhead, or use --peer %s to search that one peer", target, got, target)
	default:
		return fmt.Errorf("search: %s is a %s, not a peer: use --searchhead %s to search the cluster through it", target, got, target)
	}
}
