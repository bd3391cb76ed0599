#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Installs the build into a scratch prefix, then builds and runs a small user
# project against it twice: through find_package(rocenante) and through
# pkg-config. Usage: test_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

cmake --install "$build" --prefix "$scratch/prefix" > "$scratch/install.log"
lib=$(find "$scratch/prefix" -name 'librocenante.so.0' | head -1)
[ -n "$lib" ] || { echo "FAIL: librocenante.so.0 (versioned soname) not installed"; exit 1; }
[ -f "$scratch/prefix/include/rocenante/rocenante.h" ] || { echo "FAIL: header not installed"; exit 1; }
[ -x "$scratch/prefix/bin/rocenante-probe" ] || { echo "FAIL: rocenante-probe not installed"; exit 1; }
# libibverbs is opened at run time: no package file may ask a consumer to link it, and no
# installed file may point back into the build or source tree.
if grep -rqs ibverbs "$scratch/prefix/lib"*/cmake "$scratch/prefix/lib"*/pkgconfig; then
  echo "FAIL: the installed CMake or pkg-config files name libibverbs"; exit 1
fi
if grep -rqsF -e "$src" -e "$(cd "$build" && pwd)" "$scratch/prefix/lib"*/cmake "$scratch/prefix/lib"*/pkgconfig; then
  echo "FAIL: the installed CMake or pkg-config files name the build or source tree"; exit 1
fi

# Ninja, which install-deps.sh installs (make comes only with cmake's recommends).
cmake -G Ninja -S "$src/tests/install_consumer" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  > "$scratch/consumer.log" 2>&1 || { cat "$scratch/consumer.log"; echo "FAIL: find_package"; exit 1; }
cmake --build "$scratch/consumer" > "$scratch/build.log" 2>&1 || { cat "$scratch/build.log"; exit 1; }
LD_LIBRARY_PATH=$(dirname "$lib") "$scratch/consumer/consumer"

pcdir=$(dirname "$(find "$scratch/prefix" -name rocenante.pc | head -1)")
flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs rocenante)
c++ -o "$scratch/pc-consumer" "$src/tests/install_consumer/main.cc" $flags
LD_LIBRARY_PATH=$(dirname "$lib") "$scratch/pc-consumer"
echo "install test passed"
