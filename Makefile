# The portal's everyday commands. `make demo` runs it, `make test` tests it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
ENGINE_VENV ?= $(CURDIR)/.venv-engine
ENGINE_MODEL ?= $(CURDIR)/var/tiny-model
PYTEST_ARGS ?=

export ENGINE_VENV ENGINE_MODEL

.PHONY: demo test test-fast test-engine typecheck engine venv

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -r requirements.txt
	touch $@

# The real vLLM CPU build in its own environment, and the tiny model it serves in tests.
engine:
	scripts/engine-venv.sh
	$(ENGINE_VENV)/bin/python -m tests.engine.make_model $(ENGINE_MODEL)

demo: venv
	scripts/ensure-redis.sh
	$(PY) manage.py demo

test: venv engine typecheck
	scripts/ensure-system.sh
	scripts/ensure-redis.sh
	$(PY) -m pytest $(PYTEST_ARGS)

# Strict types on the modules listed in pyproject.toml.
typecheck: venv
	$(PY) -m mypy

test-fast: venv
	scripts/ensure-redis.sh
	$(PY) -m pytest -m "not engine" $(PYTEST_ARGS)

test-engine: venv engine
	scripts/ensure-redis.sh
	$(PY) -m pytest -m engine $(PYTEST_ARGS)
