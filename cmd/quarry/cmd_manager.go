package main

import "github.com/urfave/cli/v2"

// managerCommand is a placeholder until its issue lands.
func managerCommand() *cli.Command { return notYet("manager") }

// clusterCommand is a placeholder until its issue lands.
func clusterCommand() *cli.Command { return notYet("cluster") }

// peersCommand is a placeholder until its issue lands.
func peersCommand() *cli.Command { return notYet("peers") }

// bucketsCommand is a placeholder until its issue lands.
func bucketsCommand() *cli.Command { return notYet("buckets") }

// maintenanceCommand is a placeholder until its issue lands.
func maintenanceCommand() *cli.Command { return notYet("maintenance") }

// rebalanceCommand is a placeholder until its issue lands.
func rebalanceCommand() *cli.Command { return notYet("rebalance") }

// peerAdminSubcommands are the admin subcommands of `quarry peer` (offline);
// the manager's CLI owns them, the peer's command lists them.
func peerAdminSubcommands() []*cli.Command { return nil }
