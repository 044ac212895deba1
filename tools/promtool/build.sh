#!/usr/bin/env bash
# Builds promtool (Prometheus' own rule checker and rule unit-test runner,
# github.com/prometheus/prometheus/cmd/promtool) from the version pinned in this directory's
# go.mod into .cache/promtool/bin/promtool, once. The tests of the chart's alerts and
# dashboard (tests/monitoring) run it. A binary built from other pins (go.mod, go.sum or
# this script changed) is rebuilt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="$root/.cache/promtool/bin"

pins="$(cat "$here/go.mod" "$here/go.sum" "$0" | sha256sum | cut -d' ' -f1)"
if [ -x "$bin/promtool" ] && [ "$(cat "$bin/.pins" 2>/dev/null)" = "$pins" ]; then
  echo "promtool binary present in ${bin#"$root"/}"
  exit 0
fi
if ! command -v go >/dev/null 2>&1; then
  echo "error: Go is not installed, so promtool cannot be built." >&2
  echo "Install Go 1.25 or newer (https://go.dev/dl/) and run 'make test' again." >&2
  exit 3
fi

echo "building promtool with $(go version | cut -d' ' -f3) (cold, with the module download, a few minutes on 2 cores)"
mkdir -p "$bin"
rm -f "$bin/.pins"
start=$SECONDS
cd "$here"
# -mod=readonly: go.mod and go.sum are the pins; nothing is resolved afresh.
# remove_all_sd: without the cloud service discoveries (plugins/plugin_*.go in the module),
# which only `promtool check config` would use; the rule checks and tests do not (1091
# packages to compile instead of 1308: `go list -deps`).
CGO_ENABLED=0 go build -mod=readonly -trimpath -tags remove_all_sd -ldflags="-s -w" \
  -o "$bin/promtool.partial" github.com/prometheus/prometheus/cmd/promtool
mv "$bin/promtool.partial" "$bin/promtool"
echo "$pins" > "$bin/.pins"
echo "promtool built in $((SECONDS - start)) s"
