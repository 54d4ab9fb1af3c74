#!/usr/bin/env bash
# Runs `make test` RUNS times (10 by default) in a row, each in a fresh clone of HEAD, while a
# release build of another clone runs beside it the whole time, as CI shares its 2 cores. Prints
# each run's result and wall time; keeps the log of a failed run. Stops what it started and
# deletes its clones, so the disk holds at most two targets at once.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
runs="${1:-10}"
commit="$(git -C "$repo" rev-parse --short HEAD)"   # every run tests this commit
work="$(mktemp -d /tmp/baton-loaded.XXXXXX)"
git clone -q "$repo" "$work/load"

# The load: a clean release build of the whole workspace, again and again.
# Its own process group (setsid), so that stopping it stops every rustc it started.
setsid bash -c 'cd "$1" && while true; do
    cargo build --release --workspace --locked -q >/dev/null 2>&1
    cargo clean -q >/dev/null 2>&1
  done' load "$work/load" &
load_pid=$!
trap 'kill -- -$load_pid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

echo "make test x$runs on clean clones of $commit, beside a release build of another clone"
failed=0
for i in $(seq 1 "$runs"); do
  git clone -q "$repo" "$work/run" && git -C "$work/run" checkout -q "$commit"
  start=$(date +%s)
  (cd "$work/run" && make --no-print-directory test) >"$work/run.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  passed=$(grep -o '[0-9]* passed' "$work/run.log" | awk '{s += $1} END {print s + 0}')
  printf 'run %2d: rc=%d, %dm%02ds, %d tests passed, load average %s\n' \
    "$i" "$rc" $((secs / 60)) $((secs % 60)) "$passed" "$(cut -d' ' -f1-3 /proc/loadavg)"
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + 1))
    cp "$work/run.log" "/tmp/baton-loaded-run-$i.log"
    echo "        log kept: /tmp/baton-loaded-run-$i.log"
  fi
  rm -rf "$work/run"
done
echo "$((runs - failed)) of $runs passed"
[ "$failed" -eq 0 ]
