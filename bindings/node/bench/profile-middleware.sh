#!/usr/bin/env bash
# Share of a trivial app's CPU spent in ratebound's middleware, by profile:
# the app (bench/server.js FRAMEWORK ratebound) under wrk on 127.0.0.1 for
# 5 s while `perf record` samples it; prints the samples in the addon, in
# N-API (napi_* in node) and in the JavaScript of middleware.js/ratebound.js.
# Less disturbed by other processes than comparing req/s, which on a shared
# 2-core machine varies more between runs than the effect measured.
# Needs perf and wrk. Usage: bench/profile-middleware.sh [express|fastify]
set -euo pipefail
cd "$(dirname "$0")/.."
fw="${1:-fastify}"
out="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$out" "/tmp/perf-$pid.map"' EXIT
# --perf-basic-prof also makes node 20 write an isolate-*-v8.log into the
# working directory (bindings/node): keep V8's log in the temporary directory.
node --perf-basic-prof --logfile="$out/v8.log" --no-logfile-per-isolate bench/server.js "$fw" ratebound > "$out/port" &
pid=$!
for _ in $(seq 50); do [ -s "$out/port" ] && break; sleep 0.1; done
perf record -F 2000 -g -p "$pid" -o "$out/perf.data" -- sleep 5 > /dev/null 2>&1 &
perf_pid=$!
wrk -t1 -c32 -d5s "http://127.0.0.1:$(cat "$out/port")/" | grep -E 'Requests/sec'
wait "$perf_pid" || true
report() { perf report -i "$out/perf.data" --no-children "$@" 2>/dev/null | grep -E '^ +[0-9.]+%'; }
addon=$(report --sort dso | awk '/ratebound.*\.node/ {s+=$1} END {print s+0}')
napi=$(report --sort symbol | awk '/ napi_/ {s+=$1} END {print s+0}')
js=$(report --sort symbol | awk '/middleware\.js|ratebound\.js/ {s+=$1} END {print s+0}')
echo "$fw: addon ${addon}% + N-API ${napi}% + JS ${js}% of the server's CPU samples"
