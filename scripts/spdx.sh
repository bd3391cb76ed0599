#!/usr/bin/env bash
# The license line of every source file: "SPDX-License-Identifier: BSD-3-Clause"
# in the file's comment syntax, first (after a #! line).
#   scripts/spdx.sh          lists the files without it; fails if there are any
#   scripts/spdx.sh --apply  adds it to them
# Files that carry their own notice (a "Copyright" line near the top: copies
# of another project's headers) and test fixtures keep theirs.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly TAG="SPDX-License-Identifier: BSD-3-Clause"

# Tracked source files: C, C++ and CUDA, Python, shell, CMake.
source_files() {
  git ls-files -- '*.cc' '*.h' '*.cu' '*.cuh' '*.def' '*.py' '*.sh' '*.cmake' '*CMakeLists.txt' \
    ':(exclude)tests/fixtures/**'
}

comment_of() {
  case "$1" in
    *.cc | *.h | *.cu | *.cuh | *.def) echo "//" ;;
    *) echo "#" ;;
  esac
}

has_tag() { head -n 3 "$1" | grep -q "SPDX-License-Identifier:"; }
own_notice() { head -n 15 "$1" | grep -qi "copyright"; }

add_tag() {
  local file=$1 line
  line="$(comment_of "$file") $TAG"
  if head -n 1 "$file" | grep -q '^#!'; then
    { head -n 1 "$file"; echo "$line"; tail -n +2 "$file"; } > "$file.spdx"
  else
    { echo "$line"; cat "$file"; } > "$file.spdx"
  fi
  chmod --reference="$file" "$file.spdx"
  mv "$file.spdx" "$file"
}

missing=()
while IFS= read -r file; do
  [ -f "$file" ] || continue
  has_tag "$file" || own_notice "$file" || missing+=("$file")
done < <(source_files)

if [ "${1:-}" = "--apply" ]; then
  for file in "${missing[@]}"; do add_tag "$file"; done
  echo "spdx: added the license line to ${#missing[@]} files"
  exit 0
fi
if [ "${#missing[@]}" -gt 0 ]; then
  for file in "${missing[@]:0:20}"; do echo "spdx: no license line: $file" >&2; done
  echo "spdx: ${#missing[@]} files lack '$TAG'; scripts/spdx.sh --apply adds it" >&2
  exit 1
fi
echo "spdx: every source file carries its license line"
