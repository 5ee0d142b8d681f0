#!/usr/bin/env bash
# Scale-out measurements side by side (issue 21), each a `npm run load` (bench/load/load.ts):
#   1. --find-max: one process on the local store, two workers on the local store, one process
#      on a MinIO store;
#   2. one fixed-N trial on the local store and one on MinIO, for the ratio of server CPU per
#      sync and of sync time (summary.md, "MinIO against the local store").
# Results: bench/results/load/dsync{,-w2,-minio}-find-max.json, dsync{,-minio}-N.json and
# summary.md. Takes about an hour or more on 2 cores: run it on an otherwise idle machine.
#   bench/load/scaleout.sh [--clients 64] [other npm run load flags for every run]
set -euo pipefail
cd "$(dirname "$0")/../.."
N=64
args=()
while [ $# -gt 0 ]; do
  if [ "$1" = --clients ]; then N=$2; shift 2; else args+=("$1"); shift; fi
done
npm run load -- --approach dsync --find-max "${args[@]}"
npm run load -- --approach dsync --find-max --workers 2 "${args[@]}"
npm run load -- --approach dsync --find-max --store minio "${args[@]}"
npm run load -- --approach dsync --clients "$N" "${args[@]}"
npm run load -- --approach dsync --clients "$N" --store minio "${args[@]}"
