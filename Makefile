# One target per developer habit. Everything runs from the .venv at the repo root.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_VERSION_CHECK := 1

# The CDK CLI, pinned: npm's `latest` (3.x) refuses aws-cdk-lib 2.x. STAGE picks cdk.json's stage block.
CDK := npx --yes aws-cdk@2.1148.1
STAGE ?= dev

.PHONY: install iam-tools iam-check test test-fast test-gpu mutation fuzz lint mypy format demo bench bench-trainer bench-rlhf bench-trainer-types bench-sweeps sim-placement bench-teams synth bootstrap deploy openapi architectures clean up dashboard browser bench-dashboard

install: $(STAMP) dashboard browser iam-tools

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first and pinned exactly: 2.13.0 is the CPU wheel this machine carries on disk.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	# deepspeed ships only an sdist whose setup.py imports torch: build it against the torch above, not in
	# an isolated build env (which would build it blind to torch), and without precompiled ops.
	$(BIN)/python -m pip install --quiet setuptools wheel
	DS_BUILD_OPS=0 $(BIN)/python -m pip install --quiet --no-build-isolation deepspeed==$(shell sed -n 's/^ *"deepspeed==\(.*\)",/\1/p' pyproject.toml)
	# playwright (dev) drives the distribution's chromium (`make browser`): never download a browser build.
	PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 $(BIN)/python -m pip install --quiet -e ".[all]"
	rm -f $(VENV)/.installed-*
	touch $@

# What CI runs (.ci/run): the lint, then the whole suite, then the IAM check of the calls it recorded.
# The suite on TEST_WORKERS processes (pytest-xdist; `auto`: one per core), each test file on one worker so that a
# module's plane starts once. Most tests are single-threaded Python: a lone pytest leaves the second core of a
# 2-core host idle (docs/TESTING.md, "CI wall time"). TEST_WORKERS=0 runs them in this one process.
TEST_WORKERS ?= auto
test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile
	# Every AWS call the suite recorded, evaluated against the synthesized stack: a denied call, or a control-plane
	# call outside any role, fails `make test` (docs/DEPLOY.md).
	$(MAKE) --no-print-directory iam-check

# Every AWS call the last pytest run recorded (build/iam/calls.jsonl), evaluated against the synthesized
# stack's role policies by @cloud-copilot/iam-simulate (tools/iam; docs/DEPLOY.md). Fails on a denied call.
iam-check: iam-tools
	$(BIN)/python scripts/iam_check.py

# tools/iam's pinned IAM evaluator (package-lock.json), installed once per lock change.
iam-tools:
	cd tools/iam && { [ node_modules/.installed -nt package-lock.json ] || { npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; }; }

# The web dashboard: dashboard/ (TypeScript, package-lock.json) builds into dashboard_assets/static, which is
# committed (a pip install without node still carries it; a test checks it matches the source). Without
# node this keeps the committed build.
dashboard:
	@if command -v npm >/dev/null 2>&1; then \
		cd dashboard && { [ node_modules/.installed -nt package-lock.json ] || { npm ci --no-audit --no-fund --loglevel=error && touch node_modules/.installed; }; } \
			&& npm run build; \
	else \
		echo "make dashboard: no node/npm here: keeping the committed build in dashboard_assets/static"; \
	fi

# The browser the dashboard tests drive: Debian's chromium and its driver (root installs them once).
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver; \
	else \
		echo "make browser: /usr/bin/chromium is missing; install the distribution's chromium and chromium-driver (as root)"; \
	fi

test-fast: install
	$(BIN)/python -m pytest -m "not e2e and not slow"

# The gpu-marked tests on a CUDA host, with what the GPU paths need (the `gpu` extra: bitsandbytes for QLoRA).
# On a host without CUDA this fails (tests/conftest.py), it does not skip its way to green.
test-gpu: install
	$(BIN)/python -m pip install --quiet bitsandbytes==$(shell sed -n 's/^gpu = \["bitsandbytes==\(.*\)"\]/\1/p' pyproject.toml)
	TRAINPLANE_GPU_TESTS=1 $(BIN)/python -m pytest --no-cov -rA -m gpu

# mutmut over the modules that guard data, one module at a time with only the tests that cover it; prints
# killed / survived / timeout per module (docs/TESTING.md). Not part of `make test`. MUTATION_MODULES picks
# some (names in scripts/mutation.py); MUTATION_BUDGET_S stops starting modules after that many seconds;
# MUTATION_CHILDREN mutants run at once (default: the CPU count); MUTATION_ONLY runs a few (a smoke run).
MUTATION_MODULES ?=
MUTATION_BUDGET_S ?= 5400
mutation: install
	MUTATION_BUDGET_S=$(MUTATION_BUDGET_S) $(BIN)/python scripts/mutation.py $(MUTATION_MODULES)

# Schemathesis over every operation of schemas/openapi.json against `trainplane up` (docs/TESTING.md).
# `make test` runs it with a small budget and a fixed seed; this is the long run: FUZZ_EXAMPLES cases per
# operation in the fuzzing phase, a new seed each time (printed; FUZZ_SEED=N replays one).
FUZZ_EXAMPLES ?= 500
FUZZ_SEED ?= random
fuzz: install
	TRAINPLANE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) TRAINPLANE_FUZZ_SEED=$(FUZZ_SEED) $(BIN)/python -m pytest --no-cov -m fuzz -rA tests/e2e/test_fuzz_api.py tests/e2e/test_fuzz_rules.py

# Every package: the control plane, the client, local mode, the CDK app, the trainer, scripts and examples.
MYPY_PATHS := schemas functions trainplane localmode infra trainer_image/trainer scripts examples
# mypy's incremental cache lives outside the clone, so a fresh clone (CI) reuses the last run's instead of
# checking torch, transformers & co. from scratch (minutes on 2 cores; docs/TESTING.md). mypy re-hashes
# every file whose path or mtime differs from the cache's and rechecks what changed: the result is the
# cold run's. One file per module (not the SQLite cache), so concurrent runs from several clones are safe.
# MYPY_CACHE=.mypy_cache keeps it in the clone; deleting the folder forces a cold run.
MYPY_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/trainplane/mypy
MYPY := $(BIN)/mypy --cache-dir "$(MYPY_CACHE)" --no-sqlite-cache

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MYPY) $(MYPY_PATHS)
	PYTHONPATH=trainer_image $(BIN)/lint-imports

mypy: install
	$(MYPY) $(MYPY_PATHS)

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

openapi: install
	$(BIN)/python -m functions.handlers.openapi > schemas/openapi.json

architectures: install  # schemas/model_architectures.json from the installed transformers (after upgrading it)
	$(BIN)/python scripts/gen_model_architectures.py

demo: install
	$(BIN)/python examples/demo.py

bench: install
	$(BIN)/python scripts/bench_api.py
	$(BIN)/python scripts/bench_lifecycle.py

bench-trainer: install
	$(BIN)/python scripts/bench_trainer.py

bench-rlhf: install
	$(BIN)/python scripts/bench_rlhf.py

# Each training type: our trainer vs plain transformers Trainer / trl, side by side (docs/BENCHMARKS.md).
bench-trainer-types: install
	$(BIN)/python scripts/bench_trainer_types.py

bench-dashboard: install
	$(BIN)/python scripts/bench_dashboard.py

# The sweep controller's decision time and local mode's trial-to-trial turnaround (docs/BENCHMARKS.md, "Sweeps").
bench-sweeps: install
	$(BIN)/python scripts/bench_sweeps.py

# Placement against the offline optimum on 1,000 seeded capacity traces (docs/BENCHMARKS.md, "Placement").
sim-placement: install
	$(BIN)/python scripts/sim_placement.py

# Teams (issue 24): the scheduler's decision time with 10,000 queued jobs across 20 teams, then the 7-day
# fair-share simulator (3 teams x 2 GPU types: shares, Jain's index, reclaims) (docs/BENCHMARKS.md, "Teams").
bench-teams: install
	$(BIN)/python scripts/bench_teams.py
	$(BIN)/python scripts/sim_teams.py

# Offline: no AWS credentials, no Docker (docs/DEPLOY.md). SYNTH_ARGS: more -c key=value.
synth: install
	$(BIN)/python infra/app.py --outdir cdk.out -c stage=$(STAGE) $(SYNTH_ARGS)

# Once per account and region (needs AWS credentials).
bootstrap: install
	$(CDK) bootstrap --app "$(BIN)/python infra/app.py" -c stage=$(STAGE) $(DEPLOY_ARGS)

# Needs AWS credentials and a Docker daemon (the trainer image is built here unless -c trainer_image_uri=...).
deploy: install
	$(CDK) deploy --app "$(BIN)/python infra/app.py" -c stage=$(STAGE) $(DEPLOY_ARGS)
	# The web dashboard's files into its bucket (skipped by stacks deployed with -c dashboard=false).
	$(BIN)/python -m infra.publish_dashboard --stack Trainplane-$(STAGE) --if-deployed

up: install
	$(BIN)/trainplane up --state-dir .state --allow-dir examples

clean:
	rm -rf $(VENV) cdk.out .pytest_cache .mypy_cache .ruff_cache .coverage
