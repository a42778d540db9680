package main

import "github.com/urfave/cli/v2"

// searchCommand is a placeholder until its issue lands.
func searchCommand() *cli.Command { return notYet("search") }
