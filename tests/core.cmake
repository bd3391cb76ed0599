rcn_add_test(test_params SOURCES test_params.cc LABELS cpu)
target_compile_definitions(test_params PRIVATE RCN_PARAMS_DOC="${CMAKE_SOURCE_DIR}/docs/PARAMS.md")
rcn_add_test(test_api SOURCES test_api.cc LABELS cpu)
