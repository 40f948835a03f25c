# The integrations' third-party packages, each in a venv of its own so their dependencies never meet
# the main venv's (openai-agents pins mcp 1.x; executor's MCP server needs 2.x):
#   .venv-hermes  hermes-agent 0.19.0 (bench's cached venv, $(TEST_CACHE)/hermes-venv, reached through a
#                 .pth) + executor and integrations/hermes, editable
#   .venv-openai-agents, .venv-swerex: the SDK + executor, editable
# Made once, remade when a pyproject changes; the tests skip (saying why) when a venv is missing.
.PHONY: integrations-venvs integrations-test-infra
INTEG_PYTHON ?= $(PYTHON)

.venv-hermes/.installed: pyproject.toml integrations/hermes/pyproject.toml
	$(PY) -c 'from bench import hermes; hermes.ensure_venv()'
	rm -rf .venv-hermes && $(TEST_CACHE)/hermes-venv/bin/python -m venv .venv-hermes
	site=$$(.venv-hermes/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') && \
	  $(TEST_CACHE)/hermes-venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > $$site/hermes-agent.pth
	.venv-hermes/bin/python -m pip install -q -e . -e integrations/hermes
	touch $@

.venv-openai-agents/.installed: pyproject.toml
	rm -rf .venv-openai-agents && $(INTEG_PYTHON) -m venv .venv-openai-agents
	.venv-openai-agents/bin/python -m pip install -q -e . 'openai-agents==$(OPENAI_AGENTS_VERSION)' pytest
	touch $@

.venv-swerex/.installed: pyproject.toml
	rm -rf .venv-swerex && $(INTEG_PYTHON) -m venv .venv-swerex
	.venv-swerex/bin/python -m pip install -q -e . 'swe-rex==$(SWEREX_VERSION)' aiohttp pytest pytest-asyncio
	# SWE-ReX's own runtime tests, from its sdist (not in the wheel), run against our runtime
	rm -rf .venv-swerex/sdist && .venv-swerex/bin/python -m pip download -q --no-deps --no-binary :all: \
	  'swe-rex==$(SWEREX_VERSION)' -d .venv-swerex/sdist
	mkdir -p .venv-swerex/swerex-tests/tests && tar -xzf .venv-swerex/sdist/swe_rex-$(SWEREX_VERSION).tar.gz \
	  -C .venv-swerex/swerex-tests/tests --strip-components=2 swe_rex-$(SWEREX_VERSION)/tests/test_execution.py
	touch .venv-swerex/swerex-tests/tests/__init__.py
	touch $@

OPENAI_AGENTS_VERSION ?= 0.24.0
SWEREX_VERSION ?= 1.4.0
integrations-venvs: venv .venv-hermes/.installed .venv-openai-agents/.installed .venv-swerex/.installed

# For `make test`: a venv that cannot be made (no registry, a yanked release) does not stop the run: its
# tests skip and say which target makes it.
integrations-test-infra: venv
	@for v in .venv-hermes .venv-openai-agents .venv-swerex; do \
	  $(MAKE) -s $$v/.installed || echo "make test: $$v could not be made; its integration tests will skip" >&2; done

test-infra: integrations-test-infra
