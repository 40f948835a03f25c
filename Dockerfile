# The executor daemon. `make image` builds it here with no registry (a locally imported Debian base and
# wheels built on the host into build/wheels); with a registry: --build-arg BASE_IMAGE=python:3.11-slim.
ARG BASE_IMAGE=executor-base:bookworm
FROM ${BASE_IMAGE}

COPY build/wheels /tmp/wheels
RUN python3 -m venv /opt/executor \
 && /opt/executor/bin/pip install --no-index --no-cache-dir --find-links /tmp/wheels 'executor-daemon[docker,ssh,singularity,metrics]' \
 && rm -rf /tmp/wheels \
 && useradd --uid 10001 --create-home --home-dir /var/lib/executor --shell /bin/bash executor \
 && mkdir -p /etc/executor \
 && printf 'backend: local\nbackends:\n  # The daemon container is the boundary here: bubblewrap cannot make user namespaces\n  # under the default seccomp profile of the engine. The daemon says so loudly at start.\n  local: {kind: local, isolation: none}\n' > /etc/executor/config.yaml

USER 10001:10001
ENV PATH=/opt/executor/bin:/usr/local/bin:/usr/bin:/bin \
    EXECUTOR_CONFIG=/etc/executor/config.yaml \
    EXECUTOR_TARGET=unix:///var/lib/executor/state/executor.sock
VOLUME ["/var/lib/executor/state"]
WORKDIR /var/lib/executor
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 CMD ["executor", "health"]
ENTRYPOINT ["executor", "serve", "--state-dir", "/var/lib/executor/state"]
