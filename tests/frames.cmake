# SPDX-License-Identifier: BSD-3-Clause
# The checks of what peers send (bootstrap, rendezvous, tcp frames, shm
# segments), called as functions of the bytes; fuzz/ fuzzes the same code.
rcn_add_test(test_network_frames SOURCES ${CMAKE_CURRENT_LIST_DIR}/test_network_frames.cc LABELS cpu bootstrap wire
  TIMEOUT 30)
