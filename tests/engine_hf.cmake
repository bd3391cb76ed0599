# SPDX-License-Identifier: BSD-3-Clause
# rcn_engine_hf (examples/engine/hf): Hugging Face checkpoints and
# tokenizer.json. The library is built only where nlohmann-json is found
# (the same test as examples/engine/hf/CMakeLists.txt makes); without it a
# stand-in whose one case skips takes their names. The tokenizer test's
# cases skip when the library was built without PCRE2.
if(ROCENANTE_BUILD_EXAMPLES)
  find_package(nlohmann_json 3 QUIET)
  if(nlohmann_json_FOUND)
    rcn_add_test(test_engine_hf SOURCES test_engine_hf.cc test_engine_hf_writer.cc test_engine_naive.cc
      LIBS rcn_engine_hf rcn_engine_models nlohmann_json::nlohmann_json TIMEOUT 120)
    rcn_add_test(test_engine_hf_tokenizer SOURCES test_engine_hf_tokenizer.cc test_engine_hf_writer.cc
      LIBS rcn_engine_hf rcn_engine_models nlohmann_json::nlohmann_json TIMEOUT 60)
    # The CLI case runs the rcn_engine program on a random model + tokenizer.json.
    add_dependencies(test_engine_hf_tokenizer rcn_engine)
    target_compile_definitions(test_engine_hf_tokenizer PRIVATE RCN_ENGINE_BIN="$<TARGET_FILE:rcn_engine>")
  else()
    rcn_add_test(test_engine_hf SOURCES test_engine_hf_skip.cc)
    rcn_add_test(test_engine_hf_tokenizer SOURCES test_engine_hf_skip.cc)
  endif()
endif()
