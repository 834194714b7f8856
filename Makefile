# Every target sets itself up: a fresh machine needs nothing but Python >= 3.11.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test demo lint typecheck bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python tools/line_budget.py

typecheck: $(STAMP)
	$(BIN)/mypy

test: lint typecheck $(STAMP)
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(BIN)/python -m pytest -q -n auto --dist loadfile

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
