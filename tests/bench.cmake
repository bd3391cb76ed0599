# SPDX-License-Identifier: BSD-3-Clause
# CPU tests of allreduce_sweep's pure parts (bench/): sizes, statistics,
# tables/CSV/JSON, the policy it writes, launch variables, the reference check.
if(ROCENANTE_BUILD_BENCH)  # rcn_bench_core is defined in bench/, added after tests/
  rcn_add_test(test_bench
    SOURCES test_bench_options.cc test_bench_report.cc test_bench_launch.cc test_bench_check.cc
    LIBS rcn_bench_core
    LABELS cpu bench
    TIMEOUT 120)
  # The program refuses graph timing where there are no CUDA graphs (it ran eagerly, unsaid).
  add_test(NAME test_bench_graph_on_host COMMAND allreduce_sweep --mode graph --max-bytes 64)
  set_tests_properties(test_bench_graph_on_host PROPERTIES ENVIRONMENT ROCENANTE_BACKEND=host
    PASS_REGULAR_EXPRESSION "the host backend has none" FAIL_REGULAR_EXPRESSION "time\\(us\\)"
    TIMEOUT 60 LABELS "cpu;bench")
  # One rank has no fast path: no row may claim to time rocenante's one-shot.
  add_test(NAME test_bench_one_rank COMMAND allreduce_sweep --gpus 1 --max-bytes 64)
  set_tests_properties(test_bench_one_rank PROPERTIES ENVIRONMENT ROCENANTE_BACKEND=host
    PASS_REGULAR_EXPRESSION "rcn-oneshot: n/a: one rank" FAIL_REGULAR_EXPRESSION "\\(rcn-oneshot\\), "
    TIMEOUT 60 LABELS "cpu;bench")
  # collectives_sweep on the host backend, two ranks: every point checked
  # exactly before it is timed (an ERROR column fails it).
  add_test(NAME test_bench_collectives_host COMMAND collectives_sweep --gpus 2 --max-bytes 32K)
  set_tests_properties(test_bench_collectives_host PROPERTIES ENVIRONMENT ROCENANTE_BACKEND=host
    PASS_REGULAR_EXPRESSION "# reduce-scatter, 2 ranks" FAIL_REGULAR_EXPRESSION "ERROR"
    TIMEOUT 60 LABELS "cpu;bench")
  # The plot script, when matplotlib is installed (skipped otherwise).
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    add_test(NAME test_bench_plot
      COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/test_plot_sweep.py
              ${CMAKE_SOURCE_DIR}/bench/plot_sweep.py)
    set_tests_properties(test_bench_plot PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120 LABELS "cpu;bench")
  endif()
endif()
