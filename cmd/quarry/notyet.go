package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// notYet is the command of a role whose issue has not landed: it is listed,
// and says so instead of pretending to work.
func notYet(name string) *cli.Command {
	return &cli.Command{
		Name:            name,
		Usage:           "(not built yet)",
		SkipFlagParsing: true,
		Action: func(*cli.Context) error {
			return fmt.Errorf("%s: not built yet in this version of quarry", name)
		},
	}
}
