#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Builds the topology tests and rocenante-probe from source, runs them, then
# runs the probe alone (table and --json) and as 2 ranks (one per GPU) over
# MASTER_ADDR=127.0.0.1. Expected on 2x H200 with NVLink: the GPU pair shows
# as NVLink, class single_host, rocenante used on the p2p path. Writes
# $OUT/topology.log and $OUT/topology-probe.json; prints a summary last.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
. "$(dirname "$0")/common.sh" topology "${TOPOLOGY_BUILD_DIR:-/tmp/build-topology}"

gpu_build "" test_topology rocenante-probe
PROBE=$BUILD/tools/rocenante-probe/rocenante-probe
nvidia-smi -L >> "$LOG" 2>&1
nvidia-smi topo -m >> "$LOG" 2>&1

TESTS=FAIL
(cd "$BUILD" && timeout 300 ctest -R topology --output-on-failure) >> "$LOG" 2>&1 && TESTS=ok

say "probe alone"
timeout 60 "$PROBE" >> "$LOG" 2>&1
timeout 60 "$PROBE" --json > "$OUT/topology-probe.json" 2>> "$LOG"
cat "$OUT/topology-probe.json" >> "$LOG"

say "probe as 2 ranks"
PORT=$((20000 + $$ % 20000))
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT timeout 120 "$PROBE" \
    > "$OUT/probe-rank$r.txt" 2>&1 &
done
wait
cat "$OUT/probe-rank0.txt" "$OUT/probe-rank1.txt" >> "$LOG"

say "summary"
LINKS=$(grep -E "GPU 0 <-> GPU 1" "$OUT/probe-rank0.txt" | head -1)
DMABUF=$(python3 -c "import json;d=json.load(open('$OUT/topology-probe.json'));g=d['ranks'][0]['gpus'];print(' '.join('gpu%d:gdr=%s,dmabuf=%s,cc=%s'%(x['index'],x['gdr'],x['dmabuf'],x['cc']) for x in g))" 2>&1)
{
  echo "tests: $TESTS"
  echo "link: ${LINKS:-none printed}"
  echo "gpus: $DMABUF"
  grep -h "^rank [01]/2:" "$OUT/probe-rank0.txt" "$OUT/probe-rank1.txt"
} | tee -a "$LOG"
