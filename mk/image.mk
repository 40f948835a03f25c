# The daemon's own image (top-level Dockerfile), built with no registry.
.PHONY: image
image: venv docker-up
	scripts/daemon-image.sh
