#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver, kube-controller-manager, etcd) from the
# versions pinned in this directory's go.mod into .cache/control-plane/bin/, once.
# Binaries already there are kept; delete .cache/control-plane/bin/ to rebuild (they are
# also rebuilt when the pins below change).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="$root/.cache/control-plane/bin"
wanted=(etcd kube-apiserver kube-controller-manager)

# Binaries built from other pins (go.mod, go.sum or this script changed) are rebuilt.
pins="$(cat "$here/go.mod" "$here/go.sum" "$0" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$bin/.pins" 2>/dev/null)" != "$pins" ]; then rm -f "$bin/.pins"; fi
missing=()
for name in "${wanted[@]}"; do
  [ -x "$bin/$name" ] && [ -f "$bin/.pins" ] || missing+=("$name")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "control plane binaries present in ${bin#"$root"/}"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "error: Go is not installed, so the control plane (${missing[*]}) cannot be built." >&2
  echo "Install Go 1.25 or newer (https://go.dev/dl/), or point KUBECONFIG at a cluster" >&2
  echo "(for example kind) and run 'make e2e' again." >&2
  exit 3
fi

declare -A package=(
  [etcd]=go.etcd.io/etcd/server/v3
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
)
echo "building ${missing[*]} with $(go version | cut -d' ' -f3) (cold, with the module download, about 7 minutes on 2 cores)"
mkdir -p "$bin"
start=$SECONDS
cd "$here"
# Built as a module, Kubernetes reports v0.0.0-master unless its version is stamped in as
# its own release build does (hack/lib/version.sh); Helm's kubeVersion checks read it.
kube="$(go list -mod=readonly -m -f '{{.Version}}' k8s.io/kubernetes)"
major="${kube#v}"; major="${major%%.*}"
minor="${kube#v*.}"; minor="${minor%%.*}"
stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=$kube -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  stamp+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
for name in "${missing[@]}"; do
  # -mod=readonly: go.mod and go.sum are the pins; nothing is resolved afresh.
  CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags="-s -w $stamp" \
    -o "$bin/$name.partial" "${package[$name]}"
  mv "$bin/$name.partial" "$bin/$name"
  echo "built $name"
done
echo "$pins" > "$bin/.pins"
echo "control plane built in $((SECONDS - start)) s"
