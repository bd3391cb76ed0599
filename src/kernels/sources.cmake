# SPDX-License-Identifier: BSD-3-Clause
rcn_sources(rocenante_internal one_shot.cu one_shot_collectives.cu residual_norm.cu)
