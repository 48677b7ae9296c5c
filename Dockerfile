# syntax=docker/dockerfile:1
#
# tpu-webhook admission server.
#   docker build -t tpu-webhook:0.1.0 --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) .
#
# Base: the official Python 3.11 slim image on Debian bookworm, pinned by full tag and by the
# digest of its multi-architecture index as recorded in public sources (not re-resolved from this
# build machine, which cannot reach the registry). Bump both together, deliberately.
# PYTHON_IMAGE may name another Debian-based image with python3 3.11 (the locks are resolved for
# CPython 3.11), venv, and groupadd/useradd on its PATH: the tests build on a Debian bookworm root
# file system made by mmdebstrap (docker/build-local.sh), whose python3 is Debian's 3.11.2 in
# /usr/bin where the official image has CPython 3.11.15 in /usr/local/bin. Nothing below names
# either path: the venv is made by the base's own `python3` and its interpreter link points into
# the same base in both stages.
#
# The image (307 MiB uncompressed on the test base, 351 MiB before issue 23): the base's Python
# with pip, setuptools and wheel removed (113 MB on the test base), and /opt/venv (212 MB):
# tpu-webhook and the 50 distributions of docker/requirements.lock, compiled. The `kubernetes`
# client, for the selfManaged certificate mode only, is 123 MB of it (68 MB its asyncio copy,
# which brings aiohttp, 13 MB more); cryptography 16 MB, uvloop 14 MB, pydantic 10 MB. Each part
# and why: README.md, "What the image contains"; every distribution: the SBOM it carries.
ARG PYTHON_IMAGE=python:3.11.15-slim-bookworm@sha256:d29f48a31a8b408ed19272ca1e7b10ebae13b240a27e862d3d4217c528e2e0c3

# ---- builder: a virtual environment at /opt/venv with the wheel and exactly the locked
# dependencies (docker/requirements.lock: every file checked against its sha256, wheels only),
# and its SBOM. pip, setuptools and the SBOM generator stay in a throw-away environment here.
FROM ${PYTHON_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY docker/install.sh /usr/local/bin/install-tpu-webhook
COPY pyproject.toml README.md ./
COPY docker/requirements.lock docker/build-requirements.lock ./docker/
COPY webhook ./webhook
# An optional build secret `pip-ca` (a CA bundle, e.g. of a TLS-inspecting proxy in front of the
# package index) is used by pip and never stored in a layer:
#   docker build --secret id=pip-ca,src=/etc/ssl/certs/ca-certificates.crt ...
RUN --mount=type=secret,id=pip-ca,required=false \
    ["/bin/sh", "/usr/local/bin/install-tpu-webhook", "/opt/venv", "/src", "/usr/share/doc/tpu-webhook/sbom.cdx.json"]

# ---- runtime: the same base without its installers, the venv and its SBOM (no build tools, no
# sources), a non-root user. What it holds and why: README.md, "What the image contains".
FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="tpu-webhook" \
      org.opencontainers.image.description="Kubernetes admission webhook that validates and completes Cloud TPU workloads on GKE" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11.15-slim-bookworm" \
      org.opencontainers.image.base.digest="sha256:d29f48a31a8b408ed19272ca1e7b10ebae13b240a27e862d3d4217c528e2e0c3" \
      io.tpu-webhook.sbom="/usr/share/doc/tpu-webhook/sbom.cdx.json"

# No pip, setuptools or wheel (nor ensurepip's wheels) from the base: nothing here installs.
RUN --mount=type=bind,source=docker/remove-installers.sh,target=/run/remove-installers.sh \
    ["/bin/sh", "/run/remove-installers.sh"]

# uid/gid 65532 ("nonroot", as in distroless): the chart's runAsUser.
RUN groupadd --system --gid 65532 nonroot \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin nonroot

COPY --from=builder /opt/venv /opt/venv
# CycloneDX: tpu-webhook and every distribution in /opt/venv, with the sha256 of each file
# installed (also written next to the image by docker/build-local.sh).
COPY --from=builder /usr/share/doc/tpu-webhook/sbom.cdx.json /usr/share/doc/tpu-webhook/sbom.cdx.json

# The root filesystem is read-only in the cluster: no .pyc writes (pip compiled them at build
# time), unbuffered logs, listen on all interfaces of the Pod.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONFAULTHANDLER=1 \
    TPU_WEBHOOK_HOST=0.0.0.0 \
    TPU_WEBHOOK_PORT=8443

USER 65532:65532
WORKDIR /tmp
EXPOSE 8443
# Equivalent to `python -m webhook serve`. Certificates come from TPU_WEBHOOK_TLS_CERT_FILE and
# TPU_WEBHOOK_TLS_KEY_FILE (the chart mounts them); without them the server makes development
# certificates under its working directory, which needs a writable /tmp.
ENTRYPOINT ["tpu-webhook", "serve"]
