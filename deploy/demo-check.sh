#!/usr/bin/env bash
# Smoke check of the docker-compose demo (run after `make demo`, from the repo
# root): waits (with a deadline) for a manager leader and six peers Up, ingests
# a small file through p1's HEC, and checks that the bucket has copies on both
# sites. Exit status non-zero on any failure. Not part of CI.
set -euo pipefail

Q=${Q:-bin/quarry}
export QUARRY_MANAGER=${QUARRY_MANAGER:-https://127.0.0.1:${QUARRY_DEMO_MANAGER_PORT:-8001}}
# The CA of the demo's certificates, copied out by deploy/demo-up.sh.
export QUARRY_TLS_CA=${QUARRY_TLS_CA:-${QUARRY_DEMO_CA:-bin/demo-ca.pem}}
export QUARRY_TOKEN=${QUARRY_DEMO_ADMIN_TOKEN:-demo-admin}
HEC=https://127.0.0.1:${QUARRY_DEMO_HEC_PORT:-8088}
HEC_TOKEN=${QUARRY_DEMO_HEC_TOKEN:-demo-hec}
DEADLINE=$((SECONDS + ${WAIT_SECONDS:-120}))

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "waiting for a leader and 6 peers Up (deadline ${WAIT_SECONDS:-120}s)"
until "$Q" cluster status >"$tmp/status" 2>&1 &&
	awk '/^leader/ && $2 != "" {l=1} $3 == "Up" && $1 ~ /^p[1-6]$/ {n++} END {exit !(l && n == 6)}' "$tmp/status"; do
	if ((SECONDS >= DEADLINE)); then
		echo "demo not ready in time; last status:" >&2
		cat "$tmp/status" >&2
		exit 1
	fi
	sleep 2
done
cat "$tmp/status"

for i in $(seq 1 1000); do
	echo "2026-01-01T00:00:00Z host=web$((i % 5)) status=$((200 + (i % 3) * 100)) msg=demo event $i"
done >"$tmp/sample.log"
"$Q" ingest "$tmp/sample.log" --hec "$HEC" --token "$HEC_TOKEN"

# Peers report buckets to the managers asynchronously (over the bus), so the
# listing may lag the acknowledgement by a moment: wait for it, with a deadline.
DEADLINE=$((SECONDS + 30))
until "$Q" buckets list --output json >"$tmp/buckets.json" 2>&1 &&
	grep -q '"site": *"site1"' "$tmp/buckets.json" && grep -q '"site": *"site2"' "$tmp/buckets.json"; do
	if ((SECONDS >= DEADLINE)); then
		echo "no bucket with copies on both site1 and site2 in time; last listing:" >&2
		cat "$tmp/buckets.json" >&2
		exit 1
	fi
	sleep 1
done
"$Q" buckets list
echo "ok: leader elected, 6 peers Up, 1000 events ingested, copies on site1 and site2"
