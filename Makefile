# Every target sets itself up: a fresh machine needs nothing but Python >= 3.11.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup test pytest test-fast demo docs lint typecheck bench clean swagger-ui

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

# LangGraph's pinned venv: tests/test_langgraph_ports.py runs its programs there too.
PEERS := .bench-venvs/langgraph/.installed
$(PEERS): bench/venvs.py | $(STAMP)
	$(BIN)/python bench/venvs.py langgraph
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python tools/line_budget.py

typecheck: $(STAMP)
	$(BIN)/mypy

# Lint, type check and the tests run side by side (their output kept whole line by line): the
# tests spend much of their time waiting on subprocesses, sockets and fsyncs, which leaves
# room for mypy. One test worker per core (WORKERS=N overrides): two per core, measured on
# this 2-core machine shared with other jobs (load 11-13), used 30% more CPU than one per core
# for the same tests (their polling waits grow with the contention) and finished later.
# A file's tests stay on one worker (loadfile): the kill-coverage checks of test_crash_recovery
# and test_crash_many read what every test of their file found in the same process, and are
# skipped when worksteal or load spread them (measured: no faster on 2 cores either). Files
# go out in collection order, files with slow tests first (tests/conftest.py); xdist's own
# reordering (most tests first) would send the longest files, which hold few tests, last.
WORKERS ?= auto
test: $(STAMP) $(PEERS)
	$(MAKE) --no-print-directory --output-sync=line -j3 lint typecheck pytest

pytest: $(STAMP) $(PEERS)
	AGENTLOG_PEERS=required HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(BIN)/python -m pytest -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder

# The edit loop: no lint, no type check, no slow tests (those two files are all slow, so the
# tests may be spread one by one).
test-fast: $(STAMP)
	HYPOTHESIS_PROFILE=$${HYPOTHESIS_PROFILE:-ci} $(BIN)/python -m pytest -q -n auto --dist worksteal -m "not slow"

demo: $(STAMP)
	$(BIN)/agentlog demo --db agentlog.db

# The site from docs/ and the docstrings, offline, every warning an error, into site/.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

# `make bench QUICK=1`: the smaller versions, one round of the side-by-side (about 7 minutes
# on a 2-core VM, the peers' first install included).
bench: $(STAMP)
	mkdir -p bench/results
	set -o pipefail; for b in append replay replay_test steps durability timetravel show snapshots callbacks floor instructions runtime serve testing workers models postgres; do \
		$(BIN)/python bench/$$b.py $(if $(QUICK),--quick,) | tee bench/results/$$b.json || exit 1; \
	done
	$(BIN)/python bench/compare.py $(if $(QUICK),--quick,)

clean:
	rm -rf $(VENV) site .pytest_cache .hypothesis .mypy_cache .ruff_cache agentlog.db*

# Swagger UI, which /docs serves from the package (offline): swagger-ui-dist from the npm
# registry into actors/http/ui/swagger/ (SWAGGER_UI=x.y.z for another version than VERSION's).
swagger-ui:
	bash tools/swagger_ui.sh $(SWAGGER_UI)
