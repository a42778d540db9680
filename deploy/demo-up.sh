#!/usr/bin/env bash
# `make demo` after the image is built (run from the repo root): starts the
# docker-compose demo, waits (with a deadline) until every container is
# healthy, a manager leads and six peers are Up, loads sample data (the bench
# event model, `quarry sample`) through p1's HEC with acks — once: a demo
# that already holds it is not loaded again — and waits until every search
# head (sh1, sh2, sh0) answers its exact count. Exit status non-zero on any
# failure, with the last state seen. Every server speaks TLS with its role's
# certificate, which the compose service certs generated (`quarry tls gen`): the
# CA is copied out of its volume to $QUARRY_DEMO_CA (bin/demo-ca.pem), which
# the host's clients verify the servers against (QUARRY_TLS_CA, curl --cacert).
set -euo pipefail

Q=${Q:-bin/quarry}

# Secrets (review L6): the compose file's defaults (demo-admin, demo-hec,
# demo-search, demo-nats) are known to anyone who reads it. Unless the caller
# sets them, make demo uses random ones, written once to $SECRETS (mode 0600,
# git-ignored under bin/) and read again on every later start (a variable
# the caller sets still wins), since the
# managers keep the tokens they were first seeded with. A demo that already
# exists without that file (made before it) keeps the defaults it was made
# with; make demo-down removes the file with the volumes.
SECRETS=${QUARRY_DEMO_SECRETS:-bin/demo-secrets.env}
if [[ ! -f $SECRETS ]]; then
	mkdir -p "$(dirname "$SECRETS")"
	rnd() { od -An -N18 -tx1 /dev/urandom | tr -d ' \n'; }
	if [[ -n $(docker-compose ps -aq 2>/dev/null) ]]; then
		echo "demo: an existing demo made with the default secrets keeps them (make demo-down, then make demo, for random ones)" >&2
		admin=demo-admin hec=demo-hec search=demo-search nats=demo-nats
	else
		admin=admin-$(rnd) hec=hec-$(rnd) search=search-$(rnd) nats=nats-$(rnd)
	fi
	(
		umask 077
		cat >"$SECRETS" <<ENV
QUARRY_DEMO_ADMIN_TOKEN=${QUARRY_DEMO_ADMIN_TOKEN:-$admin}
QUARRY_DEMO_HEC_TOKEN=${QUARRY_DEMO_HEC_TOKEN:-$hec}
QUARRY_DEMO_SEARCH_TOKEN=${QUARRY_DEMO_SEARCH_TOKEN:-$search}
QUARRY_DEMO_NATS_SECRET=${QUARRY_DEMO_NATS_SECRET:-$nats}
ENV
	)
	echo "demo: secrets in $SECRETS (source it to use them: set -a; . $SECRETS; set +a)"
fi
while IFS='=' read -r k v; do # the caller's own values come first
	if [[ -n $k && -z ${!k:-} ]]; then
		export "$k=$v"
	fi
done <"$SECRETS"
N=${QUARRY_DEMO_SAMPLE_EVENTS:-20000}
WAIT=${WAIT_SECONDS:-180}
export QUARRY_MANAGER=${QUARRY_MANAGER:-https://127.0.0.1:${QUARRY_DEMO_MANAGER_PORT:-8001}}
CA=${QUARRY_DEMO_CA:-bin/demo-ca.pem}
export QUARRY_TLS_CA=$CA
ADMIN=${QUARRY_DEMO_ADMIN_TOKEN:-demo-admin}
SEARCH=${QUARRY_DEMO_SEARCH_TOKEN:-demo-search}
HEC=https://127.0.0.1:${QUARRY_DEMO_HEC_PORT:-8088}
HEC_TOKEN=${QUARRY_DEMO_HEC_TOKEN:-demo-hec}
HEADS="sh1=https://127.0.0.1:${QUARRY_DEMO_SH1_PORT:-8089} sh2=https://127.0.0.1:${QUARRY_DEMO_SH2_PORT:-8090} sh0=https://127.0.0.1:${QUARRY_DEMO_SH0_PORT:-8091}"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
deadline=$((SECONDS + WAIT))
poll() { # poll WHAT CMD…: run CMD until it succeeds or the deadline passes
	local what=$1
	shift
	until "$@"; do
		if ((SECONDS >= deadline)); then
			echo "demo: $what not reached within ${WAIT}s" >&2
			[[ -s $tmp/last ]] && cat "$tmp/last" >&2
			exit 1
		fi
		sleep 1
	done
}

docker-compose up -d

# The CA the servers' certificates are signed by, out of the certs volume
# (docker cp reads a stopped container's volumes).
mkdir -p "$(dirname "$CA")"
docker cp "$(docker-compose ps -q certs)":/certs/ca.pem "$CA"
echo "demo: servers' CA in $CA (QUARRY_TLS_CA)"

all_healthy() { # the 14 servers; certs is a one-shot container that exited
	local ids
	ids=$(docker-compose ps -q)
	[[ -n $ids ]] || return 1
	# shellcheck disable=SC2086
	docker inspect -f '{{.Name}} {{if .State.Health}}{{.State.Health.Status}}{{else}}no-healthcheck{{end}}' $ids | grep -v '_certs_1 ' >"$tmp/last"
	[[ $(wc -l <"$tmp/last") -eq 14 ]] && ! grep -qv ' healthy$' "$tmp/last"
}
poll "14 containers healthy" all_healthy

cluster_ready() {
	QUARRY_TOKEN=$ADMIN "$Q" cluster status >"$tmp/last" 2>&1 &&
		awk '/^leader/ && $2 != "" {l=1} $3 == "Up" && $1 ~ /^p[1-6]$/ {n++} END {exit !(l && n == 6)}' "$tmp/last"
}
poll "a leader and 6 peers Up" cluster_ready
echo "demo: healthy in $((SECONDS - start))s (14 containers, a leader, 6 peers Up, 3 search heads)"

count() { # count URL: the exact, complete sample count of one search head
	curl -sf --cacert "$CA" -H "Authorization: Bearer $SEARCH" "$1/v1/search" \
		-d '{"query": "index=sample | stats count", "allow_partial": false}' >"$tmp/last" &&
		jq -e '.summary.partial == false' "$tmp/last" >/dev/null &&
		jq -r '.results[0].count // 0' "$tmp/last"
}
sh1=${HEADS%% *}
have=$(count "${sh1#*=}" || echo error)
if [[ $have == "$N" ]]; then
	echo "demo: the $N sample events are already loaded"
else
	if [[ $have != 0 ]]; then
		echo "demo: index sample holds $have events, not 0 or $N: not loading it again (make demo-down starts afresh)" >&2
		exit 1
	fi
	"$Q" sample --events "$N" >"$tmp/sample.json"
	"$Q" ingest "$tmp/sample.json" --hec "$HEC" --token "$HEC_TOKEN" --quiet
fi
head_has_sample() { [[ $(count "$1") == "$N" ]]; }
for h in $HEADS; do
	poll "${h%%=*} counting $N sample events" head_has_sample "${h#*=}"
	echo "demo: ${h%%=*} (${h#*=}) counts $N sample events"
done
cat <<MSG
demo: ready in $((SECONDS - start))s
  search heads: ${HEADS}   (search token: $SEARCH)
  managers: https://127.0.0.1:${QUARRY_DEMO_MANAGER_PORT:-8001} (cluster page; admin token: $ADMIN)
  HEC: $HEC (site1), https://127.0.0.1:${QUARRY_DEMO_HEC2_PORT:-8188} (site2); token: $HEC_TOKEN
  TLS: every server; the CA is $CA (browsers: import it, or accept the warning)
  secrets: $SECRETS
try:
  export QUARRY_MANAGER=$QUARRY_MANAGER QUARRY_TOKEN=$SEARCH QUARRY_SEARCHHEAD=${sh1#*=} QUARRY_TLS_CA=$CA
  $Q search 'index=sample | stats count by status'
  QUARRY_TOKEN=$ADMIN $Q cluster status
MSG
