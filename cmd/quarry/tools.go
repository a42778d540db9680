//go:build tools

// This file pins modules the design names (SPEC §1) before every package uses them.
package main

import (
	_ "github.com/RoaringBitmap/roaring/v2"
	_ "github.com/bits-and-blooms/bloom/v3"
	_ "github.com/goccy/go-json"
	_ "github.com/hashicorp/raft"
	_ "github.com/hashicorp/raft-boltdb/v2"
	_ "github.com/klauspost/compress/zstd"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/urfave/cli/v2"
	_ "github.com/valyala/fastjson"
	_ "pgregory.net/rapid"
)
