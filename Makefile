# Two commands a user needs: `make demo` and `make test`. Each creates .venv and
# installs what it needs on first use (and again when pyproject.toml changes).
PYTHON ?= python3
# bash: `make bench` pipes each script through tee and must fail when a script fails.
SHELL  := /bin/bash
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Keep compiled modules (__pycache__/) even where the environment says not to: without
# them every `tieredstore` process compiles the package again (a fifth of a second of
# CPU), and the suite starts hundreds of them.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: help demo test quick fmt lint typecheck pytest docs bench clean
# `make` alone lists the targets.
.DEFAULT_GOAL := help

# The native gather (tieredstore/hot/_gather.c) is compiled by the install: a change to it
# installs again.
$(STAMP): pyproject.toml tieredstore/hot/_gather.c
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (set PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

## help: list these targets with what each does (from their `## target:` comments)
help:
	@awk '/^## [a-z-]+:/ { sub(/^## /, ""); split($$0, a, ":"); t = a[1]; sub(/^[^:]*: */, ""); \
	  printf "  %-10s %s\n", t, $$0; next } /^##   / { sub(/^## */, ""); printf "  %-10s %s\n", "", $$0 }' \
	  $(firstword $(MAKEFILE_LIST))

## demo: synthesize a store, tier it to a local cold directory, verify it with Spark
demo: $(STAMP)
	$(BIN)/tieredstore demo --workdir .demo

## test: the whole suite (format, lint, types, every test incl. broker and Spark)
test: $(STAMP) lint typecheck pytest

## quick: lint, types and the tests that need no broker, no Spark and no long run
##   (under 3 minutes here; CONTRIBUTING.md). `make test` is still what CI runs.
quick: $(STAMP) lint typecheck
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup -m "not broker and not spark and not slow" \
		--durations=5 --durations-min=1.0

## fmt: format the code and apply ruff's safe fixes (what `make lint` then checks)
fmt: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

## lint: ruff format --check, ruff check, the layer contracts (lint-imports) and the
##   generated settings docs being current (what `make docs` writes)
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m tieredstore.settings.docs --check

## typecheck: mypy --strict over the tieredstore package (its five folders), tests and bench
typecheck: $(STAMP)
	$(BIN)/mypy

# Two workers: most of the suite's wall time is spent waiting on JVMs and subprocesses.
## pytest: every test, on PYTEST_WORKERS workers (2; 0 runs them in one process)
PYTEST_WORKERS ?= 2
pytest: $(STAMP)
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=30 --durations-min=20

## docs: rewrite docs/configuration.md's settings tables and docs/sidecar.toml from
##   the declaration of the settings (tieredstore/settings/declaration.py)
docs: $(STAMP)
	$(BIN)/python -m tieredstore.settings.docs

## bench: every benchmark at its default size, one after another; the output goes to
##   bench/results/latest.log and the table at the top of BENCHMARKS.md is rewritten from it
BENCHES := tiering_posix tiering_s3 verify_offsets verify_content verifier_throughput verify_fleet fingerprint compression analytics_scan lag cq_parse restore serving serving_consumer requests
BENCH_LOG := bench/results/latest.log
bench: $(STAMP)
	@set -e -o pipefail; rm -f $(BENCH_LOG).tmp; for b in $(BENCHES); do \
	  echo "== bench/$$b.py (commit $$(git rev-parse --short HEAD), $$(date -u +%FT%TZ))" | tee -a $(BENCH_LOG).tmp; \
	  $(BIN)/python bench/$$b.py | tee -a $(BENCH_LOG).tmp; done
	mv $(BENCH_LOG).tmp $(BENCH_LOG)
	$(BIN)/python bench/results_table.py $(BENCH_LOG) --write BENCHMARKS.md

## clean: remove the venv, the demo and the tools' caches
clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache build *.egg-info
	rm -f tieredstore/hot/_gather.*.so
