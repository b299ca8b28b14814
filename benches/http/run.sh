#!/usr/bin/env bash
# The cost of ratebound-http on a trivial handler: the example server with
# and without the layer, loaded by wrk on loopback, 10 s each, twice each,
# alternating. Prints requests/s and the share of non-2xx answers.
# Time: ~45 s plus the example's release build. Needs wrk (ci/bench installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
server="${CARGO_TARGET_DIR:-$PWD/target}/release/examples/server"
cargo build --release --locked -p ratebound-http --example server
port_on=31801
port_off=31802
"$server" --port "$port_on" > /dev/null &
on=$!
"$server" --port "$port_off" --no-limit > /dev/null &
off=$!
trap 'kill $on $off 2>/dev/null || true' EXIT
sleep 1
run() {
  # One thread, 32 connections, 10 s, bounded by the duration.
  wrk -t1 -c32 -d10s -s benches/http/keys.lua "http://127.0.0.1:$1/" 2>&1
}
for round in 1 2; do
  for mode in with without; do
    port=$port_on; [ "$mode" = without ] && port=$port_off
    out=$(run "$port")
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    non2xx=$(echo "$out" | awk '/Non-2xx/ {print $5}')
    total=$(echo "$out" | awk '/requests in/ {print $1}')
    echo "round $round, $mode layer: ${rps} req/s (${non2xx:-0} of $total not 2xx)"
  done
done
