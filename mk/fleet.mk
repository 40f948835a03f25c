# The fleet's test infrastructure: real nginx and HAProxy from Debian, which tests/test_fleet.py
# starts (its own configs, on loopback ports) in front of three real daemons. The Debian services
# themselves are left stopped: the tests run their own processes.
.PHONY: fleet-proxies
fleet-proxies:
	@{ command -v nginx || test -x /usr/sbin/nginx; } >/dev/null && { command -v haproxy || test -x /usr/sbin/haproxy; } >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-cache policy nginx haproxy | grep -q 'Candidate: [0-9]' || apt-get -o DPkg::Lock::Timeout=600 update -q; \
	    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq nginx haproxy; \
	  else \
	    echo "fleet: the proxy tests need nginx and haproxy: sudo apt-get install nginx haproxy (they skip until then)" >&2; \
	  fi; }

test-infra: fleet-proxies
bench-infra: fleet-proxies
