#!/usr/bin/env bash
# Ingest rate of a token without acks against an acknowledging one (issue 11's
# closing note): `quarry ingest` with batches of 1,000 bench envelopes into one
# standalone peer, 1 and 2 streams, a fresh data dir per run. The time is until
# every request is acknowledged (ack token: ack ids read true; no-ack token:
# every 200 received — both mean durable). Usage: compat/ingest-rate.sh [N]
# (N events, default 1,000,000; data generated into $TMPDIR, never committed).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/quarry" ./cmd/quarry
go run ../shared/bench/gen_events.go -n "$n" -seed 1 -format hec -o "$work/events.hec" 2>/dev/null
port=18999
for tok in ack noack; do
  for streams in 1 2; do
    rm -rf "$work/data"
    "$work/quarry" peer --id bench --data-dir "$work/data" --http-addr 127.0.0.1:$port \
      --hec-token ack --hec-token noack:useack=false >"$work/peer.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do "$work/quarry" health http://127.0.0.1:$port >/dev/null 2>&1 && break; sleep 0.1; done
    printf 'token=%-5s streams=%d  ' "$tok" "$streams"
    "$work/quarry" ingest --hec http://127.0.0.1:$port --token "$tok" --streams "$streams" --batch 1000 --quiet "$work/events.hec"
    kill "$pid"; wait "$pid" || true
  done
done
