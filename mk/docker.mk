# The docker backend's infrastructure: a Docker engine and the locally built sandbox image.
.PHONY: docker-up sandbox-image

docker-up:
	scripts/docker-up.sh

# Needs the engine; loads the cached image archive when there is one (seconds), else builds (~40 s).
sandbox-image: docker-up
	scripts/sandbox-image.sh

test-infra: docker-up sandbox-image
bench-infra: docker-up sandbox-image
