# One command per habit; CI (.ci/run) calls these same targets.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
# Rewritten after each successful install, so `venv` re-runs only when pyproject.toml is newer.
VENV_STAMP := $(VENV)/.installed-from-pyproject
# The wheels a fresh venv installs the SDK from in tests/test_sdk_distribution.py, offline: the SDK's
# dependencies (at the versions .venv has), setuptools for building from the sdist, and pytest.
SDK_WHEELHOUSE := $(VENV)/sdk-wheelhouse
SDK_WHEELHOUSE_STAMP := $(SDK_WHEELHOUSE)/.downloaded
# npm ci rewrites node_modules/ from package-lock.json; the stamp makes it re-run only when the lock changes.
NODE_STAMP := node_modules/.installed-from-lock
# PgQueuer, the peer `make bench` runs beside this service, lives in a venv of its own.
BENCH_VENV := .bench-venv
BENCH_VENV_STAMP := $(BENCH_VENV)/.installed-from-requirements
BENCH_REQUIREMENTS := benchmarks/pgqueuer-requirements.txt

# pytest-xdist workers for `make test` and `make test-fast` (0: one process); each has its own
# databases, login roles and ports. Four on two cores: the tests wait on services and the database more
# than they compute (tests/README.md, "Time"). The slowest tests are listed after each run.
PYTEST_WORKERS ?= 4
PYTEST_DURATIONS ?= 25
# The tests run on a PostgreSQL server of their own, in memory (tests/suite_server.py), unless
# JOBS_TEST_ADMIN_URL names a server's admin connection; the benchmarks run on the machine's server.
TEST_ADMIN_URL_DEFAULT := postgresql://postgres@127.0.0.1:5432/postgres
BENCH_URL = $(or $(BENCH_ADMIN_URL),$(JOBS_TEST_ADMIN_URL),$(DATABASE_URL),$(TEST_ADMIN_URL_DEFAULT))
TESTS_SERVER = $(if $(JOBS_TEST_ADMIN_URL),the server at $(JOBS_TEST_ADMIN_URL),a PostgreSQL server of their own (tests/suite_server.py))
export JOBS_TEST_ADMIN_URL

.PHONY: help venv sdk-wheelhouse node-deps generate lint format test test-fast run dev-worker bench chaos system-deps clean

help: ## List the targets
	@echo "Usage: make TARGET"
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

venv: $(VENV_STAMP) ## Create .venv and install the project, its SDK and its dev tools (again when a pyproject.toml changes)

# The SDK (sdk/python) is installed in the same command, so that pip takes the service's dependency on it
# from the checkout.
$(VENV_STAMP): pyproject.toml sdk/python/pyproject.toml
	@test -x $(VENV_PYTHON) || $(PYTHON) -m venv $(VENV)
	$(VENV_PYTHON) -m pip install --quiet --disable-pip-version-check -e ./sdk/python -e '.[dev]'
	@touch $@

sdk-wheelhouse: $(SDK_WHEELHOUSE_STAMP) ## Download the wheels the SDK's fresh-venv test installs from (into .venv/sdk-wheelhouse)

$(SDK_WHEELHOUSE_STAMP): $(VENV_STAMP) sdk/python/pyproject.toml
	$(VENV_PYTHON) -m pip freeze --exclude-editable | grep '==' > $(VENV)/sdk-constraints.txt
	$(VENV_PYTHON) -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
		--dest $(SDK_WHEELHOUSE) --constraint $(VENV)/sdk-constraints.txt ./sdk/python setuptools pytest
	@touch $@

node-deps: $(NODE_STAMP) ## Install buf and the Node client test's gRPC libraries from package-lock.json (npm ci)

# --ignore-scripts: none of these packages needs its install script (buf's only speeds up its launcher).
$(NODE_STAMP): package.json package-lock.json
	npm ci --ignore-scripts --no-audit --no-fund
	@touch $@

generate: venv ## Regenerate the gRPC stubs in proto/jobs/v1 and docs/API.md from the .proto files
	PYTHON=$(VENV_PYTHON) scripts/generate_stubs.sh
	$(VENV_PYTHON) scripts/api_docs.py

lint: venv node-deps ## ruff (lint and format check), mypy, import-linter's layer contracts, buf lint and buf breaking
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	scripts/check_protos.sh

format: venv ## Apply ruff's formatter and its autofixable lint rules
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: venv sdk-wheelhouse node-deps lint ## lint, then every test tier (on a PostgreSQL server of their own, or JOBS_TEST_ADMIN_URL's)
	@echo "tests use $(TESTS_SERVER)"
	$(VENV)/bin/pytest tests -n $(PYTEST_WORKERS) --maxschedchunk 1 --durations=$(PYTEST_DURATIONS)

test-fast: venv ## The tiers that run no service process: tests/unit and tests/integration (no lint; `make test` proves everything)
	@echo "tests use $(TESTS_SERVER)"
	$(VENV)/bin/pytest tests/unit tests/integration -n $(PYTEST_WORKERS) --maxschedchunk 1 --durations=$(PYTEST_DURATIONS)

run: venv ## The API and two workers on loopback, over DATABASE_URL or an embedded PostgreSQL in .dev/
	$(VENV_PYTHON) scripts/dev_stack.py

dev-worker: venv ## One more worker with your kinds (MODULES=my_jobs) beside `make run`, restarted when their files change
	$(VENV_PYTHON) scripts/dev_worker.py $(if $(MODULES),--modules $(MODULES))

bench: venv $(BENCH_VENV_STAMP) ## Throughput, latency and memory figures against their targets, PgQueuer beside us: a table, then one JSON line
	@echo "benchmarks use admin URL $(BENCH_URL) (BENCH_ONLY, BENCH_JOBS, BENCH_REPEAT, BENCH_SOAK_SECONDS: see benchmarks/__main__.py)"
	BENCH_ADMIN_URL=$(BENCH_URL) BENCH_PEER_PYTHON=$(BENCH_VENV)/bin/python $(VENV_PYTHON) -m benchmarks

chaos: venv ## The real services under random faults for CHAOS_SECONDS (300; CHAOS_SEED replays the plan), then the checker's verdict as one JSON line (docs/CHAOS.md)
	$(VENV_PYTHON) -m chaos

$(BENCH_VENV_STAMP): $(BENCH_REQUIREMENTS)
	@test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r $(BENCH_REQUIREMENTS)
	@touch $@

system-deps: ## Install what the tests and benchmarks need from the OS (promtool, pg_autoctl, pgbouncer, node and npm, chromium, valgrind) when missing; run as root
	@missing=""; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	command -v pg_autoctl >/dev/null || missing="$$missing postgresql-15-auto-failover"; \
	command -v pgbouncer >/dev/null || test -x /usr/sbin/pgbouncer || missing="$$missing pgbouncer"; \
	command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v valgrind >/dev/null || missing="$$missing valgrind"; \
	if [[ -z "$$missing" ]]; then \
		echo "system packages present: promtool, pg_autoctl, pgbouncer, node $$(node --version), npm $$(npm --version), chromium, valgrind"; \
	else \
		apt-get update; \
		DEBIAN_FRONTEND=noninteractive apt-get install --yes --no-install-recommends $$missing; \
	fi

clean: ## Remove the venv, caches, build output, .dev/ (the embedded database's data) and .chaos/ (chaos runs' histories)
	rm -rf $(VENV) $(BENCH_VENV) node_modules .dev .chaos build dist *.egg-info .pytest_cache .ruff_cache .import_linter_cache .mypy_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
