# syntax=docker/dockerfile:1
# wcow-agent: the node agent, a Windows HostProcess container. HostProcess images start from
# Microsoft's host-process base image (a few kilobytes, no OS layer) and run on every Windows
# build, so one image serves all nodes. The base has no shell: everything is assembled in a
# Linux stage and copied in, so this builds with buildx on Linux:
#
#   docker buildx build --platform windows/amd64 -f deploy/docker/agent.windows.Dockerfile \
#     -t ghcr.io/wcow-runtime/wcow-agent:0.1.0 --push .
#
# Python is the embeddable distribution from python.org, verified with its Sigstore bundle
# against the release manager's identity; the packages are the locked dependencies of the
# `agent` group in pyproject.toml (win_amd64 wheels, with hashes: what wcow_agent and
# wcow_contract import; no kopf, no cryptography) and the agent with the contract and
# wcow_support, without wcow_operator.
#
# crictl, the CRI client the agent proves handlers with, is built here from the
# sigs.k8s.io/cri-tools module pinned in tools/crictl/go.mod and go.sum (cmd/crictl, for
# windows/amd64; no prebuilt binary is downloaded), so no node needs crictl installed: the
# agent's --crictl defaults to this copy (docs/distributions.md).

ARG BUILD_IMAGE=python:3.11.13-slim-bookworm
ARG HOSTPROCESS_BASE=mcr.microsoft.com/oss/kubernetes/windows-host-process-containers-base-image:v1.0.0
# cri-tools v1.37.0 needs Go 1.26.6 or later (its go.mod).
ARG GO_IMAGE=golang:1.26.8-bookworm

FROM --platform=$BUILDPLATFORM ${BUILD_IMAGE} AS build
# 3.11.9 is the last 3.11 release with Windows binaries.
ARG PYTHON_VERSION=3.11.9
ARG PYTHON_SIGNER=pablogsal@python.org
ARG PYTHON_SIGNER_ISSUER=https://accounts.google.com
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN pip install uv==0.13.9 sigstore==4.5.1
WORKDIR /src
RUN python -c "import sys, urllib.request as u; [u.urlretrieve(sys.argv[1] + s, '/tmp/python.zip' + s) for s in ('', '.sigstore')]" \
      "https://www.python.org/ftp/python/${PYTHON_VERSION}/python-${PYTHON_VERSION}-embed-amd64.zip"
RUN python -m sigstore verify identity --bundle /tmp/python.zip.sigstore \
      --cert-identity "${PYTHON_SIGNER}" --cert-oidc-issuer "${PYTHON_SIGNER_ISSUER}" /tmp/python.zip \
 && mkdir -p /out/python \
 && python -m zipfile -e /tmp/python.zip /out/python \
 # The embeddable Python ignores site-packages until its ._pth file names it.
 && tag=$(echo "${PYTHON_VERSION}" | cut -d. -f1,2 | tr -d .) \
 && printf 'python%s.zip\n.\nLib\\site-packages\nimport site\n' "$tag" > "/out/python/python${tag}._pth"
COPY pyproject.toml uv.lock README.md ./
COPY contract ./contract
COPY support ./support
COPY operator ./operator
COPY node-agent ./node-agent
COPY crds ./crds
RUN minor=$(echo "${PYTHON_VERSION}" | cut -d. -f1,2) \
 && uv export --frozen --no-dev --only-group agent --no-emit-project --format requirements-txt \
      -o /tmp/requirements.txt \
 && uv build --wheel --out-dir /tmp/dist \
 && uv pip install --python-platform x86_64-pc-windows-msvc --python-version "$minor" \
      --target /out/python/Lib/site-packages --require-hashes -r /tmp/requirements.txt \
 && uv pip install --python-platform x86_64-pc-windows-msvc --python-version "$minor" \
      --target /out/python/Lib/site-packages --no-deps /tmp/dist/*.whl \
 # One distribution holds all four packages: this image runs only the agent, so the
 # operator's package and the console-script launchers go (the agent never imports
 # wcow_operator: an import-linter contract and a test say so).
 && rm -rf /out/python/Lib/site-packages/wcow_operator \
      /out/python/Lib/site-packages/bin /out/python/Lib/site-packages/Scripts

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS crictl
WORKDIR /src/tools/crictl
COPY tools/crictl/go.mod tools/crictl/go.sum ./
# -mod=readonly: go.mod and go.sum are the pins, nothing is resolved afresh; GOTOOLCHAIN=local:
# the image's Go builds it, no other toolchain is fetched. The version string is cri-tools'
# own (its Makefile's GO_LDFLAGS), read from the pin so the two cannot disagree.
RUN export GOTOOLCHAIN=local CGO_ENABLED=0 GOOS=windows GOARCH=amd64 \
 && version=$(go list -mod=readonly -m -f '{{.Version}}' sigs.k8s.io/cri-tools | sed 's/^v//') \
 && go build -mod=readonly -trimpath \
      -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${version}" \
      -o /out/crictl/crictl.exe sigs.k8s.io/cri-tools/cmd/crictl

FROM ${HOSTPROCESS_BASE}
LABEL org.opencontainers.image.title="wcow-agent" \
      org.opencontainers.image.description="wcow-runtime node agent (HostProcess)" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/python /python
# The agent finds it beside its Python: %CONTAINER_SANDBOX_MOUNT_POINT%\crictl\crictl.exe.
COPY --from=crictl /out/crictl /crictl
ENV PYTHONUNBUFFERED=1
# HostProcess containers run as the pod's user (NT AUTHORITY\SYSTEM, set by the DaemonSet);
# the path is relative to the container's mount point (containerd 1.7+: C:\hpc). This is the
# console script wcow-agent = wcow_agent.cli:main; the DaemonSet passes "run" and its flags.
ENTRYPOINT ["python\\python.exe", "-c", "import sys; from wcow_agent.cli import main; sys.exit(main())"]
