# The portal's everyday commands. `make demo` runs it, `make test` tests it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ENGINE_VENV ?= $(CURDIR)/.venv-engine
ENGINE_MODEL ?= $(CURDIR)/var/tiny-model
PYTEST_ARGS ?=

export ENGINE_VENV ENGINE_MODEL

.PHONY: demo test test-first-pass engine-aside test-fast test-quick test-engine lint typecheck lock engine venv venv-dev

# What runs the portal comes from requirements.lock; the tests and tooling add requirements-dev.lock.
# Both pin every package with its hashes (`make lock` writes them), and a changed lock reinstalls.
venv: $(VENV)/.installed
venv-dev: $(VENV)/.installed-dev

$(VENV)/.installed: requirements.lock
	scripts/ensure-build-deps.sh
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q --require-hashes -r requirements.lock
	touch $@

$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.lock
	$(VENV)/bin/pip install -q --require-hashes -r requirements-dev.lock
	touch $@

# Re-pin after editing requirements.txt or requirements-dev.txt. Pins that still fit are kept;
# `make lock LOCK_ARGS=--upgrade` (or `--upgrade-package NAME`) moves them on.
LOCK_ARGS ?=
PIP_COMPILE := CUSTOM_COMPILE_COMMAND="make lock" $(VENV)/bin/pip-compile --quiet --generate-hashes \
	--allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links $(LOCK_ARGS)

lock: venv-dev
	$(PIP_COMPILE) -o requirements.lock requirements.txt
	$(PIP_COMPILE) -o requirements-dev.lock requirements-dev.txt

# The real vLLM CPU build in its own environment, and the tiny model it serves in tests.
engine:
	scripts/engine-venv.sh
	$(ENGINE_VENV)/bin/python -m tests.engine.make_model $(ENGINE_MODEL)

# Ctrl-C or SIGTERM stops everything it started within seconds. DEMO_ARGS passes options on,
# e.g. `make demo DEMO_ARGS="--port 8080 --no-traffic"`.
DEMO_ARGS ?=
demo: venv
	scripts/ensure-redis.sh
	$(PY) manage.py demo $(DEMO_ARGS)

# Two passes: everything but the vLLM tier and the chaos run on two pytest-xdist workers (a test
# file at a time, so a file's session gateway stays on one worker; each worker has its own test
# database and Redis databases, tests/conftest.py), then those two on their own: both load every
# core of a small box with real processes on deadlines, and they would starve each other.
# The engine's environment builds beside the gates and the first pass, at the lowest CPU priority:
# on a fresh clone it is pip unpacking vLLM, about 120 s of one core, and the first pass leaves a
# fifth of the cores idle. Measured on fresh clones: the pass took 413 s beside it against 401 s
# after it, and the wait before the first test went from 126 s to 61 s.
TEST_PARALLEL ?= -n 2 --dist loadfile
TEST_DURATIONS ?= --durations=25
test:
	$(MAKE) --no-print-directory -j2 test-first-pass engine-aside
	$(PY) -m pytest -m "engine or chaos" $(TEST_DURATIONS) $(PYTEST_ARGS)

test-first-pass: lint
	scripts/ensure-system.sh
	scripts/ensure-redis.sh
	$(PY) -m pytest -m "not engine and not chaos" $(TEST_PARALLEL) $(TEST_DURATIONS) $(PYTEST_ARGS)

# `make engine` with its output in var/engine-build.log, shown if it fails.
engine-aside:
	@mkdir -p var && echo "building the engine's environment aside: var/engine-build.log"
	@nice -n 19 $(MAKE) --no-print-directory engine > var/engine-build.log 2>&1 \
		|| { tail -n 40 var/engine-build.log; echo "the engine's environment failed to build"; exit 1; }
	@echo "the engine's environment is ready"

# The gates `make test` passes before the suite: ruff's rules, the import layers (import-linter)
# and strict types, all configured in pyproject.toml.
lint: venv-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --cache-dir var/import-linter-cache
	$(PY) -m mypy

# Strict types on the modules listed in pyproject.toml.
typecheck: venv-dev
	$(PY) -m mypy

# Neither the vLLM tier, the chaos run (tests/chaos: about two minutes of real processes crashing
# on schedule) nor the tests marked `long` (real time that no database changes); `make test` runs
# all.
test-fast: venv-dev
	scripts/ensure-redis.sh
	$(PY) -m pytest -m "not engine and not chaos and not long" $(PYTEST_ARGS)

# The inner loop: only tests that run in this process (none that starts a gateway, worker, engine
# or Redis of its own, drives a browser or waits out real time), on two workers: about 1,200 tests
# in about a minute.
test-quick: venv-dev
	scripts/ensure-redis.sh
	$(PY) -m pytest -m "not process and not engine and not chaos and not browser and not long" \
		$(TEST_PARALLEL) $(PYTEST_ARGS)

test-engine: venv-dev engine
	scripts/ensure-redis.sh
	$(PY) -m pytest -m engine $(PYTEST_ARGS)
