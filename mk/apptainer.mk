# The singularity backend's infrastructure: a real Apptainer (Debian sid's, run from a cached sid
# root under bubblewrap) and a small test SIF. `make apptainer` prints APPTAINER=... and IMAGE=...
.PHONY: apptainer apptainer-test-infra

apptainer:
	@scripts/apptainer.sh

# For `make test`: provision, but let a failed bootstrap (sid moves) through: the real-tier tests
# then skip and say why (tests/infra/singularity.py reruns the script and reports its error).
apptainer-test-infra:
	@scripts/apptainer.sh >/dev/null || echo "apptainer: provisioning failed (see above); the singularity real-tier tests will skip with the reason" >&2

test-infra: apptainer-test-infra
bench-infra: apptainer-test-infra
