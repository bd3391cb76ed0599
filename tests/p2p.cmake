# SPDX-License-Identifier: BSD-3-Clause
# The p2p transport and the one-shot kernel (GPU: skip without 2 GPUs).
# test_p2p_local: every rank in one process; test_p2p_ipc: one process per
# GPU (forked before any CUDA call) plus the timeout test; test_p2p_api: the
# same through the public rcn* API; test_device_api: rocenante/device.cuh.
set(RCN_P2P_HARNESS ${CMAKE_CURRENT_LIST_DIR}/p2p_harness.cc ${CMAKE_CURRENT_LIST_DIR}/p2p_build.cc)
rcn_add_test(test_p2p_local SOURCES test_p2p_local.cc ${RCN_P2P_HARNESS} LABELS gpu p2p TIMEOUT 300)
rcn_add_test(test_p2p_ipc SOURCES test_p2p_ipc.cc ${RCN_P2P_HARNESS} LABELS gpu p2p TIMEOUT 600)
rcn_add_test(test_reference SOURCES test_reference.cc LABELS cpu p2p TIMEOUT 120)
# A latency probe to guide tuning (not a test): scripts/gpu/p2p.sh runs it.
add_executable(p2p_latency p2p_latency.cc p2p_build.cc p2p_harness.cc)
target_link_libraries(p2p_latency PRIVATE rcn_test_support)
# The proxy path's latency with both ranks on one GPU, to compare builds (not a test).
add_executable(proxy_latency_local proxy_latency_local.cc p2p_build.cc p2p_harness.cc)
target_link_libraries(proxy_latency_local PRIVATE rcn_test_support)
rcn_add_test(test_p2p_api SOURCES test_p2p_api.cc p2p_harness.cc LABELS gpu p2p api TIMEOUT 600)
rcn_add_test(test_p2p_api_local SOURCES test_p2p_api_local.cc p2p_harness.cc LABELS gpu p2p api TIMEOUT 300)
rcn_add_test(test_p2p_fd SOURCES test_p2p_fd.cc LABELS cpu p2p TIMEOUT 120)
rcn_add_test(test_device_api SOURCES test_device_api.cu LABELS gpu p2p api TIMEOUT 300)
rcn_add_test(test_p2p_collectives SOURCES test_p2p_collectives.cc LABELS gpu p2p api TIMEOUT 600)
# rcnAllReduceResidualRmsNorm on GPUs (fused, composed, graphs, NCCL's fallback).
rcn_add_test(test_residual_norm_gpu SOURCES test_residual_norm_gpu.cc LABELS gpu p2p api TIMEOUT 300)
# Soak on the p2p path (GPU host; RCN_SOAK_CALLS, default 10^5): see docs/RELIABILITY.md.
rcn_add_test(test_soak_gpu SOURCES test_soak_gpu.cc p2p_harness.cc LABELS gpu p2p soak TIMEOUT 900)
