package main

import "github.com/urfave/cli/v2"

// peerCommand is a placeholder until its issue lands.
func peerCommand() *cli.Command { return notYet("peer") }

// ingestCommand is a placeholder until its issue lands.
func ingestCommand() *cli.Command { return notYet("ingest") }
