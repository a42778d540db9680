package main

import "github.com/urfave/cli/v2"

// busCommand is a placeholder until its issue lands.
func busCommand() *cli.Command { return notYet("bus") }
