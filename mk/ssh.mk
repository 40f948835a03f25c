# The ssh backend's infrastructure: a real OpenSSH server on 127.0.0.1 with its own config, host key,
# client keys and a dedicated test account (scripts/sshd-up.sh; fast when already up).
.PHONY: sshd-up

sshd-up:
	scripts/sshd-up.sh

test-infra: sshd-up
bench-infra: sshd-up
