#!/usr/bin/env bash
# The test suite on a loaded machine (issue 48): the README's test command (.ci/run) in a fresh
# clone of COMMIT, with a busy loop pinned to each core for the whole run, RUNS times in a row
# (stops at the first failure), or with --at-once all RUNS clones at the same time beside the
# same busy loops (a heavier load: each run also loads the others). Each run's output goes to
# OUT/run-K.log, one line per run to OUT/runs.log. The clones are made under OUT (nothing is
# written in this checkout).
#   scripts/loaded-test.sh [--runs 3] [--at-once] [--out /tmp/dsync-loaded] [COMMIT (default HEAD)]
set -euo pipefail
runs=3
at_once=
out=/tmp/dsync-loaded
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --at-once) at_once=1; shift ;;
    -*) echo "loaded-test: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
repo=$(cd "$(dirname "$0")/.." && pwd)
commit=$(git -C "$repo" rev-parse "${1:-HEAD}")
mkdir -p "$out"
loops=()
stop_loops() { [ ${#loops[@]} -eq 0 ] || kill "${loops[@]}" 2>/dev/null || true; }
trap stop_loops EXIT
trap 'exit 130' INT TERM
for cpu in $(seq 0 $(($(nproc) - 1))); do
  taskset -c "$cpu" node -e 'for (;;) {}' &
  loops+=($!)
done
run() {
  local k=$1 clone=$out/clone-$1 t0 rc=0 line
  rm -rf "$clone"
  git clone -q "$repo" "$clone"
  git -C "$clone" checkout -q "$commit"
  t0=$(date +%s)
  (cd "$clone" && .ci/run) >"$out/run-$k.log" 2>&1 || rc=$?
  line="$(date -u +%FT%TZ) run $k of $runs${at_once:+ (at once)}, $commit: exit $rc after $(($(date +%s) - t0)) s (load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo "$line" | tee -a "$out/runs.log"
  [ $rc -eq 0 ] && rm -rf "$clone"
  return $rc
}
if [ -n "$at_once" ]; then
  pids=()
  for k in $(seq 1 "$runs"); do run "$k" & pids+=($!); done
  failed=0
  for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
  exit $failed
fi
for k in $(seq 1 "$runs"); do
  run "$k" || exit $?
done
