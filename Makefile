# baton: two commands.
#   make test   every check CI runs: fmt, clippy -D warnings, unit, property, contract and
#               end-to-end tests against the local AWS emulator, and the pages in headless
#               Chromium
#   make sim    the deterministic simulation: 100,000 seeded schedules of the real use cases
#               over simulated AWS under every fault; SIM_SEED=<n> make sim replays one, traced
#   make run    all of baton on this machine: emulator, template.yaml's resources, the handlers,
#               the HTTP API on 127.0.0.1; Ctrl-C stops everything it started
#   make package  the four functions as Lambda zips (cargo-lambda, release profile), their sizes,
#               and `sam validate --lint`; not part of `make test`
#   make soak   1,000 workflows through `make run`'s stack with duplicates, early inputs and an
#               emulator outage: nothing lost or doubled, workflows a second, CPU per process
#   make scale  a million workflows through the lifecycle and the sharded index (docs/SCALE.md)
#   make cost   K two-step workflows, then K with a parallel group, on the local stack, every API call counted: calls, units and
#               dollars per workflow (docs/COST.md)
#   make bench  the hot path (shared/core/benches/hot_path.rs: event parse, matching for 1 to 1,000
#               workflows, decide, whole workflows on the in-memory store), then the zips: size,
#               init (median, p90) and first invoke under the Runtime API harness
# Both install the pinned Python tools into .venv when missing (and `make test` headless
# Chromium, with apt), and start and stop what they need.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
TOOLS_STAMP := $(VENV)/.installed-$(shell sha1sum requirements-dev.txt | cut -c1-12)

.PHONY: test disk run sim soak scale measure-local fmt-check clippy unit test-build run-tests lint-infra tools chromium clean package bench cost

# The tests are built first; clippy and the infrastructure checks then run beside them, their
# output held until the tests end (the tests mostly wait, on the emulator, a receipt's lease,
# the sweeper: on 2 cores they leave about two thirds of a core idle, which clippy's check of
# every crate fills). `make test` fails if either does. (The transformed template both read is
# made first.)
test: disk tools fmt-check $(SAM_TEMPLATE) test-build
	@mkdir -p $(BESIDE)
	@rm -f $(BESIDE)/rc; ( rc=0; $(MAKE) --no-print-directory --keep-going clippy lint-infra > $(BESIDE)/log 2>&1 || rc=$$?; \
	  echo $$rc > $(BESIDE)/rc ) & \
	  tests=0; $(MAKE) --no-print-directory run-tests || tests=$$?; wait; \
	  echo "--- clippy and the infrastructure checks (run beside the tests): exit $$(cat $(BESIDE)/rc)"; \
	  cat $(BESIDE)/log; [ $$tests = 0 ] && [ "$$(cat $(BESIDE)/rc)" = 0 ]

# `make test` builds as CI does, from nothing: without cargo's incremental cache, which would add
# about 1.5 GB to target/ and buys nothing on a clean checkout.
test fmt-check clippy lint-infra unit test-build run-tests: export CARGO_INCREMENTAL = 0

# Disk is what a CI machine runs short of, and a build that runs out fails far from the cause (a
# linker's bus error). So `make test` first checks that the filesystem of the target directory
# has room for what a clean run leaves there (docs/TESTING.md, disk), less what is already
# built, and otherwise stops and says how much is missing.
TEST_DISK_MB ?= 3200
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)
disk:
	@mkdir -p $(TARGET_DIR); \
	built=$$(du -sm $(TARGET_DIR) | cut -f1); \
	free=$$(df -Pm $(TARGET_DIR) | awk 'NR == 2 {print $$4}'); \
	need=$$(( $(TEST_DISK_MB) > built ? $(TEST_DISK_MB) - built : 0 )); \
	if [ "$$free" -lt "$$need" ]; then \
	  echo "make test: not enough disk for the build: $$need MB more needed in $(TARGET_DIR)" \
	    "($(TEST_DISK_MB) MB for a clean run, $$built MB already there), $$free MB free." \
	    "Free some space (cargo clean removes old builds), or set TEST_DISK_MB if you know better." >&2; \
	  exit 1; \
	fi

tools: $(TOOLS_STAMP) node_modules/.installed chromium

# Headless Chromium for the browser tests (cli/tests/browser.rs and local.rs): the Debian
# package, installed with apt when there is none (BATON_CHROMIUM may name another binary).
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
chromium:
	@command -v chromium >/dev/null || command -v chromium-browser >/dev/null || [ -n "$${BATON_CHROMIUM:-}" ] || \
	  { echo "installing chromium (apt-get) for the browser tests"; \
	    $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq --no-install-recommends chromium; }

node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --silent
	touch $@

$(TOOLS_STAMP): requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet -r requirements-dev.txt
	rm -f $(VENV)/.installed-*
	touch $@

fmt-check:
	cargo fmt --all -- --check

clippy:
	cargo clippy --workspace --all-targets --locked -- -D warnings

# The infrastructure checks: the SAM template (cfn-lint) and the generated state machines (valid
# ASL: asl-validator, which cfn-lint does not look inside). That they are up to date, have no
# token wait without a deadline and one per workflow in the template (`baton synth --check`) is
# a test, cli/tests/synth.rs: run here with `cargo run -p`, it would build every crate that uses
# tokio a second time, without the dev-dependencies' features.
# cfn-lint cannot follow the local AWS::Include of the OpenAPI file, so it lints the template as
# CloudFormation sees it after the include (tools/expand-includes.py), and then the
# CloudFormation the SAM transform makes of it (tools/sam-transform.py, samtranslator): the
# roles, event source mappings and API resources AWS would actually create. Last, the policy
# contract's own verdicts on small templates (tools/policy_check_test.py), the template's guards
# on what faces the outside (tools/template_test.py: throttles, access log, queue policies,
# alarms), and the emulator's refusal of other sites' pages and of rebound host names
# (tools/emulator_test.py, a few seconds).
SAM_TEMPLATE := target/sam/template.json
CALLS := target/policy/calls.jsonl

$(SAM_TEMPLATE): template.yaml infra/openapi.yaml tools/sam-transform.py $(TOOLS_STAMP)
	$(VENV)/bin/python tools/sam-transform.py template.yaml $@

lint-infra: tools $(SAM_TEMPLATE)
	$(VENV)/bin/python tools/expand-includes.py template.yaml target/lint/template.yaml
	$(VENV)/bin/cfn-lint target/lint/template.yaml
	$(VENV)/bin/cfn-lint $(SAM_TEMPLATE)
	$(VENV)/bin/openapi-spec-validator infra/openapi.yaml
	node_modules/.bin/asl-validator $(addprefix --json-path ,$(wildcard infra/statemachines/*.asl.json))
	$(VENV)/bin/python -m unittest --quiet tools/policy_check_test.py
	$(VENV)/bin/python -m unittest --quiet tools/template_test.py
	$(VENV)/bin/python -m unittest --quiet tools/emulator_test.py

# The whole workspace's tests, with the emulator on a free loopback port for the ones that
# need it. tools/with-emulator.sh stops the emulator whatever the tests do. The tests are built
# once, then tools/run-tests.py runs the test binaries TEST_JOBS at a time (most of their time
# is waiting: on the emulator, a receipt's lease, the sweeper), each as cargo runs it, each one's
# output whole when it ends. The differential test, the simulation smoke run and the browser
# tests run apart with their output shown: the pairs compared; the schedules run, faults
# injected and checks made, and each planted bug caught; the paths of the screenshots.
# (`--workspace`, not `-p`: the same features as clippy's and the other builds, so nothing is
# built twice.)
# Then the policy contract (tools/policy-check.py): every call the functions made in those tests,
# as the emulator recorded it (the emulators the `baton local` subprocesses of cli/tests/local.rs
# start take BATON_EMULATOR_ARGS too), against their roles in the transformed template; and
# proof that it catches a missing grant (intake without the policy that lets it resume a step).
TEST_JOBS ?= 3
TEST_BINARIES := $(TARGET_DIR)/test-binaries.json
BESIDE := $(TARGET_DIR)/beside-the-tests
unit: test-build run-tests
test-build:
	cargo test --workspace --locked --no-run --message-format=json-render-diagnostics > $(TEST_BINARIES)
run-tests: tools $(SAM_TEMPLATE)
	mkdir -p $(dir $(CALLS)) && rm -f $(CALLS)
	BATON_PYTHON=$(VENV)/bin/python BATON_EMULATOR_ARGS="--record-calls $(abspath $(CALLS))" \
	  tools/with-emulator.sh $(VENV)/bin/python tools/run-tests.py --jobs $(TEST_JOBS) \
	  --times $(TARGET_DIR)/test-times.json \
	  --skip baton_and_moto_agree --skip simulation_smoke_ --skip browser_ \
	  --alone 'pattern_differential baton_and_moto_agree --nocapture' \
	  --alone 'smoke simulation_smoke_ --nocapture --test-threads 1' \
	  --alone 'browser browser_ --nocapture --test-threads 1' \
	  --alone 'local browser_ --nocapture --test-threads 1' < $(TEST_BINARIES)
	$(VENV)/bin/python tools/policy-check.py $(SAM_TEMPLATE) $(CALLS)
	$(VENV)/bin/python tools/policy-check.py $(SAM_TEMPLATE) $(CALLS) \
	  --without IntakeFunction:ResumeStepsPolicy --expect-denied "IntakeFunction states:SendTaskSuccess"

# The scale model (sim/src/scale.rs, docs/SCALE.md): a million workflows through the lifecycle,
# the by_due index as DynamoDB lays it out, unsharded and sharded: peak writes per index
# partition, and what one sweeper tick reads.
scale:
	cargo build --profile sim --locked -p baton-sim --bin baton-scale
	$(TARGET_DIR)/sim/baton-scale $(SCALE_WORKFLOWS) $(SCALE_RATE)

SCALE_WORKFLOWS ?= 1000000
SCALE_RATE ?= 1000

# The simulation at full scale, optimized (profile `sim`; sim/src/main.rs). Prints the schedules run, the
# faults injected by kind, the invariant checks made, and each violation with its seed.
SIM_SCHEDULES ?= 100000
sim:
	cargo build --profile sim --locked -p baton-sim
	$(TARGET_DIR)/sim/baton-sim --schedules $(SIM_SCHEDULES)

run: tools
	cargo build --locked -p baton-cli
	BATON_PYTHON=$(VENV)/bin/python exec $(TARGET_DIR)/debug/baton local

# Figures for `make run`: time to ready (warm build) and idle CPU over 30 s. Not part of `make test`.
measure-local: tools
	cargo build --locked -p baton-cli
	BATON_PYTHON=$(VENV)/bin/python tools/measure-local.sh

# The functions as they ship: cargo-lambda builds each binary as `bootstrap` with the release
# profile (Cargo.toml: fat LTO, one codegen unit, opt-level "s", stripped, panics unwind so
# they reach Lambda as errors) and zips it into <target>/lambda/<function>/bootstrap.zip.
# x86_64 only here: this machine has no aarch64 standard library (template.yaml deploys arm64;
# docs/DEPLOYING.md, "arm64 or x86_64", has the one-line change). cargo-lambda links with the zig that
# its PyPI wheel brings, for Lambda's glibc.
PACKAGE_VENV := .venv-package
PACKAGE_STAMP := $(PACKAGE_VENV)/.installed-$(shell sha1sum requirements-package.txt | cut -c1-12)
FUNCTIONS := baton-intake baton-progress baton-callback baton-sweeper
LAMBDA_TARGET ?= x86_64-unknown-linux-gnu

$(PACKAGE_STAMP): requirements-package.txt
	$(PYTHON) -m venv $(PACKAGE_VENV)
	$(PACKAGE_VENV)/bin/pip install --quiet -r requirements-package.txt
	rm -f $(PACKAGE_VENV)/.installed-*
	touch $@

package: $(PACKAGE_STAMP)
	PATH="$(abspath $(PACKAGE_VENV))/bin:$$PATH" cargo lambda build --locked --release \
	  --target $(LAMBDA_TARGET) --output-format zip $(addprefix -p ,$(FUNCTIONS))
	@for f in $(FUNCTIONS); do \
	  printf '%-16s %8.2f MB zipped  (%s)\n' $$f \
	    "$$(stat -c %s $(TARGET_DIR)/lambda/$$f/bootstrap.zip | awk '{print $$1/1000000}')" $(TARGET_DIR)/lambda/$$f/bootstrap.zip; \
	done
	SAM_CLI_TELEMETRY=0 $(PACKAGE_VENV)/bin/sam validate --lint --template template.yaml --region us-east-1

# The zips from `make package`, started 20 times each under the Runtime API harness
# (harness/src/bin/function-bench.rs) with the emulator up for the init warm-up.
# The hot path first: divan, release profile (what ships), per-item times and items/s.
BENCH_SPAWNS ?= 20
bench: package tools
	cargo bench --locked -p baton-core --bench hot_path
	cargo build --locked --profile sim -p baton-lambda-harness --bin function-bench
	cargo build --locked --release -p baton-lambda-harness --bin hello-lambda
	BATON_PYTHON=$(VENV)/bin/python tools/with-emulator.sh bash -c \
	  '$(TARGET_DIR)/sim/function-bench $(TARGET_DIR)/lambda "$$BATON_TEST_ENDPOINT" $(TARGET_DIR)/release/hello-lambda $(BENCH_SPAWNS)'

# The local stack under load (tests/src/bin/soak.rs; docs/PERFORMANCE.md, "The local stack under
# load"): SOAK_WORKFLOWS workflows through `baton local` (the same binary as `make run`), with
# duplicated and early deliveries, 32 task workers and the emulator stopped for 15 s; then the
# proof that nothing was lost or doubled, workflows per second, CPU per process and the
# emulator's calls per workflow. Not part of `make test`.
SOAK_WORKFLOWS ?= 1000
soak: tools
	cargo build --locked -p baton-cli -p baton-tests --bin baton --bin baton-soak
	BATON_PYTHON=$(VENV)/bin/python BATON_BIN=$(TARGET_DIR)/debug/baton $(TARGET_DIR)/debug/baton-soak $(SOAK_WORKFLOWS)

# What a workflow costs: COST_WORKFLOWS two-step workflows, then as many with a parallel group, on the local stack with the emulator
# counting every call (tests/src/bin/cost.rs; the model and prices: docs/COST.md).
COST_WORKFLOWS ?= 20
cost: tools
	cargo build --locked -p baton-tests --bin baton-cost
	BATON_PYTHON=$(VENV)/bin/python BATON_EMULATOR_ARGS=--count-calls \
	  tools/with-emulator.sh $(TARGET_DIR)/debug/baton-cost $(COST_WORKFLOWS)

clean:
	cargo clean
	rm -rf $(VENV) $(PACKAGE_VENV)
