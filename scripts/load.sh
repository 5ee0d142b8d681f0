#!/usr/bin/env bash
# Multi-client load harness (bench/load/load.ts): the server pins itself to core 0, the
# clients run here, pinned to core 1.
#   npm run load -- --clients N --interval 10 --duration 60 --approach dsync [--find-max] …
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh bench >&2
if [[ " $* " == *" --shaping 100m "* ]]; then
  export PATH="$PATH:/usr/local/go/bin"
  export TOXIPROXY="${TOXIPROXY:-$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin/server}"
  [ -x "$TOXIPROXY" ] || go install github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0 >&2
fi
pin=()
[ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null && pin=(taskset -c 1)
exec "${pin[@]}" node --import tsx bench/load/load.ts "$@"
