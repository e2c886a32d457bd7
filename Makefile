# One command per habit; CI (.ci/run) calls these same targets.
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
VENV_PYTHON := $(VENV)/bin/python
# Rewritten after each successful install, so `venv` re-runs only when pyproject.toml is newer.
VENV_STAMP := $(VENV)/.installed-from-pyproject

# The tests create their own databases through this admin connection.
TEST_ADMIN_URL_DEFAULT := postgresql://postgres@127.0.0.1:5432/postgres
export JOBS_TEST_ADMIN_URL ?= $(or $(DATABASE_URL),$(TEST_ADMIN_URL_DEFAULT))

.PHONY: help venv generate lint format test run bench system-deps clean

help: ## List the targets
	@echo "Usage: make TARGET"
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

venv: $(VENV_STAMP) ## Create .venv and install the project with its dev tools (again when pyproject.toml changes)

$(VENV_STAMP): pyproject.toml
	@test -x $(VENV_PYTHON) || $(PYTHON) -m venv $(VENV)
	$(VENV_PYTHON) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $@

generate: venv ## Regenerate the gRPC stubs in proto/jobs/v1 and docs/API.md from the .proto files
	PYTHON=$(VENV_PYTHON) scripts/generate_stubs.sh
	$(VENV_PYTHON) scripts/api_docs.py

lint: venv ## ruff (lint and format check), mypy (config in pyproject.toml), and import-linter's layer contracts
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

format: venv ## Apply ruff's formatter and its autofixable lint rules
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

test: venv lint ## lint, then pytest (PostgreSQL from JOBS_TEST_ADMIN_URL, else DATABASE_URL, else local :5432)
	@echo "tests use admin URL $(JOBS_TEST_ADMIN_URL)"
	$(VENV)/bin/pytest tests

run: venv ## The API and two workers on loopback, over DATABASE_URL or an embedded PostgreSQL in .dev/
	$(VENV_PYTHON) scripts/dev_stack.py

bench: venv ## Throughput, latency and memory figures against their targets: a table, then one JSON line
	@echo "benchmarks use admin URL $(JOBS_TEST_ADMIN_URL) (BENCH_ONLY, BENCH_JOBS, BENCH_SOAK_SECONDS: see benchmarks/__main__.py)"
	BENCH_ADMIN_URL=$${BENCH_ADMIN_URL:-$(JOBS_TEST_ADMIN_URL)} $(VENV_PYTHON) -m benchmarks

system-deps: ## Install what the tests need from the OS (promtool); run as root
	@if command -v promtool >/dev/null; then \
		echo "promtool present: $$(command -v promtool)"; \
	else \
		apt-get update; \
		DEBIAN_FRONTEND=noninteractive apt-get install --yes --no-install-recommends prometheus; \
	fi

clean: ## Remove the venv, caches, build output and .dev/ (the embedded database's data)
	rm -rf $(VENV) .dev build dist *.egg-info .pytest_cache .ruff_cache .import_linter_cache .mypy_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
