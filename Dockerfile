# The Stratagem worker image: `docker build -t stratagem .`, or `docker compose up -d --build`.
# It runs `stratagem worker` with the built-in tools; add tool modules by building an image
# FROM this one (or mounting them) and passing `--tools MODULE` (see docker-compose.yml).

FROM python:3.11.14-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# The project as pyproject.toml packages it: the stratagem package, whose workflows and
# activities are links to the top-level folders (copied too, so the links resolve). README.md is
# the package's readme, which the build reads. The image runs `stratagem worker`, not worker.py.
COPY pyproject.toml README.md ./
COPY stratagem/ stratagem/
COPY workflows/ workflows/
COPY activities/ activities/
RUN pip install .

# The example processes, for their tool modules: --tools /app/examples/<name>/tools.py.
COPY examples/ examples/

# A fixed, non-root user. Build with --build-arg STRATAGEM_UID=$(id -u) when a host folder is
# bind-mounted as the workspace or store, so both sides can write it.
ARG STRATAGEM_UID=10001
RUN groupadd --system --gid "${STRATAGEM_UID}" stratagem \
 && useradd --system --uid "${STRATAGEM_UID}" --gid stratagem --home-dir /data --no-create-home stratagem \
 && mkdir -p /data/workspace /data/store \
 && chown -R stratagem:stratagem /data

# Named volumes mounted on /data/workspace and /data/store start as copies of these folders,
# so they belong to the stratagem user too.
ENV STRATAGEM_HOME=/data \
    STRATAGEM_WORKSPACE=/data/workspace \
    STRATAGEM_STORE=/data/store

USER stratagem
WORKDIR /data

# SIGINT (Ctrl-C) stops the worker cleanly: it stops polling and its running activities are
# cancelled and retried elsewhere at once. Python installs no SIGTERM handler, and as PID 1 it
# would ignore SIGTERM until Docker kills it.
STOPSIGNAL SIGINT

# With OTEL_METRICS_EXPORTER=prometheus (as docker-compose.yml sets it), the worker's Temporal
# runtime serves metrics, and answering on them shows the process is alive. Without it there is
# nothing inside to probe, so the check passes while the container runs.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; e = os.environ; sys.exit(0) if e.get('OTEL_METRICS_EXPORTER', '').strip().lower() != 'prometheus' else urllib.request.urlopen('http://127.0.0.1:' + (e.get('OTEL_EXPORTER_PROMETHEUS_PORT') or '9464') + '/metrics', timeout=3)"]

CMD ["stratagem", "worker"]
