# syntax=docker/dockerfile:1
# wcow-operator: the cluster controller, on Linux nodes. Non-root, and it writes nothing but
# /tmp, so the chart runs it with a read-only root filesystem.
#
#   docker build -f deploy/docker/operator.Dockerfile -t ghcr.io/wcow-runtime/wcow-operator:0.1.0 .
#
# Runtime dependencies come from uv.lock with their hashes; dev tools never enter the image.

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN pip install uv==0.13.9
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
COPY contract ./contract
COPY support ./support
COPY operator ./operator
COPY node-agent ./node-agent
COPY crds ./crds
RUN uv export --frozen --no-dev --no-emit-project --format requirements-txt -o /tmp/requirements.txt \
 && uv build --wheel --out-dir /tmp/dist \
 && python -m venv /opt/wcow \
 && /opt/wcow/bin/pip install --require-hashes -r /tmp/requirements.txt \
 && /opt/wcow/bin/pip install --no-deps /tmp/dist/*.whl \
 # One distribution holds both programs: this image runs only the operator, so the node
 # agent and its command go (the operator never imports wcow_agent; a test checks it).
 && rm -rf /opt/wcow/lib/python3.*/site-packages/wcow_agent /opt/wcow/bin/wcow-agent \
 && /opt/wcow/bin/python -m compileall -q /opt/wcow/lib

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="wcow-operator" \
      org.opencontainers.image.description="wcow-runtime cluster controller" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/wcow /opt/wcow
ENV PATH=/opt/wcow/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The same numeric user the chart's podSecurityContext names (runAsNonRoot needs a number).
USER 65532:65532
EXPOSE 9090 8080
ENTRYPOINT ["wcow-operator"]
