#!/usr/bin/env bash
# What share of our server's CPU in a null cell is the idle spin: perf's
# samples on CPU 1 (where `vhost-bench --pin` puts the server) whose source
# line is the spin's `pause` (core::arch's sse2.rs:25, the only pause in the
# daemon's loops), during a vhost-bench run whose both slots are ours
# (`--base-bin` = the same binary), so every sample on CPU 1 is our server.
# The pause's line is a lower bound of the idle spin: the loop's other lines
# (the available index, the clock every 8 polls) are not counted.
#   docs/bench/spin-share.sh [CELL...]   (default: the four null cells below)
# Needs perf and a release build (cargo build --release -p vhost-mpath -p vhost-mpath-tests).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=target/release/vhost-mpath
bench=target/release/vhost-bench
seconds=${SPIN_SHARE_SECONDS:-8}
if [ $# -eq 0 ]; then
  set -- "4k QD32 randread" "4k QD32 randwrite" "128k QD8 randread" "2q"
fi
data=$(mktemp -d)
trap 'rm -rf "$data"' EXIT
for cell in "$@"; do
  out="$data/bench.txt"
  "$bench" --backends null --cells "$cell" --seconds "$seconds" --warmup 1 --repeat 1 --pin \
    --base-bin "$bin" --ours-bin "$bin" >"$out" 2>&1 &
  pid=$!
  # Past the daemon's start and the warm-up, inside the first slot's
  # measured seconds and the second's (each cell's first workload only).
  sleep 3
  perf record -q -C 1 -o "$data/perf.data" -- sleep $((seconds + 2)) >/dev/null 2>&1
  wait "$pid"
  share=$(perf report -i "$data/perf.data" --no-children --sort srcline -F overhead,srcline \
    --stdio 2>/dev/null | awk '$2 == "sse2.rs:25" { s += $1 } END { printf "%.1f%%", s }')
  echo "== $cell: $share of CPU 1's samples on the spin's pause"
  grep -E "^(server|ours|base) " "$out" || cat "$out"
done
