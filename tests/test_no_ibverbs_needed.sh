#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# librocenante.so opens libibverbs at run time: a DT_NEEDED entry on it, or an
# undefined ibv_* symbol, would keep the library from loading on a machine
# without rdma-core. Usage: test_no_ibverbs_needed.sh LIBRARY
# Exits 77 (skipped) without readelf and objdump.
set -euo pipefail
lib=$1
if command -v readelf > /dev/null; then
  needed=$(readelf -d "$lib" | awk '/\(NEEDED\)/ { gsub(/[][]/, "", $NF); print $NF }')
  undefined=$(readelf -W --dyn-syms "$lib" | awk '$7 == "UND" && $8 ~ /^ibv_/ { print $8 }')
elif command -v objdump > /dev/null; then
  needed=$(objdump -p "$lib" | awk '$1 == "NEEDED" { print $2 }')
  undefined=$(objdump -T "$lib" | awk '/\*UND\*/ && $NF ~ /^ibv_/ { print $NF }')
else
  echo "SKIP: neither readelf nor objdump"
  exit 77
fi
echo "NEEDED by $lib:" $needed
# libc is always needed: an empty list means the tool's output was not understood.
grep -q '^libc\.so' <<< "$needed" || { echo "FAIL: no NEEDED entry read (libc expected)"; exit 1; }
if grep -q 'libibverbs' <<< "$needed"; then echo "FAIL: $lib needs libibverbs"; exit 1; fi
if [ -n "$undefined" ]; then echo "FAIL: undefined ibverbs symbols:" $undefined; exit 1; fi
echo "no libibverbs dependency"
