#!/usr/bin/env bash
# The paper's evaluation (bench/eval/run.ts): sets up what it needs idempotently (the app's
# setup, rsync, toxiproxy v2.12.0 from the Go module proxy), then runs the benchmark (the
# servers pin themselves to core 0; the client is not pinned: see bench/eval/run.ts).
#   npm run bench [-- --quick] [--reps N] [--sections synthetic,real,large] [--no-rsync]
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "[bench] $*" >&2; }
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
scripts/setup.sh bench >&2

if ! command -v rsync >/dev/null || ! command -v taskset >/dev/null; then
  log "apt-get install rsync util-linux"
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq rsync util-linux >&2
fi

export PATH="$PATH:/usr/local/go/bin"
TOXIPROXY_VERSION=v2.12.0
export TOXIPROXY="${TOXIPROXY:-$(go env GOPATH 2>/dev/null || echo "$HOME/go")/bin/server}"
# (a `go install`ed binary prints "version git": its module version is in its build info)
if ! go version -m "$TOXIPROXY" 2>/dev/null | grep -q "toxiproxy/v2[[:space:]]*$TOXIPROXY_VERSION"; then
  if ! command -v go >/dev/null; then
    log "apt-get install golang-go (for toxiproxy)"
    $SUDO apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq golang-go >&2
  fi
  log "go install toxiproxy $TOXIPROXY_VERSION (about 40 s, once)"
  go install "github.com/Shopify/toxiproxy/v2/cmd/server@$TOXIPROXY_VERSION" >&2
  export TOXIPROXY="$(go env GOPATH)/bin/server"
fi

exec node --import tsx bench/eval/run.ts "$@"
