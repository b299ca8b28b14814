#!/usr/bin/env bash
# Instructions per call of the Python API (callgrind; repeatable, unlike
# time): for each mode of instructions.py, the run with 100 000 calls minus
# the run with none, divided by 100 000. Needs valgrind. ~1 min.
#   bindings/python/bench/instructions.sh [path/to/python]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${1:-$here/../../../target/venv/bin/python}"
count() {
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$python" "$here/instructions.py" "$1" "$2" 2>&1 \
    | sed -n 's/.*refs: *\([0-9,]*\).*/\1/p' | tr -d ,
}
n=100000
for mode in empty try check keyed-empty keyed-str keyed-bytes keyed-int; do
  base=$(count "$mode" 0)
  with=$(count "$mode" "$n")
  echo "$mode: $(( (with - base) / n )) instructions per call (loop included)"
done
