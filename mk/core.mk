# Tools the core's own tests use: openssl (TLS test certificates).
.PHONY: core-tools
core-tools:
	@command -v openssl >/dev/null || { apt-cache policy openssl | grep -q 'Candidate: [0-9]' || apt-get -o DPkg::Lock::Timeout=600 update -q; \
	  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq openssl; }

test-infra: core-tools

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
