# SPDX-License-Identifier: BSD-3-Clause
# The Python package's pytest suite (tests/python/test_*.py), run with the
# Python the extension was built for (install-deps.sh's venv), importing the
# package from <build>/python. GPU cases skip without GPUs.
if(TARGET _rocenante)
  add_test(NAME test_python
    COMMAND ${ROCENANTE_PYTHON_EXECUTABLE} -m pytest -q -p no:cacheprovider ${CMAKE_CURRENT_SOURCE_DIR}/python)
  set_tests_properties(test_python PROPERTIES TIMEOUT 900 LABELS python
    ENVIRONMENT "PYTHONPATH=${CMAKE_BINARY_DIR}/python;NCCL_NVLS_ENABLE=0;TORCH_SYMM_MEM_DISABLE_MULTICAST=1;NVSHMEM_DISABLE_NVLS=1")
endif()

# `pip wheel .` builds the library a second time (the wheel's own CMake
# build, only the library and the extension, for this build's GPU
# architectures): about 5 minutes on 2 cores each. The second builds as a
# machine without the CUDA toolkit would, with NVIDIA's compiler from PyPI.
function(rcn_wheel_test name pytest_case)
  add_test(NAME ${name}
    COMMAND ${ROCENANTE_PYTHON_EXECUTABLE} -m pytest -q -rs -p no:cacheprovider
            ${CMAKE_CURRENT_SOURCE_DIR}/python/check_wheel.py::${pytest_case})
  set_tests_properties(${name} PROPERTIES TIMEOUT 1800 LABELS python
    ENVIRONMENT "RCN_PYTEST_WHEEL_CMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES};RCN_PYTEST_WHEEL_NCCL_INCLUDE_DIR=${NCCL_INCLUDE_DIR};NCCL_NVLS_ENABLE=0;TORCH_SYMM_MEM_DISABLE_MULTICAST=1;NVSHMEM_DISABLE_NVLS=1")
endfunction()
if(TARGET _rocenante)
  rcn_wheel_test(test_python_wheel test_pip_wheel)
  rcn_wheel_test(test_python_wheel_no_toolkit test_pip_wheel_without_toolkit)
endif()
