#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Every commit after the base (merges aside) has a subject "area: imperative
# subject" of at most 72 characters, a blank line, then a body (docs/CONTRIBUTING.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/checks/common.sh
if ! git rev-parse -q --verify HEAD >/dev/null 2>&1; then echo "commits: no git history; skipped"; exit 0; fi
if ! base=$(check_base); then echo "commits: the base commit is not in this clone; skipped"; exit 0; fi

bad=0
complain() { echo "commits: $1 ${2:0:72}: $3" >&2; bad=1; }
for commit in $(git rev-list --no-merges "$base..HEAD"); do
  short=$(git rev-parse --short "$commit")
  subject=$(git log -1 --format=%s "$commit")
  second=$(git log -1 --format=%B "$commit" | sed -n 2p)
  body=$(git log -1 --format=%b "$commit" | tr -d '[:space:]')
  # area: lower-case words, paths or names joined by '/', '-', '_', '.' or ', '.
  if ! [[ "$subject" =~ ^[a-z0-9][A-Za-z0-9_./+-]*(,\ [a-z0-9][A-Za-z0-9_./+-]*)*:\ [^[:space:]] ]]; then
    complain "$short" "$subject" "the subject is not 'area: imperative subject'"
  fi
  if [ "${#subject}" -gt 72 ]; then complain "$short" "$subject" "the subject has ${#subject} characters (at most 72)"; fi
  if [ -n "$second" ]; then complain "$short" "$subject" "no blank line after the subject"; fi
  if [ -z "$body" ]; then complain "$short" "$subject" "no body saying why"; fi
done
if [ "$bad" = 0 ]; then echo "commits: every commit after ${base:0:12} has a well-formed message"; fi
exit "$bad"
