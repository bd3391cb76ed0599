#!/usr/bin/env bash
# Installs what rocenante needs to build and test on a fresh Debian 12 machine.
# Catch2 v3 lives in bookworm-backports; the backports entry is derived from the
# machine's own Debian source, so no mirror host is named here.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

add_backports() {
  local list=/etc/apt/sources.list.d/rocenante-backports.list
  [ -f "$list" ] && return 0
  if grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null; then return 0; fi
  local uri=""
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1=="deb" && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list)
  fi
  if [ -z "$uri" ]; then echo "install-deps: no Debian apt source found to derive backports from" >&2; return 1; fi
  echo "deb $uri bookworm-backports main" | $SUDO tee "$list" >/dev/null
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
