package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
)

func healthCommand() *cli.Command {
	return &cli.Command{
		Name:      "health",
		Usage:     "exit 0 when the server at URL answers /healthz with 200 (for container healthchecks)",
		ArgsUsage: "URL",
		Flags: []cli.Flag{
			&cli.DurationFlag{Name: "timeout", Value: 3 * time.Second, Usage: "how long to wait for an answer", EnvVars: envVars("timeout")},
			tlsCAFlag(),
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return fmt.Errorf("health: want exactly one URL, got %d arguments", c.NArg())
			}
			url := strings.TrimSuffix(c.Args().First(), "/") + "/healthz"
			client := cliHTTPClient(c, c.Duration("timeout"))
			resp, err := client.Get(url)
			if err != nil {
				return fmt.Errorf("health %s: %w", url, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("health %s: HTTP %d: %s", url, resp.StatusCode, strings.TrimSpace(string(body)))
			}
			fmt.Println("ok")
			return nil
		},
	}
}
