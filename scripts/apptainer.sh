#!/usr/bin/env bash
# Provision a real Apptainer for the singularity backend's tests, cached between runs, and print
# exactly two lines on stdout:
#   APPTAINER=<an apptainer executable usable from the host>
#   IMAGE=<a small test SIF>
#
# Debian 12 has no apptainer; Debian sid's package (1.4.x) needs sid's glibc, so it runs from a sid
# root filesystem (mmdebstrap) entered with bubblewrap by a small wrapper script. See
# /work/shared/TESTING.md for the measured recipe. Everything lands under $CACHE/apptainer:
#   sid-root/   the sid root with apptainer (about 270 MB, ~15 s to bootstrap)
#   bin/        the `apptainer` wrapper (and a `singularity` link to it)
#   test-KEY.sif  a minbase bookworm image with bash, coreutils, util-linux, tar
# Each piece carries a stamp with a hash of its recipe: editing the recipe rebuilds only that piece.
# When something cannot be built the script says why on stderr and exits non-zero; the tests then
# skip with that reason (tests/infra/singularity.py).
set -euo pipefail

CACHE=${EXECUTOR_TEST_CACHE:-/var/cache/executor-test}/apptainer
ROOT=$CACHE/sid-root
BIN=$CACHE/bin
ROOT_PACKAGES=apptainer,squashfs-tools,e2fsprogs,squashfuse,fuse2fs,fuse-overlayfs
ROOT_RECIPE="sid minbase $ROOT_PACKAGES cgroupfs v2"
IMAGE_SUITE=${APPTAINER_IMAGE_SUITE:-bookworm}
IMAGE_PACKAGES=bash,coreutils,util-linux,tar,procps
IMAGE_RECIPE="$IMAGE_SUITE $IMAGE_PACKAGES v1"
IMAGE_KEY=$(printf '%s' "$IMAGE_RECIPE" | sha256sum | cut -c1-12)
SIF=$CACHE/test-$IMAGE_KEY.sif
WRAPPER_VERSION=3

say() { echo "apptainer.sh: $*" >&2; }
die() { say "$*"; exit 1; }
stamp_ok() { [ -f "$1" ] && [ "$(cat "$1")" = "$2" ]; }

need_tool() { # need_tool COMMAND PACKAGE
    command -v "$1" >/dev/null && return 0
    say "installing $2"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-cache policy "$2" | grep -q 'Candidate: [0-9]'; then
        apt-get -o DPkg::Lock::Timeout=600 update -q >&2 || die "apt-get update failed"
    fi
    apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$2" >&2 \
        || die "cannot install $2 with apt-get"
}

ready() {
    command -v bwrap >/dev/null &&
        stamp_ok "$ROOT/.executor-recipe" "$ROOT_RECIPE" &&
        stamp_ok "$BIN/.executor-wrapper" "$WRAPPER_VERSION" &&
        [ -s "$SIF" ]
}

report() {
    echo "APPTAINER=$BIN/apptainer"
    echo "IMAGE=$SIF"
}

# Fast path: everything is cached (a few stat calls).
if ready; then report; exit 0; fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock -w 900 9 || die "timed out waiting for another apptainer.sh run"
if ready; then report; exit 0; fi

need_tool mmdebstrap mmdebstrap
need_tool bwrap bubblewrap

# --- the sid root with apptainer -------------------------------------------------------------
if ! stamp_ok "$ROOT/.executor-recipe" "$ROOT_RECIPE"; then
    say "bootstrapping a Debian sid root with apptainer into $ROOT (about 20 s)"
    tmp=$ROOT.tmp
    rm -rf "$tmp" "$ROOT"
    # sid's Release files may be past Valid-Until on a stale mirror snapshot: do not insist.
    if ! mmdebstrap --quiet --variant=minbase \
        --aptopt='Acquire::Check-Valid-Until "false"' \
        --include="$ROOT_PACKAGES" \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook='rm -rf "$1/var/cache/apt/"*.bin "$1/var/lib/apt/lists/"*' \
        --format=directory sid "$tmp" >&2; then
        rm -rf "$tmp"
        die "mmdebstrap could not bootstrap Debian sid with apptainer (sid moves: see the messages above)"
    fi
    conf=$tmp/etc/apptainer/apptainer.conf
    [ -f "$conf" ] || die "the sid root has no $conf: did the apptainer package change its layout?"
    # These VMs lack CAP_SYS_RESOURCE (and friends): root must not try to keep default capabilities.
    sed -i 's/^root default capabilities *=.*/root default capabilities = no/' "$conf"
    grep -q '^root default capabilities = no' "$conf" || echo 'root default capabilities = no' >>"$conf"
    # No systemd as init on these machines: let apptainer drive cgroups directly (cgroupfs), so
    # `--memory`/`--cpus` apply when run as root.
    sed -i 's/^systemd cgroups *=.*/systemd cgroups = no/' "$conf"
    cp /etc/hosts "$tmp/etc/hosts"
    printf '%s\n' "$ROOT_RECIPE" >"$tmp/.executor-recipe"
    mv "$tmp" "$ROOT"
fi

# --- the wrapper: apptainer from the sid root, usable from the host ---------------------------
if ! stamp_ok "$BIN/.executor-wrapper" "$WRAPPER_VERSION"; then
    mkdir -p "$BIN"
    cat >"$BIN/apptainer.tmp" <<EOF
#!/bin/bash
# apptainer from Debian sid, run from $ROOT under bubblewrap (made by scripts/apptainer.sh).
# The host's /proc, /dev and /sys are shared, so instances started by one call are seen by the next
# (their state lives under \$HOME/.apptainer, bound from the host). Host folders that images, task
# directories and overlays live in are bound at the same paths; add more with
# EXECUTOR_APPTAINER_BINDS=/a:/b.
root=$ROOT
EOF
    cat >>"$BIN/apptainer.tmp" <<'EOF'
args=(--bind "$root" / --proc /proc --dev-bind /dev /dev --bind /sys /sys --cap-add ALL
      --setenv PATH /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
binds=(/home /root /tmp /var/tmp /work /mnt /srv /opt /run/user /var/cache/executor-test)
IFS=: read -r -a extra <<<"${EXECUTOR_APPTAINER_BINDS:-}"
chdir=/
for dir in "${binds[@]}" "${extra[@]}"; do
    [ -n "$dir" ] && [ -d "$dir" ] || continue
    args+=(--bind "$dir" "$dir")
    case $PWD/ in "$dir"/*) chdir=$PWD ;; esac
done
exec bwrap "${args[@]}" --chdir "$chdir" /usr/bin/apptainer "$@"
EOF
    chmod 755 "$BIN/apptainer.tmp"
    mv "$BIN/apptainer.tmp" "$BIN/apptainer"
    ln -sfn apptainer "$BIN/singularity"
    echo "$WRAPPER_VERSION" >"$BIN/.executor-wrapper"
fi

version=$("$BIN/apptainer" --version 2>&1) || die "the apptainer wrapper does not run: $version"
say "$version"

# --- the test image -------------------------------------------------------------------------
if [ ! -s "$SIF" ]; then
    say "building the test image $SIF ($IMAGE_SUITE: $IMAGE_PACKAGES, about 30 s)"
    rootfs=$CACHE/image-rootfs.tmp
    rm -rf "$rootfs"
    mmdebstrap --quiet --variant=minbase --include="$IMAGE_PACKAGES" \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --customize-hook='rm -rf "$1/var/cache/apt/"*.bin "$1/var/lib/apt/lists/"* "$1/var/cache/debconf/"*-old' \
        --format=directory "$IMAGE_SUITE" "$rootfs" >&2 \
        || { rm -rf "$rootfs"; die "mmdebstrap could not build the $IMAGE_SUITE image root"; }
    "$BIN/apptainer" --quiet build --force "$SIF.tmp" "$rootfs" >&2 \
        || { rm -rf "$rootfs" "$SIF.tmp"; die "apptainer build failed for $SIF"; }
    rm -rf "$rootfs"
    mv "$SIF.tmp" "$SIF"
    find "$CACHE" -maxdepth 1 -name 'test-*.sif' ! -name "$(basename "$SIF")" -delete
fi

ready || die "provisioning finished but $CACHE is incomplete"
report
