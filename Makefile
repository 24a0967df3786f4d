PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
SDK2_VENV := .venv-sdk2
SDK2_STAMP := $(SDK2_VENV)/.installed
SDK2_VERSION := 2.3.0

.PHONY: test lint typecheck pytest conformance demo bench clean

# In the checks, Python writes the bytecode of what it imports (under __pycache__/, ignored by
# git): on a machine whose environment sets PYTHONDONTWRITEBYTECODE, every test process and every
# server subprocess the tests start would compile trio_mcp and the tests from source again
# (an empty value is unset for Python).
test lint typecheck pytest conformance: export PYTHONDONTWRITEBYTECODE :=

# pytest-xdist workers for every pytest run below (auto: one per CPU; 0: no workers, all in
# the pytest process). --dist loadgroup: any test, in any order, on any worker, except that the
# tests of one xdist_group(name) mark run on the same worker.
PYTEST_WORKERS ?= auto
PYTEST := $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check trio_mcp tests examples benchmarks
	$(BIN)/ruff format --check trio_mcp tests examples benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

# The official Python SDK 2.x, for the interop test only: its package name clashes with the
# 1.x SDK of the other interop tests, so it gets an environment of its own.
$(SDK2_STAMP):
	test -x $(SDK2_VENV)/bin/python || $(PY) -m venv $(SDK2_VENV)
	$(SDK2_VENV)/bin/python -m pip install -q "mcp==$(SDK2_VERSION)"
	touch $(SDK2_STAMP)

# The tests marked every_store run again on the JSON, SQLite and Redis stores (only the test
# modules that name the mark are collected then: tests/conftest.py).
pytest: $(STAMP) $(SDK2_STAMP)
	$(PYTEST)
	$(PYTEST) tests --task-store=json -m every_store
	$(PYTEST) tests --task-store=sqlite -m every_store
	$(PYTEST) tests --task-store=redis -m every_store

# The official MCP conformance suite, server mode against examples/conformance_server.py and
# client mode driving examples/conformance_client.py (both spec versions each): Node 22 and
# the pinned suite are installed once into .cache/conformance/ (needs npm); known failures,
# each with its reason, are in conformance/expected-failures.yml and
# conformance/expected-client-failures.yml (scripts/conformance.py).
conformance: $(STAMP)
	$(BIN)/python scripts/conformance.py --mode both

test: lint typecheck conformance pytest

# The demo needs the runtime alone: an environment of its own with a plain install (no dev
# extra: no linters, SDKs or valkey), so a newcomer's first `make demo` is quick.
DEMO_VENV := .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

$(DEMO_STAMP): pyproject.toml
	test -x $(DEMO_VENV)/bin/python || $(PY) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install -q --disable-pip-version-check -e .
	touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(DEMO_VENV)/bin/trio-mcp demo

# The benchmarks (docs/performance.md). Their TypeScript SDK peer needs Node 22 and the pinned
# SDK, installed once into .cache/bench/ (needs npm the first time; benchmarks/peers/node.py,
# sharing scripts/node_setup.py with make conformance); `python -m benchmarks --no-ts` skips it.
# Then HTTP and WebSocket against the TS SDK, the Python SDK 2.x under uvicorn (.venv-sdk2, set
# up by benchmarks/peers/sdk2.py) and an h11-on-Trio floor (benchmarks/http_peers.py); a peer
# that cannot be installed there is skipped with its reason. Last, scale-out on Redis: CPU and
# Redis commands per task round trip at 1 and 3 processes (benchmarks/scale.py).
bench: $(STAMP)
	$(BIN)/python -m benchmarks.peers.node
	$(BIN)/python -m benchmarks
	$(BIN)/python -m benchmarks.http_peers
	$(BIN)/python -m benchmarks.scale

clean:
	rm -rf $(VENV) $(SDK2_VENV) $(DEMO_VENV) .pytest_cache .mypy_cache .ruff_cache
