# memory-proxy image. The install steps live in deploy/install.sh (CI runs the same script without
# Docker); this file only copies the sources in, runs it, and sets up the runtime.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Only what the package needs (see .dockerignore): pyproject.toml, README.md, memory_proxy/ (with its prompts and migrations).
COPY . /src
RUN sh /src/deploy/install.sh /opt/memory-proxy \
    && rm -rf /src \
    && useradd --system --uid 10001 --home-dir /var/lib/memory-proxy --create-home memory-proxy

ENV PATH=/opt/memory-proxy/bin:$PATH \
    MEMORY_PROXY_HOST=0.0.0.0 \
    MEMORY_PROXY_PORT=8080 \
    MEMORY_PROXY_DATA_DIR=/var/lib/memory-proxy

USER memory-proxy
WORKDIR /var/lib/memory-proxy
EXPOSE 8080

# /readyz: 200 when the database answers (chat works without it, but the stack is not ready).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=5 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/readyz', timeout=4).status != 200)"]

# SIGTERM lets open streams finish (SHUTDOWN_TIMEOUT): give it more than compose's default 10 s.
STOPSIGNAL SIGTERM
CMD ["memory-proxy", "serve"]
