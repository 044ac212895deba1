# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# Both create .venv (via a private uv in .tools) from uv.lock; nothing is installed globally.

PYTHON ?= python3
TOOLS  := .tools
UV     := $(TOOLS)/bin/uv
VENV   := .venv
BIN    := $(VENV)/bin
DEMO   := out/demo

export UV_PROJECT_ENVIRONMENT := $(VENV)

.PHONY: demo test lint types imports unit install containerd crds clean \
        control-plane registry promtool e2e cluster-up cluster-down

$(UV):
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check 'uv>=0.4'

$(VENV)/.installed: $(UV) pyproject.toml uv.lock
	$(UV) sync --frozen --quiet
	@touch $@

install: $(VENV)/.installed

demo: install
	@rm -rf $(DEMO)
	@echo "== wcow render deploy/samples --out $(DEMO)"
	@$(BIN)/wcow render deploy/samples --out $(DEMO)
	@echo
	@echo "== RuntimeClasses ($(DEMO)/runtimeclasses.yaml)"
	@cat $(DEMO)/runtimeclasses.yaml
	@echo
	@echo "== containerd runtime handlers, config version 2 ($(DEMO)/containerd-config-v2.toml)"
	@cat $(DEMO)/containerd-config-v2.toml
	@echo
	@echo "== the plan the node agents apply ($(DEMO)/plan.json): handlers and hash"
	@$(BIN)/python -c "import json,sys; p=json.load(open('$(DEMO)/plan.json')); print('\n'.join(sorted(p['handlers'])), p['hash'], sep='\n')"
	@echo
	@echo "== merged into a containerd 1.7 config.toml on a Windows Server 2022 host (10.0.20348)"
	@cp examples/containerd-1.7-windows-config.toml $(DEMO)/config.toml
	@$(BIN)/wcow-agent merge --config $(DEMO)/config.toml --plan $(DEMO)/plan.json --host-build 10.0.20348

# containerd from Debian lets the tests load rendered configs for real; without root or
# apt the tests that need it skip and say why.
containerd:
	@command -v containerd >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing containerd (Debian) for the config-load tests"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containerd) >/dev/null 2>&1 \
	      || echo "warning: could not install containerd; its tests will skip"; \
	  else echo "note: containerd not installed and cannot install it here; its tests will skip"; fi; }

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

types: install
	$(BIN)/mypy

imports: install
	$(BIN)/lint-imports

unit: install containerd registry promtool
	@$(BIN)/pytest -m 'not e2e'; rc=$$?; \
	  if [ $$rc = 5 ]; then echo "error: pytest collected no tests: the suite is broken"; fi; \
	  exit $$rc

test: lint types imports unit

# The test OCI registry (tests/registry.py), built from tools/registry/go.mod into
# .cache/registry/bin/ when Go is there; without Go its tests skip in `make test` and fail
# in `make e2e`.
registry:
	@if command -v go >/dev/null 2>&1; then tools/registry/build.sh; \
	  else echo "note: Go is not installed: the test registry is not built; its tests will skip"; fi

# promtool (Prometheus' rule checker), built from tools/promtool/go.mod into
# .cache/promtool/bin/ when Go is there: the chart's alerts and dashboard queries are
# checked and unit-tested with it (tests/monitoring); without Go those tests skip.
promtool:
	@if command -v go >/dev/null 2>&1; then tools/promtool/build.sh; \
	  else echo "note: Go is not installed: promtool is not built; the alert rule tests will skip"; fi

# The cluster tests: against the cluster KUBECONFIG points at, or else the local control
# plane (kube-apiserver, kube-controller-manager, etcd built from tools/control-plane/go.mod
# into .cache/control-plane/bin/ when missing; needs Go). No e2e test may skip here.
control-plane:
	@if [ -z "$$KUBECONFIG" ]; then tools/control-plane/build.sh; fi

e2e: install control-plane registry
	@WCOW_E2E_REQUIRED=1 $(BIN)/pytest -m e2e --durations=0 --durations-min=1; rc=$$?; \
	  if [ $$rc = 5 ]; then echo "error: pytest collected no e2e tests"; fi; \
	  exit $$rc

# A control plane for people: `make cluster-up`, then `export KUBECONFIG=...` as printed.
cluster-up: install
	@tools/control-plane/build.sh
	@$(BIN)/python -m tests.control_plane up

cluster-down: install
	@$(BIN)/python -m tests.control_plane down

# Regenerate everything derived from the code: the CRD, the reference pages in docs/reference/
# (CRD fields, operator settings, conditions, metrics), the chart's CRD and RBAC files and the
# kustomize base (tests fail when any of them drifts).
crds: install
	$(BIN)/wcow crd > crds/runtime.wcow.dev_windowsruntimeprofiles.yaml
	$(BIN)/python tools/docs/reference.py
	$(BIN)/python deploy/generate.py

clean:
	rm -rf $(VENV) $(TOOLS) out .mypy_cache .ruff_cache .pytest_cache
