package main

import "github.com/urfave/cli/v2"

// peerCommand is a placeholder until its issue lands.
func peerCommand() *cli.Command {
	c := notYet("peer")
	c.Subcommands = peerAdminSubcommands()
	return c
}

// ingestCommand is a placeholder until its issue lands.
func ingestCommand() *cli.Command { return notYet("ingest") }
