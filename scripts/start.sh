#!/usr/bin/env bash
# Sets everything up (idempotently) and runs the server on its embedded default store (./data).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec node bin/dsync.mjs serve "$@"
