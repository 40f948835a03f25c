#!/usr/bin/env bash
# Build (or load from cache) the docker backend's default image, executor-sandbox:latest, with no
# registry: a minbase Debian root made by mmdebstrap and `docker import`ed. Dockerfile.sandbox is the
# same recipe for users who do have a registry.
#
# Fast paths, in order: the image is already in the engine (one `docker image inspect`); a cached
# `docker save | gzip -1` under $CACHE loads in a few seconds; otherwise build (~30 s) and cache it.
# The cache key is a hash of this recipe, so editing the package list rebuilds.
set -euo pipefail

IMAGE=${SANDBOX_IMAGE:-executor-sandbox:latest}
CACHE=${EXECUTOR_TEST_CACHE:-/var/cache/executor-test}
SUITE=${SANDBOX_SUITE:-bookworm}
PACKAGES=bash,python3,coreutils,procps,tar,util-linux
RECIPE="$SUITE $PACKAGES v1"
KEY=$(printf '%s' "$RECIPE" | sha256sum | cut -c1-12)
ARCHIVE=$CACHE/executor-sandbox-$KEY.tar.gz
LABEL=io.executor.recipe

say() { echo "sandbox-image: $*" >&2; }

have_image() {
    [ "$(docker image inspect --format "{{index .Config.Labels \"$LABEL\"}}" "$IMAGE" 2>/dev/null)" = "$KEY" ]
}

have_image && exit 0

mkdir -p "$CACHE"
exec 9>"$CACHE/sandbox-image.lock"
flock -w 600 9 || { say "timed out waiting for another sandbox-image run"; exit 1; }
have_image && exit 0

if [ -s "$ARCHIVE" ]; then
    say "loading $IMAGE from $ARCHIVE"
    if gzip -dc "$ARCHIVE" | docker load -q >&2 && have_image; then
        exit 0
    fi
    say "the cached archive is unusable; rebuilding"
    rm -f "$ARCHIVE"
fi

if ! command -v mmdebstrap >/dev/null; then
    say "installing mmdebstrap"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-cache policy mmdebstrap | grep -q 'Candidate: [0-9]'; then
        apt-get -o DPkg::Lock::Timeout=600 update -q >&2
    fi
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends mmdebstrap >&2
fi

say "building $IMAGE with mmdebstrap ($SUITE: $PACKAGES)"
# /workspace is created in the image so the volume mounted there starts from a known directory.
mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='mkdir -p "$1/workspace"' \
    --customize-hook='rm -rf "$1/var/cache/apt/"*.bin "$1/var/lib/apt/lists/"*' \
    "$SUITE" - |
    docker import \
        --change "LABEL $LABEL=$KEY" \
        --change 'WORKDIR /workspace' \
        --change 'CMD ["/bin/sh"]' \
        - "$IMAGE" >&2

have_image || { say "the import did not produce $IMAGE"; exit 1; }

say "caching $IMAGE as $ARCHIVE"
tmp=$ARCHIVE.tmp.$$
docker save "$IMAGE" | gzip -1 >"$tmp"
mv "$tmp" "$ARCHIVE"
# Keep only the current recipe's archive.
find "$CACHE" -maxdepth 1 -name 'executor-sandbox-*.tar.gz' ! -name "$(basename "$ARCHIVE")" -delete
