#!/usr/bin/env bash
# Build the daemon's own image, executor:latest, with no registry:
#   1. a base image, executor-base:bookworm (mmdebstrap minbase + python3-venv, `docker import`ed;
#      cached as a gzip'd `docker save` so later runs load it in seconds),
#   2. wheels of executor and its extras, built on this host (no network needed inside the build),
#   3. `docker build` of the top-level Dockerfile on that base.
# Users with a registry: docker build --build-arg BASE_IMAGE=python:3.11-slim . (after step 2).
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${EXECUTOR_IMAGE:-executor:latest}
BASE=${EXECUTOR_BASE_IMAGE:-executor-base:bookworm}
CACHE=${EXECUTOR_TEST_CACHE:-/var/cache/executor-test}
PACKAGES=bash,python3,python3-venv,ca-certificates,tar,procps
KEY=$(printf '%s' "bookworm $PACKAGES v1" | sha256sum | cut -c1-12)
ARCHIVE=$CACHE/executor-base-$KEY.tar.gz
PY=${PYTHON:-.venv/bin/python}
say() { echo "daemon-image: $*" >&2; }

have_base() { [ "$(docker image inspect --format '{{index .Config.Labels "io.executor.recipe"}}' "$BASE" 2>/dev/null)" = "$KEY" ]; }

mkdir -p "$CACHE"
exec 9>"$CACHE/daemon-image.lock"
flock -w 900 9 || { say "timed out waiting for another daemon-image run"; exit 1; }

if ! have_base; then
    if [ -s "$ARCHIVE" ] && gzip -dc "$ARCHIVE" | docker load -q >&2 && have_base; then
        say "loaded $BASE from $ARCHIVE"
    else
        command -v mmdebstrap >/dev/null || {
            apt-cache policy mmdebstrap | grep -q 'Candidate: [0-9]' || apt-get -o DPkg::Lock::Timeout=600 update -q >&2
            DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends mmdebstrap >&2
        }
        say "building $BASE with mmdebstrap ($PACKAGES)"
        mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
            --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
            --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
            --customize-hook='rm -rf "$1/var/cache/apt/"*.bin "$1/var/lib/apt/lists/"*' \
            bookworm - | docker import --change "LABEL io.executor.recipe=$KEY" --change 'CMD ["/bin/bash"]' - "$BASE" >&2
        docker save "$BASE" | gzip -1 > "$ARCHIVE.tmp" && mv "$ARCHIVE.tmp" "$ARCHIVE"
    fi
fi

say "building wheels"
rm -rf build/wheels && mkdir -p build/wheels
"$PY" -m pip wheel -q --wheel-dir build/wheels '.[docker,ssh,singularity,metrics]' >&2
say "building $IMAGE"
docker build -q -t "$IMAGE" --build-arg "BASE_IMAGE=$BASE" . >&2
echo "$IMAGE"
