#!/usr/bin/env bash
# Make a Docker engine answer on this host: install Debian's docker.io when dockerd is missing, start
# dockerd in the background when none answers, then poll until it does.
#
# Idempotent and fast when the engine is already up (one `docker version`). Never starts a second
# dockerd: a second engine with other bridge options tears down the first one's docker0. A lock
# serialises concurrent callers (make -j, several test sessions).
set -euo pipefail

LOG_DIR=${EXECUTOR_TEST_CACHE:-/var/cache/executor-test}
LOG=$LOG_DIR/dockerd.log
TIMEOUT=${DOCKER_UP_TIMEOUT:-60}

say() { echo "docker-up: $*" >&2; }

engine_answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

if command -v docker >/dev/null && engine_answers; then
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    say "no Docker engine answers and starting one needs root; start dockerd (or run this as root)"
    exit 1
fi

mkdir -p "$LOG_DIR"
exec 9>"$LOG_DIR/docker-up.lock"
flock -w "$TIMEOUT" 9 || { say "timed out waiting for another docker-up"; exit 1; }

# Another caller may have finished the job while we waited for the lock.
if command -v docker >/dev/null && engine_answers; then
    exit 0
fi

if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
    say "installing Debian's docker.io"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-cache policy docker.io | grep -q 'Candidate: [0-9]'; then
        apt-get -o DPkg::Lock::Timeout=600 update -q >&2
    fi
    apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends docker.io >&2
fi

# Start dockerd only when no dockerd process exists at all (one that is still starting up counts).
if ! pgrep -x dockerd >/dev/null; then
    say "starting dockerd (log: $LOG)"
    # setsid: the engine must outlive this script and the make/pytest process group that ran it.
    setsid dockerd >>"$LOG" 2>&1 </dev/null &
fi

deadline=$((SECONDS + TIMEOUT))
until engine_answers; do
    if [ $SECONDS -ge $deadline ]; then
        say "dockerd did not answer within ${TIMEOUT}s; last lines of $LOG:"
        tail -n 20 "$LOG" >&2 || true
        exit 1
    fi
    sleep 0.1
done
say "engine up: $(docker version --format 'server {{.Server.Version}}')"
