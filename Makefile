# Two commands a user needs: `make demo` and `make test`. Each creates .venv and
# installs what it needs on first use (and again when pyproject.toml changes).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test check lint typecheck pytest bench clean

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

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest

bench: $(STAMP)
	$(BIN)/python bench/cq_parse.py

clean:
	rm -rf $(VENV) .demo .pytest_cache .mypy_cache .ruff_cache build *.egg-info
