#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# compute-sanitizer's four tools (memcheck, racecheck, synccheck, initcheck)
# over every GPU test program one GPU can run, with two-rank cases sharing it
# (ROCENANTE_TEST_SHARE_GPUS=1) and every wait scaled (the tests' own through
# ROCENANTE_TEST_TIMEOUT_SCALE, the library's defaults through
# ROCENANTE_TIMEOUT_MS and ROCENANTE_BOOTSTRAP_TIMEOUT_MS). Forked ranks are
# sanitized too (--target-processes all).
#
# Prints one line per (tool, program): the sanitizer's error count and the
# Catch2 case counts; the goal is 0 errors and no failed case everywhere.
# Runs that did not fit the time budget are listed as "not run", so a
# caller can go on with TOOLS/TESTS narrowed in the next call.
#
# Usage: OUT=... [TOOLS="memcheck initcheck"] [TESTS="test_p2p_local ..."]
#        [SCALE=20] [BUDGET_S=540] [PER_RUN_S=300] bash scripts/gpu/sanitize.sh
. "$(dirname "$0")/common.sh" sanitize "${SANITIZE_BUILD_DIR:-$(dirname "$0")/../../build-gpu}"
start=$(date +%s)  # the budget counts the build too: one call of the device tool is 600 s
TOOLS=(${TOOLS:-memcheck racecheck synccheck initcheck})
TESTS=(${TESTS:-test_p2p_collectives test_residual_norm_gpu test_p2p_local test_p2p_api_local test_p2p_ipc test_p2p_api test_device_api test_wire_proxy_gpu
  test_shim_gpu test_engine_kernels test_engine_gpu})
SCALE=${SCALE:-20}
BUDGET_S=${BUDGET_S:-540}
PER_RUN_S=${PER_RUN_S:-300}

SANITIZER=$(command -v compute-sanitizer || true)
for candidate in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -z "$SANITIZER" ] && [ -x "$candidate" ] && SANITIZER=$candidate
done
if [ -z "$SANITIZER" ]; then
  result compute-sanitizer "not found (CUDA toolkit's compute-sanitizer/)"
  exit 1
fi
say "sanitizer: $SANITIZER ($("$SANITIZER" --version | tail -1))"
gpu_build "" "${TESTS[@]}"

export ROCENANTE_TEST_SHARE_GPUS=1 ROCENANTE_TEST_TIMEOUT_SCALE=$SCALE
export ROCENANTE_TIMEOUT_MS=$((10000 * SCALE)) ROCENANTE_BOOTSTRAP_TIMEOUT_MS=$((30000 * SCALE))

# The Catch2 summary line of a log: "passed N failed N skipped N", or why none.
cases_of() {
  local log=$1 line
  line=$(grep -E "^All tests passed|^test cases:" "$log" | tail -1)
  if [[ $line == All\ tests\ passed* ]]; then
    echo "all passed ($(sed -E 's/.*in ([0-9]+) test case.*/\1/' <<< "$line") cases)"
  elif [ -n "$line" ]; then
    echo "$line"
  elif grep -q "No test cases matched\|skipped" "$log"; then
    echo "all skipped"
  else
    echo "no Catch2 summary (crashed or killed)"
  fi
}

for tool in "${TOOLS[@]}"; do
  for t in "${TESTS[@]}"; do
    if [ $(( $(date +%s) - start + 30 )) -ge "$BUDGET_S" ]; then
      result "$tool $t" "not run (time budget)"
      continue
    fi
    run_log=$OUT/$tool-$t.log
    left=$(( BUDGET_S - ($(date +%s) - start) ))
    limit=$(( left < PER_RUN_S ? left : PER_RUN_S ))
    # racecheck looks at shared memory only; synccheck and initcheck need nothing extra.
    # API errors are not the tools' findings and are left out of the count: the tests
    # provoke some on purpose (a GPU that does not exist, a wait during a graph capture),
    # NCCL's init probes kernels it has no image for, and rocenante checks every return.
    timeout --signal=TERM --kill-after=10 "$limit" "$SANITIZER" --tool "$tool" --target-processes all \
      --report-api-errors no --error-exitcode 99 --print-limit 50 "$BUILD/tests/$t" > "$run_log" 2>&1
    rc=$?
    errors=$(grep -oE "ERROR SUMMARY: [0-9]+" "$run_log" | awk '{s += $3} END {print s + 0}')
    outcome="rc $rc, sanitizer errors $errors, $(cases_of "$run_log")"
    [ "$rc" = 124 ] && outcome="$outcome, TIMED OUT after ${limit}s"
    [ "$rc" = 77 ] && outcome="rc 77 (every case skipped), sanitizer errors $errors"
    result "$tool $t" "$outcome"
  done
done
say "summary ($(( $(date +%s) - start )) s)"
printf '%s\n' "${SUMMARY[@]}" | tee -a "$LOG"
