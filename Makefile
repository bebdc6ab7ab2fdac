# Two commands do all the set-up on a fresh machine:
#   make test   - create .venv, install, lint, type-check, run the tests
#   make chat   - create .venv, install what the chat needs (not the dev tools; with
#                 the local multilingual embeddings model, so search finds meaning out
#                 of the box), start the CLI chat (configure a model first:
#                 .venv/bin/hermes init, or see config.example.yaml)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
# every install takes the exact versions pinned here (`make lock` refreshes them)
CONSTRAINTS := requirements/constraints.txt

$(RUN_STAMP): pyproject.toml $(CONSTRAINTS)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c $(CONSTRAINTS) -e '.[local-embeddings,web]'
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(BIN)/pip install --quiet -c $(CONSTRAINTS) -e '.[dev]'
	touch $(STAMP)

.PHONY: install test lint typecheck docs pytest bench chat lock
install: $(STAMP)

# the pinned versions, for every Python >= 3.11 and platform, of the base dependencies and
# every extra but the benchmarks' (which would pull a CUDA torch); after a change to the
# ranges in pyproject.toml, or to take newer releases: make lock (then make test)
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --universal --python-version 3.11 --extra dev \
	    --no-header --quiet --upgrade -o $(CONSTRAINTS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint deploy/docker/Dockerfile

typecheck: $(STAMP)
	$(BIN)/mypy

# two workers per CPU (most tests wait on processes, sockets and the database: one per
# CPU left the CPUs half idle), at most 8 (each holds PostgreSQL connections); idle
# workers take tests queued on busy ones, the long ones queued first (tests/conftest.py);
# `.venv/bin/pytest FILE` runs one file in one process; `make pytest WORKERS=N` sets it;
# the 25 slowest tests are listed at the end (what to look at to keep the suite short)
WORKERS ?= $(shell n=$$(( $$(nproc) * 2 )); [ $$n -gt 8 ] && n=8; echo $$n)
pytest: $(STAMP)
	$(BIN)/pytest -n $(WORKERS) --dist worksteal --durations=25

# the documentation site (mkdocs.yml, docs/): a broken link or a page left out fails it
# (not --quiet: it hides the warnings that --strict fails on)
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir .venv/site

test: lint typecheck docs pytest

# exit 1 or 2: Hermes has said what is wrong (no model configured, say); make adds nothing
chat: $(RUN_STAMP)
	@$(BIN)/hermes chat || [ $$? -le 2 ]

bench: $(STAMP)
	$(BIN)/python bench/memory_ops.py
	$(BIN)/python bench/memory_contention.py
	$(BIN)/python bench/scan_corpus.py
	$(BIN)/python bench/turn_overhead.py
	$(BIN)/python bench/consolidation.py
	$(BIN)/python bench/gateway_throughput.py
	$(BIN)/python bench/cold_start.py
	$(BIN)/python bench/cjk_recall.py
