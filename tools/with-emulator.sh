#!/usr/bin/env bash
# Runs a command with baton's emulator (tools/emulator.py) on a free loopback port, and stops the
# emulator afterwards whatever the command did. The command sees BATON_TEST_ENDPOINT.
#   tools/with-emulator.sh cargo test --workspace
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
py="${BATON_PYTHON:-$here/.venv/bin/python}"
dir="$(mktemp -d)"
log="$dir/emulator.log"
"$py" "$here/tools/emulator.py" --port 0 --ready-file "$dir/url" ${BATON_EMULATOR_ARGS:-} >"$log" 2>&1 &
pid=$!
stop() {
  kill -TERM "$pid" 2>/dev/null || true
  # moto sometimes ignores SIGTERM for >10 s (docs/EMULATOR_DEVIATIONS.md): follow up with SIGKILL.
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -KILL "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap stop EXIT
for _ in $(seq 1 150); do
  [ -s "$dir/url" ] && break
  kill -0 "$pid" 2>/dev/null || { echo "emulator failed to start:" >&2; cat "$log" >&2; exit 1; }
  sleep 0.2
done
[ -s "$dir/url" ] || { echo "emulator not ready after 30 s:" >&2; cat "$log" >&2; exit 1; }
export BATON_TEST_ENDPOINT="$(cat "$dir/url")"
echo "emulator at $BATON_TEST_ENDPOINT (pid $pid)"
"$@"
