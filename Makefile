# Two commands: `make run` serves the demo, `make test` runs lint and every test.
# Both install what they need first (a pinned uv, then the locked requirements).
.DEFAULT_GOAL := help
PYTHON ?= python3
PORT ?= 8000
VENV := .venv
BENCH_VENV := .venv-bench
# The OpenAI Agents SDK's own venv: its package is named `agents`, like the runtime here.
OAI_VENV := .venv-openai-agents
TOOLS := .tools
UV := $(TOOLS)/bin/uv
PY := $(VENV)/bin/python
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# The tests run in parallel (pytest-xdist), each worker on a test database, channel prefix
# and block of ports of its own (tests/conftest.py, tests/processes.py). Many tests mostly
# wait on processes and Chromium, so more workers than cores pays; WORKERS=1 to debug.
WORKERS ?= 3
# loadgroup: tests spread one by one, except a module that marks itself xdist_group
# (one server for the module) stays on one worker.
PYTEST := $(PY) -m pytest -n $(WORKERS) --dist loadgroup
# Never download an interpreter: use the machine's python3.
export UV_PYTHON_DOWNLOADS := never
export UV_NO_PROGRESS := 1
# Installed packages are compiled to bytecode once, as they are installed: where the
# environment sets PYTHONDONTWRITEBYTECODE, no process would cache it, and each one the
# tests start (workers, servers, commands) would compile Django and the rest again.
export UV_COMPILE_BYTECODE := 1

.PHONY: help install browser run worker lint format test test-fast bench clean

help:
	@echo "make run    serve the demo on http://127.0.0.1:$(PORT) (PORT=... to change)"
	@echo "make test   lint, then the whole test suite (browser tests included)"
	@echo "make lint   ruff, mypy and the rooms' import contract;  make format  fix formatting"
	@echo "make bench  run the benchmarks and rewrite docs/benchmarks.md"

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet uv==0.13.9

$(VENV)/.synced: requirements/dev.txt | $(UV)
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(VENV)
	$(UV) pip sync --quiet --python $(PY) requirements/dev.txt
	touch $@

$(OAI_VENV)/.synced: requirements/openai-agents.txt | $(UV)
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(OAI_VENV)
	$(UV) pip sync --quiet --python $(OAI_VENV)/bin/python requirements/openai-agents.txt
	touch $@

install: $(VENV)/.synced $(OAI_VENV)/.synced

# The browser tests drive Debian's Chromium through Playwright (Playwright cannot
# download its own browsers here).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "Installing Debian's chromium for the browser tests"; \
	  $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }

run: install
	$(PY) manage.py migrate --noinput
	$(PY) manage.py seed_demo --settle --url http://127.0.0.1:$(PORT)/
	PORTAL_SCRIPTED_DELAY_MS=$${PORTAL_SCRIPTED_DELAY_MS:-40} $(PY) manage.py runserver --noreload 127.0.0.1:$(PORT)

worker: install
	$(PY) manage.py run_worker

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# The project's own modules are compiled for the same reason, afresh on each run.
test: install browser lint
	$(PY) -m compileall -q portal agents tests bench manage.py >/dev/null
	$(PYTEST)

# Everything but the browser and process tests: a quick loop while editing.
test-fast: install
	$(PYTEST) -m "not browser and not slow" -q

$(BENCH_VENV)/.synced: requirements/bench.txt | $(UV)
	$(UV) venv --quiet --allow-existing --python $(PYTHON) $(BENCH_VENV)
	$(UV) pip sync --quiet --python $(BENCH_VENV)/bin/python requirements/bench.txt
	touch $@

bench: $(BENCH_VENV)/.synced
	$(BENCH_VENV)/bin/python -m bench

clean:
	rm -rf $(VENV) $(BENCH_VENV) $(OAI_VENV) $(TOOLS) .test-db*.sqlite3* artifacts .pytest_cache .mypy_cache .ruff_cache
