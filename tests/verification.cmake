# SPDX-License-Identifier: BSD-3-Clause
# The SPIN models of the exchange protocols (verification/): every healthy,
# mismatched, dying and replayed configuration must verify, and every
# mutation must fail. Needs spin and gcc (scripts/install-deps.sh installs
# spin); about 1.5 minutes on 2 cores, at most about 0.5 GB at once.
add_test(NAME test_protocol_model COMMAND bash ${PROJECT_SOURCE_DIR}/verification/check.sh)
set_tests_properties(test_protocol_model PROPERTIES TIMEOUT 600 LABELS model)
