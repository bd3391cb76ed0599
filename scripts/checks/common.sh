# SPDX-License-Identifier: BSD-3-Clause
# Sourced by the checks: the commit they compare against. RCN_CHECK_BASE
# names one (a branch's fork point, for a check of that branch alone); else
# .ci/check-base, the last commit before the commit and format rules.
check_base() {
  local base=${RCN_CHECK_BASE:-$(head -1 .ci/check-base)}
  if ! git rev-parse -q --verify "$base^{commit}" >/dev/null 2>&1; then
    return 1  # not in this clone's history (a shallow clone, say)
  fi
  echo "$base"
}
