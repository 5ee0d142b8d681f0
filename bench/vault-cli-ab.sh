#!/bin/sh
# Two builds' vault pushes in turn against plain Dsync's, on the server and files that
# `node --import tsx bench/vault-cli.ts --serve-only --mib 256 --cases first,edit --dir DIR` prepared
# (MIB=1024 in the environment: the files of another --mib):
#   sh bench/vault-cli-ab.sh DIR CASE ROUNDS AFTER BEFORE [BEFORE_DIR] > LOG
# CASE first|edit; AFTER, BEFORE: checkouts built with `node scripts/build-cli.mjs` (their
# bin/dsync.mjs). BEFORE_DIR: a second prepared directory (its own server and vault) for BEFORE's
# pushes and the plain push after them, where the two builds write vault formats the other does
# not read; default DIR. Each round runs four whole processes under /usr/bin/time, in turn:
# AFTER's vault push, plain (BEFORE's CLI), BEFORE's vault push, plain again, each after a
# `sync` (untimed: no push pays for the write-back of the one before); round 0 is the warm-up. One line a push: case round side wall_s user_s sys_s peak_KiB load1. Summary:
# `node --import tsx bench/vault-cli-ab-summary.ts LOG`.
set -e
d=$1; case_=$2; rounds=$3; after=$4; before=$5; dbefore=${6:-$1}
for r in $(seq 0 "$rounds"); do
  for side in after plain-a before plain-b; do
    case $side in
      after) bin=$after kind=vault at=$d;;
      plain-a) bin=$before kind=plain at=$d;;
      before) bin=$before kind=vault at=$dbefore;;
      plain-b) bin=$before kind=plain at=$dbefore;;
    esac
    sync
    DSYNC_BIN="$bin/bin/dsync.mjs" /usr/bin/time -f "%e %U %S %M" sh "$at/next.sh" $kind "$case_" "${MIB:-256}" >"$at/last.out" 2>"$at/last.err" || { cat "$at/last.err" >&2; exit 1; }
    echo "$case_ $r $side $(tail -1 "$at/last.err") $(cut -d' ' -f1 /proc/loadavg)"
  done
done
