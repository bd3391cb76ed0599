#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The committed forwarders are what plugin/gen_forwarders.py writes from the
# pinned NCCL headers (scripts/env.sh names the versions, install-deps.sh
# fetches them): regenerates them into a scratch folder and compares.
# Exit 77 (skipped) where the headers were not fetched (offline install).
set -euo pipefail
src=$1
source "$src/scripts/env.sh" >/dev/null
newest=$src/.deps/nccl-api/$RCN_NCCL_API_NEWEST/nccl.h
floor=$src/.deps/nccl-api/$RCN_NCCL_API_FLOOR/nccl.h
for h in "$newest" "$floor"; do
  if [ ! -f "$h" ]; then echo "SKIP: $h is missing (scripts/install-deps.sh fetches it)"; exit 77; fi
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
python3 "$src/plugin/gen_forwarders.py" "$newest" "$floor" "$out" >/dev/null
status=0
for f in forwarders.cc real_nccl.h real_nccl.def nccl_types.cmake; do
  if ! diff -q "$out/$f" "$src/plugin/$f" >/dev/null; then
    echo "plugin/$f differs from what NCCL $RCN_NCCL_API_NEWEST's header gives: rerun" \
      "plugin/gen_forwarders.py $newest $floor plugin/"
    status=1
  fi
done
[ $status = 0 ] && echo "the forwarders match NCCL $RCN_NCCL_API_NEWEST's nccl.h"
exit $status
