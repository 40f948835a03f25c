# Tools the core's own tests use: openssl (TLS test certificates).
.PHONY: core-tools
core-tools:
	@command -v openssl >/dev/null || { apt-cache policy openssl | grep -q 'Candidate: [0-9]' || apt-get -o DPkg::Lock::Timeout=600 update -q; \
	  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq openssl; }

test-infra: core-tools

# `make test` leaves its test servers running for the next run (they take a while to provision):
# the local fakes of the Modal, Daytona and Vercel APIs and the test sshd, with their state under
# $(TEST_CACHE). `make test-stop` stops them (the Docker engine and Apptainer are left alone: they are
# the machine's). The fakes are replaced by the next run when their code changed.
TEST_CACHE ?= $(or $(EXECUTOR_TEST_CACHE),/var/cache/executor-test)
.PHONY: test-stop test-kept
test-stop:
	@for f in $(TEST_CACHE)/modal-fake/server.json $(TEST_CACHE)/vercel-fake/server.json; do \
	  [ -f "$$f" ] && pid=$$($(PYTHON) -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$$f") \
	    && kill "$$pid" 2>/dev/null && echo "stopped $$(dirname $$f) (pid $$pid)"; true; done
	@for f in $(TEST_CACHE)/daytona-fake/server.pid $(TEST_CACHE)/ssh/sshd.pid; do \
	  [ -f "$$f" ] && pid=$$(cat "$$f") && kill "$$pid" 2>/dev/null && echo "stopped $$(dirname $$f) (pid $$pid)"; true; done

test-kept:
	@echo "make test: the SDK fakes and the test sshd keep running for the next run (state under $(TEST_CACHE)); 'make test-stop' stops them"

# bubblewrap: the local backend's default sandbox (`isolation: sandbox`). Installed with apt as root;
# otherwise the command to run is printed (the backend stays unavailable until then: it never falls
# back to running unisolated).
.PHONY: bubblewrap
bubblewrap:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-cache policy bubblewrap | grep -q 'Candidate: [0-9]' || apt-get -o DPkg::Lock::Timeout=600 update -q; \
	    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq bubblewrap; \
	  else \
	    echo "executor: the local backend sandboxes commands with bubblewrap, which is not installed:" >&2; \
	    echo "  sudo apt-get install bubblewrap   (or set isolation: none on the local backend, knowingly)" >&2; \
	  fi; }

test-infra: bubblewrap
