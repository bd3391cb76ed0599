# SPDX-License-Identifier: BSD-3-Clause
# The bootstrap: TCP ranks as forked processes, the in-process group as threads. CPU only.
rcn_add_test(test_bootstrap SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_bootstrap.cc LABELS cpu bootstrap TIMEOUT 120)
rcn_add_test(test_auth SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_auth.cc LABELS cpu bootstrap TIMEOUT 60)
