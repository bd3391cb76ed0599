#!/usr/bin/env bash
# Installs what rocenante needs to build and test on a fresh Debian 12 machine.
# Catch2 v3 lives in bookworm-backports; the backports entry is derived from the
# machine's own Debian source, so no mirror host is named here.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

# The mirror that serves plain `bookworm`: its deb822 stanza (fields in any
# order, stanzas split by blank lines), else its one-line entry.
bookworm_uri() {
  local sources=/etc/apt/sources.list.d/debian.sources
  if [ -f "$sources" ]; then
    awk 'function stanza() { if (!found && uri != "" && bookworm) { print uri; found = 1 } uri = ""; bookworm = 0 }
         /^[[:space:]]*$/ { stanza(); next }
         /^URIs:/ { uri = $2 }
         /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") bookworm = 1 }
         END { stanza() }' "$sources"
  fi
  if [ -f /etc/apt/sources.list ]; then
    awk '$1 == "deb" { for (i = 3; i <= NF; i++) if ($i == "bookworm") { print $(i - 1); exit } }' /etc/apt/sources.list
  fi
}

add_backports() {
  local list=/etc/apt/sources.list.d/rocenante-backports.list
  # Another entry apt reads (not a comment, not a disabled file) already has it.
  local others=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources)
  for f in "${others[@]}"; do
    [ "$f" != "$list" ] && [ -f "$f" ] && grep -qE '^[^#]*bookworm-backports' "$f" && return 0
  done
  local uri
  uri=$(bookworm_uri | head -1)
  if [ -z "$uri" ]; then echo "install-deps: no Debian apt source for bookworm to derive backports from" >&2; return 1; fi
  local line="deb $uri bookworm-backports main"
  # Rewritten when it differs, so a wrong entry from an earlier run is mended.
  if [ -f "$list" ] && [ "$(cat "$list")" = "$line" ]; then return 0; fi
  echo "$line" | $SUDO tee "$list" >/dev/null
}

if command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  add_backports
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends \
    cmake ninja-build g++ pkg-config python3 \
    libyaml-cpp-dev libhwloc-dev libibverbs-dev iproute2 \
    nlohmann-json3-dev libpcre2-dev libicu-dev >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends -t bookworm-backports catch2 >/dev/null
fi

# The sweep's plot script; optional (its test skips without it).
if command -v python3 >/dev/null && ! python3 -c "import matplotlib" 2>/dev/null; then
  python3 -m pip install -q matplotlib 2>/dev/null || echo "install-deps: matplotlib not installed; plots will be skipped" >&2
fi
