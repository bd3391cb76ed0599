#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Runs every libFuzzer target (fuzz/) for a bounded time each and prints a
# table of executions, coverage and findings (docs/RELIABILITY.md).
# usage: scripts/fuzz.sh [SECONDS_EACH] [TARGET...]
#   SECONDS_EACH: 40 by default (what scripts/test.sh runs: ~10 minutes for
#   all); give 3600 for a long run. TARGET: fuzz_policy, ... (all by default).
# Needs scripts/sanitize.sh asan's build (build-asan; built here if absent).
# New inputs go to build-asan/fuzz-corpus/TARGET, the seeds in
# fuzz/corpus/TARGET are only read; an input that fails is written to
# build-asan/fuzz-findings/ and the script exits 1: reduce it, fix the code,
# and add it to fuzz/corpus/TARGET as regress-NAME, which ctest then replays.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${1:-40}
shift || true
DIR=build-asan
if [ ! -d "$DIR/fuzz" ]; then
  echo "fuzz.sh: no $DIR/fuzz; building it (scripts/sanitize.sh asan builds and tests it)"
  source scripts/env.sh
  bash scripts/sanitize.sh --build-only asan
fi
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  mapfile -t TARGETS < <(find "$DIR/fuzz" -maxdepth 1 -type f -name 'fuzz_*' -executable -printf '%f\n' | sort)
fi
FINDINGS=$DIR/fuzz-findings
mkdir -p "$FINDINGS"
export ASAN_OPTIONS="detect_leaks=1:handle_sigbus=0:protect_shadow_gap=0"  # as scripts/sanitize.sh
failed=0
printf '%-26s %8s %12s %8s %8s %8s  %s\n' target seconds executions cov ft corpus result
for target in "${TARGETS[@]}"; do
  work=$DIR/fuzz-corpus/$target
  mkdir -p "$work"
  log=$DIR/fuzz-$target.log
  # -timeout: one input running longer is a hang; -rss_limit_mb: memory a finding.
  if "$DIR/fuzz/$target" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$FINDINGS/$target-" "$work" "fuzz/corpus/$target" >"$log" 2>&1; then
    result=ok
  else
    result="FINDING (see $log, $FINDINGS)"
    failed=1
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+ corp: [0-9]+' "$log" | tail -1 || true)
  read -r _ c _ f _ n <<<"${cov:-cov: ? ft: ? corp: ?}"
  printf '%-26s %8s %12s %8s %8s %8s  %s\n' "$target" "$SECONDS_EACH" "${execs:-?}" "$c" "$f" "$n" "$result"
done
exit $failed
