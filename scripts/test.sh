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
