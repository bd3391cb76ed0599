#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The checks that need no build, run first by scripts/test.sh: commit
# messages, formatting of the changed lines, license lines. Each runs to the
# end so that one run reports every failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
failed=()
bash scripts/checks/commits.sh || failed+=(commits)
bash scripts/checks/format.sh || failed+=(format)
bash scripts/spdx.sh || failed+=(spdx)
if [ "${#failed[@]}" -gt 0 ]; then
  echo "checks failed: ${failed[*]} (docs/CONTRIBUTING.md)" >&2
  exit 1
fi
