#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Checks the protocol models with SPIN: every configuration in the table
# below is compiled into a verifier (pan, built with gcc) and searched
# exhaustively. "pass" rows must end with no error; "fail" rows are the
# mutations (a known-wrong rule) and must end with one, which shows the
# properties can fail. Prints one line per row: states explored, seconds,
# outcome. Exit status 0 only when every row came out as expected.
#
#   verification/check.sh            the whole table (what ctest runs)
#   verification/check.sh proxy      only the rows of one model
#   KEEP=1 verification/check.sh     keep the work folder (trails of failures)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
only=${1:-}
command -v spin >/dev/null || { echo "check.sh: spin not found (Debian package spin)" >&2; exit 1; }
command -v gcc >/dev/null || { echo "check.sh: gcc not found" >&2; exit 1; }

work=$(mktemp -d)
if [ -z "${KEEP:-}" ]; then trap 'rm -rf "$work"' EXIT; else echo "work folder: $work"; fi

# model  expect  settings (spin -D...)
table=(
  "oneshot_p2p pass -DNRANKS=2"
  "oneshot_p2p pass -DNRANKS=3"
  "oneshot_p2p pass -DNRANKS=3 -DMISMATCH"
  "oneshot_p2p pass -DNRANKS=3 -DDIES=1"
  "oneshot_p2p pass -DNRANKS=2 -DDIES=0 -DMISMATCH"
  "oneshot_p2p pass -DNRANKS=3 -DGRAPH -DEPOCH0=254"
  "oneshot_p2p fail -DNRANKS=2 -DFLAG_BEFORE_DATA"
  "oneshot_p2p fail -DNRANKS=2 -DONE_PHASE"
  "oneshot_p2p fail -DNRANKS=2 -DNO_CLEAR"
  "oneshot_p2p fail -DNRANKS=2 -DGRAPH -DBAKED_CALL"
  "proxy pass -DNRANKS=2"
  "proxy pass -DNRANKS=3"
  "proxy pass -DNRANKS=2 -DSTAGED"
  "proxy pass -DNRANKS=2 -DMISMATCH"
  "proxy pass -DNRANKS=2 -DDIES=1"
  "proxy pass -DNRANKS=2 -DSTAGED -DDIES=0 -DMISMATCH"
  "proxy pass -DNRANKS=2 -DGRAPH -DEPOCH0=254"
  "proxy fail -DNRANKS=2 -DRING_BEFORE_STAGE"
  "proxy fail -DNRANKS=2 -DFLAG_BEFORE_DATA"
  "proxy fail -DNRANKS=2 -DONE_PHASE"
  "device_api pass -DNRANKS=3"
  "device_api pass -DNRANKS=3 -DDIES=2"
  "device_api pass -DNRANKS=3 -DMISMATCH"
  "device_api pass -DNRANKS=3 -DGRAPH -DEPOCH0=254"
  "device_api fail -DNRANKS=2 -DONE_PHASE"
  "device_api fail -DNRANKS=2 -DGRAPH -DHOST_CALL"
)

# One row: the verifier's outcome (pass or fail) and its state count.
check_row() {
  local model=$1 dir=$2
  shift 2
  mkdir -p "$dir"
  (cd "$dir" && spin "$@" -a "$here/$model.pml" >spin.log 2>&1) || { cat "$dir/spin.log" >&2; return 1; }
  # -w: pan.c is generated; its bounds-checked array writes warn under gcc -O2.
  (cd "$dir" && gcc -w -O2 -DSAFETY -DCOLLAPSE -o pan pan.c) || return 1
  # -m: a search depth no row comes near (the deepest reaches about 1000).
  (cd "$dir" && ./pan -m200000 >pan.log 2>&1) || true
  if grep -q "max search depth too small" "$dir/pan.log"; then
    echo "check.sh: $model $*: the search was cut at its depth bound" >&2
    return 1
  fi
  grep -q "errors: 0" "$dir/pan.log" && echo pass || echo fail
}

unexpected=0
rows=0
printf "%-12s %-46s %12s %7s  %s\n" model settings states seconds outcome
for row in "${table[@]}"; do
  read -r model expect settings <<<"$row"
  [ -n "$only" ] && [ "$only" != "$model" ] && continue
  rows=$((rows + 1))
  dir="$work/$rows"
  start=$(date +%s%N)
  # shellcheck disable=SC2086  # settings are separate -D words
  outcome=$(check_row "$model" "$dir" $settings) || { echo "check.sh: $model $settings did not run" >&2; exit 1; }
  ms=$((($(date +%s%N) - start) / 1000000))
  states=$(awk '/states, stored/ {print $1; exit}' "$dir/pan.log")
  note=""
  if [ "$outcome" = fail ]; then note="($(grep -m1 -o 'assertion violated.*\|invalid end state.*' "$dir/pan.log"))"; fi
  mark=ok
  if [ "$outcome" != "$expect" ]; then mark=UNEXPECTED; unexpected=$((unexpected + 1)); fi
  printf "%-12s %-46s %12s %4d.%d  %s, as %s %s\n" "$model" "$settings" "${states:-?}" $((ms / 1000)) $((ms % 1000 / 100)) "$outcome" \
    "$([ "$mark" = ok ] && echo expected || echo NOT expected)" "$note"
  [ "$mark" = ok ] || sed -n '1,40p' "$dir/pan.log" >&2
done
[ "$rows" -gt 0 ] || { echo "check.sh: no model named '$only'" >&2; exit 1; }
if [ "$unexpected" -ne 0 ]; then echo "check.sh: $unexpected of $rows rows came out other than expected" >&2; exit 1; fi
echo "check.sh: all $rows rows as expected"
