# Tools the core's own tests use: openssl (TLS test certificates).
.PHONY: core-tools
core-tools:
	@command -v openssl >/dev/null || { apt-cache policy openssl | grep -q 'Candidate: [0-9]' || apt-get -o DPkg::Lock::Timeout=600 update -q; \
	  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq openssl; }

test-infra: core-tools
