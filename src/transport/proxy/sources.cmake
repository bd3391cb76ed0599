# SPDX-License-Identifier: BSD-3-Clause
rcn_sources(rocenante_internal proxy_path.cc proxy_engine.cc region_placement.cc proxy_kernel.cu)
