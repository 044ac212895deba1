#!/usr/bin/env bash
# Builds the test OCI registry (the CNCF distribution registry, cmd/registry) from the
# version pinned in this directory's go.mod into .cache/registry/bin/registry, once.
# A binary built from other pins (go.mod, go.sum or this script changed) is rebuilt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="$root/.cache/registry/bin"

pins="$(cat "$here/go.mod" "$here/go.sum" "$0" | sha256sum | cut -d' ' -f1)"
if [ -x "$bin/registry" ] && [ "$(cat "$bin/.pins" 2>/dev/null)" = "$pins" ]; then
  echo "registry binary present in ${bin#"$root"/}"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "error: Go is not installed, so the test registry cannot be built." >&2
  echo "Install Go 1.25 or newer (https://go.dev/dl/) and run 'make e2e' again." >&2
  exit 3
fi

echo "building the registry with $(go version | cut -d' ' -f3) (cold, with the module download, a few minutes on 2 cores)"
mkdir -p "$bin"
rm -f "$bin/.pins"
start=$SECONDS
cd "$here"
# -mod=readonly: go.mod and go.sum are the pins; nothing is resolved afresh.
CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags="-s -w" \
  -o "$bin/registry.partial" github.com/distribution/distribution/v3/cmd/registry
mv "$bin/registry.partial" "$bin/registry"
echo "$pins" > "$bin/.pins"
echo "registry built in $((SECONDS - start)) s"
