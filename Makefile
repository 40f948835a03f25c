# executor: `make serve` starts the daemon on the local backend; `make test` runs every test,
# installing and starting what the tests need (Docker, sshd, Apptainer, the SDKs' local servers).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STATE_DIR ?= $(HOME)/.local/state/executor
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: venv serve test test-unit typecheck bench proto proto-check clean

# The virtualenv, with executor installed editable and every extra the tests use.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,modal,daytona,vercel-sandbox]'
	touch $@

venv: $(VENV)/.installed

# What serving needs and nothing else: executor and the self-hosted backends' extras (no test, bench,
# MCP or cloud SDKs; add them with SERVE_EXTRAS=docker,modal). A venv `make venv` made already has them.
SERVE_EXTRAS ?= docker,ssh,singularity,metrics
$(VENV)/.serve-installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	test -e $(VENV)/.installed -a $(VENV)/.installed -nt pyproject.toml || \
	  $(PY) -m pip install -q -e '.$(if $(SERVE_EXTRAS),[$(SERVE_EXTRAS)])'
	touch $@

# In the foreground: Ctrl-C (SIGTERM) drains and stops it. `executor start` runs it in the background.
serve: $(VENV)/.serve-installed bubblewrap
	$(VENV)/bin/executor serve $(if $(CONFIG),--config $(CONFIG)) --state-dir $(STATE_DIR)

# Regenerate the Python stubs from proto/ (committed; tests/test_proto.py fails when stale).
proto: venv
	$(PY) scripts/gen_proto.py

# Tests run in parallel groups (one per backend's conformance run, one per other module): most of
# their time is spent waiting on commands, not on the CPU. TEST_WORKERS=0 runs them in one process.
TEST_WORKERS ?= 4
test: venv test-infra
	$(PY) -m pytest -q -ra $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup) $(PYTEST_ARGS); \
	  status=$$?; $(MAKE) -s test-kept; exit $$status

test-unit: venv
	$(PY) -m pytest -q -ra -m 'not slow' $(PYTEST_ARGS)

# mypy, strict on executor/, approval/ and the Backend contract (also run by tests/test_types.py).
typecheck: venv
	$(PY) scripts/typecheck.py

bench: venv bench-infra
	$(PY) -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache

# Each area adds its own infrastructure targets and hooks them into test-infra / bench-infra.
.PHONY: test-infra bench-infra
-include mk/*.mk
