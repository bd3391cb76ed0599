#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installs what rocenante needs to build and test on a fresh Debian 12 machine.
# Catch2 v3 lives in bookworm-backports; the backports entry is derived from the
# machine's own Debian source, so no mirror host is named here.
set -euo pipefail
cd "$(dirname "$0")/.."  # .deps/ lies in the source tree

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
  # spin: the protocol models' checker (verification/check.sh).
  $SUDO apt-get install -y -qq --no-install-recommends \
    cmake ninja-build g++ pkg-config python3 python3-pip python3-venv python3-dev \
    libyaml-cpp-dev libhwloc-dev libibverbs-dev iproute2 \
    nlohmann-json3-dev libpcre2-dev libicu-dev clang-format git libssl-dev spin clang libclang-rt-14-dev >/dev/null
  $SUDO apt-get install -y -qq --no-install-recommends -t bookworm-backports catch2 >/dev/null
fi

# The pinned NCCL versions (RCN_NCCL_API_NEWEST, RCN_NCCL_API_FLOOR).
RCN_NCCL_API_NEWEST=$(bash -c 'source scripts/env.sh >/dev/null 2>&1; echo $RCN_NCCL_API_NEWEST')
RCN_NCCL_API_FLOOR=$(bash -c 'source scripts/env.sh >/dev/null 2>&1; echo $RCN_NCCL_API_FLOOR')

# NCCL's header and library, which the CUDA toolkit does not ship. Where no
# nccl.h is found (NCCL_ROOT, the toolkit's, the system's), NVIDIA's wheel of
# the pinned newest NCCL for this CUDA major version is unpacked into
# .deps/nccl; env.sh points NCCL_ROOT (and the loader) there.
nccl_header_found() {
  local dir
  for dir in "${NCCL_ROOT:-/nonexistent}/include" /usr/local/cuda/include /usr/include /usr/local/include \
             .deps/nccl/nvidia/nccl/include; do
    [ -f "$dir/nccl.h" ] && return 0
  done
  return 1
}
if ! nccl_header_found; then
  nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  cuda_major=$("$nvcc_bin" --version 2>/dev/null | sed -n 's/.*release \([0-9]*\)\..*/\1/p' | head -1)
  echo "install-deps: no nccl.h here: NCCL $RCN_NCCL_API_NEWEST for CUDA ${cuda_major:-13} into .deps/nccl" >&2
  if ! python3 -m pip install -q --no-deps --target .deps/nccl "nvidia-nccl-cu${cuda_major:-13}==$RCN_NCCL_API_NEWEST"; then
    echo "install-deps: could not install NCCL: install its development files or set NCCL_ROOT" >&2
    exit 1
  fi
fi

# The headers the shim's forwarders are generated from (the newest pinned NCCL)
# and must still build against (the floor): nccl.h alone from each wheel, a
# few small range reads. Only regenerating the forwarders needs them (and the
# test that checks the committed ones match), so being offline is no failure.
for version in "$RCN_NCCL_API_NEWEST" "$RCN_NCCL_API_FLOOR"; do
  header=.deps/nccl-api/$version/nccl.h
  [ -f "$header" ] && continue
  mkdir -p "$(dirname "$header")"
  python3 scripts/wheel_member.py "nvidia-nccl-cu13==$version" include/nccl.h "$header" >/dev/null ||
    echo "install-deps: nccl.h of NCCL $version not fetched; regenerating the forwarders needs it" >&2
done

# The sweep's plot script; optional (its test skips without it).
if command -v python3 >/dev/null && ! python3 -c "import matplotlib" 2>/dev/null; then
  python3 -m pip install -q matplotlib 2>/dev/null || echo "install-deps: matplotlib not installed; plots will be skipped" >&2
fi

# The Python package (python/): its build and tests run in a virtual
# environment, .deps/venv (RCN_VENV to choose), with PyTorch, nanobind,
# scikit-build-core and pytest from PyPI. PyPI's Linux torch is the CUDA build,
# which runs on the CPU as well; with the NVIDIA libraries it requires it is
# about 3 GB to download and 5.4 GB installed (about 80 s here).
venv=${RCN_VENV:-.deps/venv}
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import torch, nanobind, scikit_build_core, pytest" 2>/dev/null; then
  echo "install-deps: PyTorch, nanobind, scikit-build-core and pytest into $venv" >&2
  "$venv/bin/python" -m pip install -q "torch>=2.4" numpy nanobind scikit-build-core pytest
fi
