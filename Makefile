# Two commands a user needs: `make demo` and `make test`. Each creates .venv and
# installs what it needs on first use (and again when pyproject.toml changes).
PYTHON ?= python3
# bash: `make bench` pipes each script through tee and must fail when a script fails.
SHELL  := /bin/bash
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test quick check lint typecheck pytest bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required (set PYTHON=python3.11)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

## demo: synthesize a store, tier it to a local cold directory, verify it with Spark
demo: $(STAMP)
	$(BIN)/tieredstore demo --workdir .demo

## test: the whole suite (format, lint, types, every test incl. broker and Spark)
test: $(STAMP) lint typecheck pytest

## quick: lint, types and the tests that need no broker, no Spark and no long run
## (under 2 minutes here; CONTRIBUTING.md). `make test` is still what CI runs.
quick: $(STAMP) lint typecheck
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup -m "not broker and not spark and not slow" \
		--durations=5 --durations-min=1.0

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# Two workers: most of the suite's wall time is spent waiting on JVMs and subprocesses.
# PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 2
pytest: $(STAMP)
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup

## bench: every benchmark at its default size, one after another; the output goes to
## bench/results/latest.log and the table at the top of BENCHMARKS.md is rewritten from it
BENCHES := tiering_posix tiering_s3 verify_offsets verify_content verifier_throughput verify_fleet analytics_scan lag cq_parse restore serving serving_consumer
BENCH_LOG := bench/results/latest.log
bench: $(STAMP)
	@set -e -o pipefail; rm -f $(BENCH_LOG).tmp; for b in $(BENCHES); do \
	  echo "== bench/$$b.py (commit $$(git rev-parse --short HEAD), $$(date -u +%FT%TZ))" | tee -a $(BENCH_LOG).tmp; \
	  $(BIN)/python bench/$$b.py | tee -a $(BENCH_LOG).tmp; done
	mv $(BENCH_LOG).tmp $(BENCH_LOG)
	$(BIN)/python bench/results_table.py $(BENCH_LOG) --write BENCHMARKS.md

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache build *.egg-info
