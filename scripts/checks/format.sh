#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# The C++ and CUDA lines changed since the base follow .clang-format (lines
# nobody touched are left as they are). --fix formats them in the working tree.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/checks/common.sh
if ! git rev-parse -q --verify HEAD >/dev/null 2>&1; then echo "format: no git history; skipped"; exit 0; fi
if ! base=$(check_base); then echo "format: the base commit is not in this clone; skipped"; exit 0; fi
if ! command -v git-clang-format >/dev/null; then
  echo "format: git-clang-format is missing (scripts/install-deps.sh installs clang-format)" >&2
  exit 1
fi
# Copies of other projects' headers keep their own style.
paths=(':(exclude)plugin/nccl/**' ':(exclude)plugin/forwarders.cc' ':(exclude)plugin/real_nccl.h' ':(exclude)plugin/real_nccl.def' ':(exclude)tests/fixtures/**' ':(exclude)fuzz/corpus/**')
# Only C++ and CUDA: git-clang-format would also take JSON and other files.
ext=(--extensions c,cc,cpp,cxx,h,hh,hpp,cu,cuh)
if [ "${1:-}" = "--fix" ]; then
  git clang-format --force --quiet --style=file "${ext[@]}" "$base" -- "${paths[@]}" || true
  exit 0
fi
out=$(git clang-format --diff --style=file "${ext[@]}" "$base" -- "${paths[@]}" 2>&1 || true)
if [ -z "$out" ] || [[ "$out" == *"no modified files to format"* ]] || [[ "$out" == *"did not modify any files"* ]]; then
  echo "format: the lines changed since ${base:0:12} follow .clang-format"
  exit 0
fi
echo "$out" >&2
echo "format: the lines above do not follow .clang-format; scripts/checks/format.sh --fix formats them" >&2
exit 1
