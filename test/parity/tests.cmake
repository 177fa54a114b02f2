# PyTorch interop tests (included from test/CMakeLists.txt).
#
# PyTorch -> gridnn: test_safetensors reads fixtures/torch_written.safetensors, written by
# make_safetensors_fixture.py. gridnn -> PyTorch: safetensors_loads_in_torch runs
# write_safetensors_sample, then check_torch_load.py reads the file with the reference
# reader. It needs a Python with torch and safetensors; without them it is skipped.
if(EXISTS "${CMAKE_SOURCE_DIR}/.venv/bin/python")
  set(_gridnn_parity_python_default "${CMAKE_SOURCE_DIR}/.venv/bin/python")
else()
  set(_gridnn_parity_python_default "/usr/bin/python3")
endif()
set(GRIDNN_PARITY_PYTHON "${_gridnn_parity_python_default}" CACHE FILEPATH
    "Python with torch and safetensors, for the PyTorch interop tests")

add_executable(write_safetensors_sample ${CMAKE_CURRENT_LIST_DIR}/write_safetensors_sample.cpp)
target_link_libraries(write_safetensors_sample PRIVATE gridnn gridnn_warnings)

add_test(NAME safetensors_loads_in_torch
  COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_torch_load_check.sh
          $<TARGET_FILE:write_safetensors_sample> ${GRIDNN_PARITY_PYTHON}
          ${CMAKE_CURRENT_LIST_DIR}/check_torch_load.py
          ${CMAKE_CURRENT_BINARY_DIR}/gridnn_written.safetensors)
set_tests_properties(safetensors_loads_in_torch PROPERTIES
  LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 120)
