#!/usr/bin/env bash
# Measures `make run` as a user meets it: the time from start to the `ready` line (with a warm
# build), and the CPU that baton and the emulator use while idle, over 30 seconds. Prints the
# figures; asserts nothing. Stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(mktemp)"
start=$(date +%s.%N)
make --no-print-directory run >"$out" 2>&1 &
make_pid=$!
trap 'kill -TERM $(pgrep -P $make_pid) $make_pid 2>/dev/null || true; wait $make_pid 2>/dev/null || true; rm -f "$out"' EXIT
for _ in $(seq 1 600); do grep -q "baton local ready" "$out" && break; sleep 0.05; done
grep -q "baton local ready" "$out" || { echo "not ready after 30 s"; cat "$out"; exit 1; }
ready=$(date +%s.%N)
awk -v a="$start" -v b="$ready" -v line="$(grep -m1 "baton local ready" "$out")" \
  'BEGIN { printf "make run -> ready: %.2f s (%s)\n", b - a, line }'

baton_pid=$(pgrep -f "debug/baton local" | head -1)
emu_pid=$(pgrep -f "tools/emulator.py" | head -1)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
sleep 2   # let start-up work settle
b0=$(ticks "$baton_pid"); e0=$(ticks "$emu_pid"); t0=$(date +%s.%N)
sleep 30
b1=$(ticks "$baton_pid"); e1=$(ticks "$emu_pid"); t1=$(date +%s.%N)
awk -v b0="$b0" -v b1="$b1" -v e0="$e0" -v e1="$e1" -v t0="$t0" -v t1="$t1" -v hz="$hz" 'BEGIN {
  s = t1 - t0; b = (b1 - b0) / hz / s * 100; e = (e1 - e0) / hz / s * 100
  printf "idle CPU over %.0f s: baton %.2f%%, emulator %.2f%%, together %.2f%% of one core\n", s, b, e, b + e
}'
