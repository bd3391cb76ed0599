#!/usr/bin/env bash
# Sets up a fresh machine (Debian 12 with the CUDA toolkit) and runs every test.
# GPU tests skip where there is no GPU and run fully where there is.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
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
