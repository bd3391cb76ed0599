# SPDX-License-Identifier: BSD-3-Clause
rcn_sources(rocenante_internal
  log.cc params.cc nccl_lib.cc policy.cc user_file.cc policy_file.cc launch_env.cc rank_threads.cc
  socket.cc auth.cc bootstrap.cc bootstrap_tcp.cc bootstrap_wire.cc rendezvous_wire.cc bootstrap_env.cc bootstrap_key.cc bootstrap_local.cc
  bootstrap_nccl.cc
  comm.cc comm_collectives.cc fast_path.cc device_drain.cc device_memory.cc
  selftest.cc selftest_support.cc selftest_collectives.cc
  residual_norm.cc residual_norm_host.cc
  api.cc api_collectives.cc api_launch.cc api_residual_norm.cc)
