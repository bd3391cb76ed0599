# SPDX-License-Identifier: BSD-3-Clause
rcn_sources(rocenante_internal cumem_api.cc fd_passing.cc ipc_memory.cc p2p_path.cc p2p_create.cc
  p2p_residual_norm.cc)
