# Every target sets itself up: a fresh machine needs nothing but Python >= 3.11.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test test-fast demo lint typecheck bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

# The slow tests (real subprocesses, many hypothesis examples) are spread over the workers by
# worksteal: an idle worker takes queued tests from a busy one, so one long file no longer
# sets the suite's length as it did under loadfile.
test: lint typecheck $(STAMP)
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(BIN)/python -m pytest -q -n auto --dist worksteal

# The edit loop: no lint, no type check, no slow tests.
test-fast: $(STAMP)
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(BIN)/python -m pytest -q -n auto --dist worksteal -m "not slow"

demo: $(STAMP)
	$(BIN)/agentlog demo --db agentlog.db

# `make bench QUICK=1`: the smaller versions, one round of the side-by-side (about 7 minutes
# on a 2-core VM, the peers' first install included).
bench: $(STAMP)
	mkdir -p bench/results
	set -o pipefail; for b in append replay steps timetravel show snapshots callbacks floor runtime serve testing workers models postgres; do \
		$(BIN)/python bench/$$b.py $(if $(QUICK),--quick,) | tee bench/results/$$b.json || exit 1; \
	done
	$(BIN)/python bench/compare.py $(if $(QUICK),--quick,)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .mypy_cache .ruff_cache agentlog.db*
