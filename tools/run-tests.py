#!/usr/bin/env python3
"""Runs the workspace's test binaries side by side: `make test`'s runner.

`cargo test` runs one test binary at a time. Most of baton's end-to-end tests wait: on the
emulator, on a receipt's 30-second lease, on the sweeper's next pass, on a worker's reminder. So
the binaries run here several at once, each as cargo would run it (from its package's directory,
with cargo's variables), and each one's output is printed whole when it ends, with its time.

    cargo test --workspace --locked --no-run --message-format=json \\
      | tools/run-tests.py --jobs 4 --skip slow_one \\
          --alone 'smoke simulation_smoke_ --nocapture --test-threads 1'

`--skip NAME` is passed to every binary (the usual libtest filter). `--alone 'BIN ARGS'` runs
binary BIN once more with exactly ARGS (a filter and its options) beside the others: a test kept
out of the main pass by a `--skip`, run with its output shown. Binaries are started longest first,
by the times of the last run kept in `<target>/test-times.json` (the first run starts them in
name order). Exits 1 if any binary failed, after all have ended; the failed ones are listed last.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path


def binaries(lines):
    """The test executables in cargo's JSON messages: (name, path, package directory)."""
    found = []
    for line in lines:
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            continue  # cargo's own lines, if any reach here
        if message.get("reason") == "compiler-artifact" and message.get("executable") and message["profile"]["test"]:
            target = message["target"]
            # A test file goes by its name, as `cargo test --test NAME`; a crate's own tests say so.
            kind = "lib" if target["kind"] == ["lib"] else "bin" if "bin" in target["kind"] else None
            name = f"{target['name']} ({kind})" if kind else target["name"]
            found.append((name, message["executable"], str(Path(message["manifest_path"]).parent)))
    return found


def cargo_env(package_dir):
    """What cargo sets for a test it runs: the package's directory; the rest is inherited."""
    env = dict(os.environ)
    env["CARGO_MANIFEST_DIR"] = package_dir
    return env


class Runner:
    """Runs the queued test runs, `jobs` at a time, in the queue's order."""

    def __init__(self, runs):
        self.queue = list(runs)
        self.lock = threading.Lock()
        self.failed = []
        self.times = {}

    def worker(self):
        while True:
            with self.lock:
                if not self.queue:
                    return
                label, argv, cwd = self.queue.pop(0)
            started = time.monotonic()
            done = subprocess.run(argv, cwd=cwd, env=cargo_env(cwd), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, errors="replace")
            took = time.monotonic() - started
            with self.lock:
                self.times[label] = round(took, 1)
                verdict = "ok" if done.returncode == 0 else f"FAILED (exit {done.returncode})"
                print(f"\n===== {label}: {verdict} in {took:.1f}s =====", flush=True)
                print(done.stdout.rstrip(), flush=True)
                if done.returncode != 0:
                    self.failed.append(label)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4, help="binaries running at once")
    parser.add_argument("--skip", action="append", default=[], help="a libtest filter to skip, for every binary")
    parser.add_argument("--alone", action="append", default=[], help="'BIN ARGS': BIN once more with ARGS")
    parser.add_argument("--times", default=None, help="where the last run's times are kept")
    args = parser.parse_args()

    found = binaries(sys.stdin)
    if not found:
        sys.exit("run-tests: no test binaries in cargo's output (was it --message-format=json?)")
    runs = []
    for spec in args.alone:
        name, *rest = shlex.split(spec)
        named = [(path, cwd) for n, path, cwd in found if n == name]
        if len(named) != 1:
            sys.exit(f"run-tests: --alone names {name!r}, which is {len(named)} test binaries of this build, not one")
        path, cwd = named[0]
        runs.append((f"{name} {' '.join(rest)}", [path, *rest], cwd))
    skips = [a for s in args.skip for a in ("--skip", s)]
    runs += [(f"{name} [{Path(cwd).name}]", [path, *skips], cwd) for name, path, cwd in found]

    times_file = Path(args.times) if args.times else None
    last = json.loads(times_file.read_text()) if times_file and times_file.exists() else {}
    runs.sort(key=lambda r: -last.get(r[0], 0))

    runner = Runner(runs)
    started = time.monotonic()
    threads = [threading.Thread(target=runner.worker) for _ in range(args.jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if times_file:
        times_file.write_text(json.dumps(runner.times, indent=1, sort_keys=True))
    slowest = sorted(runner.times.items(), key=lambda kv: -kv[1])[:5]
    print(f"\n{len(runs)} test runs in {time.monotonic() - started:.0f}s, {args.jobs} at once; slowest: "
          + ", ".join(f"{k} {v}s" for k, v in slowest))
    if runner.failed:
        print("failed: " + ", ".join(runner.failed))
        sys.exit(1)


if __name__ == "__main__":
    main()
