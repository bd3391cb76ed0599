#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Sets up a fresh machine (Debian 12 with the CUDA toolkit) and runs every test.
# GPU tests skip where there is no GPU and run fully where there is.
# The checks of commit messages, formatting and license lines run first
# (scripts/checks/all.sh; docs/CONTRIBUTING.md); their failure fails the run
# after the tests, so that one run reports both.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
checks=0
bash scripts/checks/all.sh || checks=1
source scripts/env.sh
configure_build
build_targets
ctest --test-dir "$BUILD_DIR" --output-on-failure --timeout 600
# The CPU suite again under ASan+UBSan and TSan, then every fuzz target for
# 40 s (docs/RELIABILITY.md); RCN_SKIP_SANITIZERS=1 leaves them out.
if [ "${RCN_SKIP_SANITIZERS:-0}" != 1 ]; then
  bash scripts/sanitize.sh
  bash scripts/fuzz.sh 40
fi
exit "$checks"
