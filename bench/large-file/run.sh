#!/usr/bin/env bash
# The CLI's cost of syncing one large file, this checkout (A) against another (B), with
# farm-bench, pair by pair: (1) the first sync of a 200 MB file to a new server folder; (2) a
# sync after 2 KB changed in its middle (bench/peers' step 2), the file synced before.
#   bench/large-file/run.sh OTHER_CHECKOUT [RUNS]    (both with cli/dist built)
# Writes nothing in the repository; prints farm-bench's reports.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
other=$(cd "$1" && pwd)
runs=${2:-5}
work=$(mktemp -d /tmp/dsync-large-file-XXXXXX)
port=$((20000 + RANDOM % 20000))
url=http://127.0.0.1:$port
node "$here/bin/dsync.mjs" serve --store "$work/store" --port $port --max-load 0 >"$work/server.log" 2>&1 &
server=$!
trap 'kill $server; rm -rf "$work"' EXIT
for _ in $(seq 50); do curl -sf "$url/api/health" >/dev/null && break; sleep 0.2; done
mkdir -p "$work/a" "$work/b"
head -c 200000000 /dev/urandom >"$work/a/blob.bin"
cp "$work/a/blob.bin" "$work/b/blob.bin"
# one device per checkout, each with its own cache and server folder
first() { echo "r=f\$(date +%s%N); rm -rf $work/first-$1; DSYNC_CACHE_DIR=$work/first-$1 exec node $2/bin/dsync.mjs sync $work/$1 -s $url --remote \$r --device $1 >/dev/null 2>&1"; }
edit() { echo "node $here/bench/large-file/edit.mjs $work/$1/blob.bin && DSYNC_CACHE_DIR=$work/cache-$1 exec node $2/bin/dsync.mjs sync $work/$1 -s $url --remote edit-$1 --device $1 >/dev/null 2>&1"; }
echo "== 1. first sync of a 200 MB file (A: $here, B: $other)"
farm-bench -n "$runs" --timeout 1800 --vs "sh -c '$(first b "$other")'" -- sh -c "$(first a "$here")"
for d in a b; do DSYNC_CACHE_DIR=$work/cache-$d node "$here/bin/dsync.mjs" sync "$work/$d" -s "$url" --remote "edit-$d" --device $d >/dev/null; done
echo "== 2. 2 KB changed in the middle of it, then a sync"
farm-bench -n "$runs" --timeout 1800 --vs "sh -c '$(edit b "$other")'" -- sh -c "$(edit a "$here")"
