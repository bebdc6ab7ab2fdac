# Two commands do all the set-up on a fresh machine:
#   make test   - create .venv, install, lint, type-check, run the tests
#   make chat   - create .venv, install what the chat needs (not the dev tools), start
#                 the CLI chat (configure a model first: .venv/bin/hermes init, or see
#                 config.example.yaml)
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

$(RUN_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

.PHONY: install test lint typecheck pytest bench chat
install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/hadolint deploy/docker/Dockerfile

typecheck: $(STAMP)
	$(BIN)/mypy

# one worker per CPU, idle workers taking tests queued on busy ones (the long ones
# would otherwise leave a tail); `.venv/bin/pytest FILE` runs one file in one process
pytest: $(STAMP)
	$(BIN)/pytest -n auto --dist worksteal

test: lint typecheck pytest

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
