package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/quarry-dev/quarry/manager"
)

// tokenCommand is `quarry token add|list|revoke`: the cluster's HEC and
// search tokens, through the managers' admin API (manager/adminapi.go).
// A token is named by its id (the first 16 hex digits of its SHA-256);
// list shows ids and the first 4 characters of each secret, never the
// whole secret (no read shows it, SPEC §7). add prints the secret once.
func tokenCommand() *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "add, list and revoke HEC and search tokens",
		Subcommands: []*cli.Command{
			{
				Name:   "list",
				Usage:  "list the tokens by id (never their secrets: add prints a secret once)",
				Flags:  adminFlags(),
				Action: adminAction(0, "no arguments", runTokenList),
			},
			{
				Name:      "add",
				Usage:     "add a HEC or search token; prints its secret once",
				ArgsUsage: "hec|search [--indexes web,app] [--default-index web] [--useack=false] [--host H] [--source S] [--sourcetype T] [--publish nightly,team-a.*] [--value SECRET | --value-file FILE]",
				Flags: append(adminFlags(),
					&cli.StringFlag{Name: "indexes", Usage: "comma list of the indexes the token may write (hec) or read (search); empty: every declared index", EnvVars: envVars("indexes")},
					&cli.StringFlag{Name: "default-index", Usage: "hec: the index of events that name none (default: the first of --indexes, else main)", EnvVars: envVars("default-index")},
					&cli.BoolFlag{Name: "useack", Value: true, Usage: "hec: acknowledge requests with ack ids on a channel (Splunk's useACK); --useack=false: the 200 is the acknowledgement", EnvVars: envVars("useack")},
					&cli.BoolFlag{Name: "allow-query-string-auth", Usage: "hec: accept the token as ?token= (Splunk's allowQueryStringAuth)", EnvVars: envVars("allow-query-string-auth")},
					&cli.StringFlag{Name: "host", Usage: "hec: the host of events that name none (before the request's ?host=)", EnvVars: envVars("token-host")},
					&cli.StringFlag{Name: "source", Usage: "hec: the source of events that name none (before the request's ?source=)", EnvVars: envVars("token-source")},
					&cli.StringFlag{Name: "sourcetype", Usage: "hec: the sourcetype of events that name none (before the request's ?sourcetype=)", EnvVars: envVars("token-sourcetype")},
					&cli.StringFlag{Name: "publish", Usage: "search: comma list of the result names its searches may publish to (\"publish\"), each a name or a prefix ending in *; unset: any name", EnvVars: envVars("token-publish")},
					&cli.StringFlag{Name: "value", Usage: "the secret to use (8 to 256 characters); default: the managers generate one", EnvVars: envVars("value")},
					secretFileFlag("value", "the token's secret"),
				),
				Action: adminAction(1, "the kind, hec or search", runTokenAdd),
			},
			{
				Name:      "revoke",
				Usage:     "revoke a token, named by its id or its secret; every peer and search head refuses it within seconds",
				ArgsUsage: "<id|secret>",
				Flags:     adminFlags(),
				Action:    adminAction(1, "one token id or secret", runTokenRevoke),
			},
		},
	}
}

func printJSONTo(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runTokenList(c *cli.Context, cl *manager.Client, _ []string, out string) error {
	ctx, cancel := callCtx(c)
	defer cancel()
	list, err := cl.Tokens(ctx)
	if err != nil {
		return fmt.Errorf("token list: %w", err)
	}
	if out == "json" {
		return printJSONTo(c.App.Writer, map[string]any{"tokens": list})
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	head := "ID\tKIND\tPREFIX\tINDEXES\tDEFAULT_INDEX\tUSEACK"
	fmt.Fprintln(tw, head)
	for _, t := range list {
		idx, def, ack := strings.Join(t.Indexes, ","), t.DefaultIndex, "-"
		if idx == "" {
			idx = "*"
		}
		if def == "" {
			def = "-"
		}
		if t.UseAck != nil {
			ack = fmt.Sprint(*t.UseAck)
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s", t.ID, t.Kind, t.Prefix, idx, def, ack)
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// tokenRequest turns `quarry token add KIND` and its flags into the body of
// POST /v1/tokens; HEC-only flags on a search token are refused.
func tokenRequest(c *cli.Context, kind string) (manager.TokenRequest, error) {
	value, err := secretValue(c, "value")
	if err != nil {
		return manager.TokenRequest{}, fmt.Errorf("token add %s: %w", kind, err)
	}
	req := manager.TokenRequest{Kind: kind, Token: value, DefaultIndex: c.String("default-index"),
		AllowQueryStringAuth: c.Bool("allow-query-string-auth"), Host: c.String("host"), Source: c.String("source"), Sourcetype: c.String("sourcetype")}
	switch kind {
	case manager.TokenKindHEC:
		if c.IsSet("publish") {
			return req, errors.New("token add hec: --publish is a search token setting")
		}
		if c.IsSet("useack") {
			ack := c.Bool("useack")
			req.UseAck = &ack
		}
	case manager.TokenKindSearch:
		for _, f := range []string{"default-index", "useack", "allow-query-string-auth", "host", "source", "sourcetype"} {
			if c.IsSet(f) {
				return req, fmt.Errorf("token add search: --%s is a HEC token setting", f)
			}
		}
		if c.IsSet("publish") {
			req.Publish = []string{}
			for _, p := range strings.Split(c.String("publish"), ",") {
				if p = strings.TrimSpace(p); p != "" {
					req.Publish = append(req.Publish, p)
				}
			}
		}
	default:
		return req, fmt.Errorf("token add %q: want hec or search", kind)
	}
	if s := strings.TrimSpace(c.String("indexes")); s != "" {
		for _, ix := range strings.Split(s, ",") {
			ix = strings.TrimSpace(ix)
			if ix == "" {
				return req, fmt.Errorf("token add %s: --indexes %q: empty index name", kind, s)
			}
			req.Indexes = append(req.Indexes, ix)
		}
	}
	return req, nil
}

func runTokenAdd(c *cli.Context, cl *manager.Client, args []string, out string) error {
	req, err := tokenRequest(c, args[0])
	if err != nil {
		return err
	}
	ctx, cancel := callCtx(c)
	defer cancel()
	v, err := cl.AddToken(ctx, req)
	if err != nil {
		return fmt.Errorf("token add %s: %w", req.Kind, err)
	}
	if out == "json" {
		return printJSONTo(c.App.Writer, map[string]any{"token": v})
	}
	fmt.Fprintf(c.App.Writer, "%s token %s added; its secret (shown only now):\n%s\n", v.Kind, v.ID, v.Token)
	return nil
}

func runTokenRevoke(c *cli.Context, cl *manager.Client, args []string, out string) error {
	ref := args[0]
	ctx, cancel := callCtx(c)
	defer cancel()
	// An id names the token; anything else is taken as the secret itself,
	// which never leaves this process: only its id goes to the managers.
	id := ref
	if !manager.IsTokenID(ref) {
		id = manager.TokenID(ref)
	}
	res, err := cl.RevokeToken(ctx, id)
	var ae *manager.APIError
	if errors.As(err, &ae) && ae.Code == "unknown_token" && id == ref {
		// A secret that happens to look like an id.
		id = manager.TokenID(ref)
		res, err = cl.RevokeToken(ctx, id)
	}
	if errors.As(err, &ae) && ae.Code == "unknown_token" {
		return fmt.Errorf("token revoke: no token with id or secret %q", shortRef(ref))
	}
	if err != nil {
		return fmt.Errorf("token revoke %s: %w", id, err)
	}
	if res.Warning != "" {
		fmt.Fprintf(c.App.ErrWriter, "quarry: warning: %s\n", res.Warning)
	}
	if out == "json" {
		return printJSONTo(c.App.Writer, res)
	}
	if res.Revoked != "" {
		id = res.Revoked // as token list shows it (keyed once the cluster has its token key)
	}
	fmt.Fprintf(c.App.Writer, "token %s revoked (%s)\n", id, strings.Join(res.Kinds, ", "))
	return nil
}

// shortRef keeps a secret given on the command line out of error output.
func shortRef(ref string) string {
	if manager.IsTokenID(ref) || len(ref) <= 8 {
		return ref
	}
	return ref[:4] + "…"
}
