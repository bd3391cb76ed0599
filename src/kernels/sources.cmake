# SPDX-License-Identifier: BSD-3-Clause
target_sources(rocenante_internal PRIVATE ${CMAKE_CURRENT_LIST_DIR}/one_shot.cu
  ${CMAKE_CURRENT_LIST_DIR}/one_shot_collectives.cu ${CMAKE_CURRENT_LIST_DIR}/residual_norm.cu)
