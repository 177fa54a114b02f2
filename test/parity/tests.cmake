# PyTorch interop tests (included from test/CMakeLists.txt).
#
# PyTorch -> gridnn: test_safetensors reads fixtures/torch_written.safetensors, written by
# make_safetensors_fixture.py. gridnn -> PyTorch: safetensors_loads_in_torch runs
# write_safetensors_sample, then check_torch_load.py reads the file with the reference
# reader. It needs a Python with torch and safetensors; without them it is skipped, or fails
# when the environment variable GRIDNN_REQUIRE_PARITY=1 is set (as CI does).
#
# GRIDNN_PARITY_PYTHON picks that Python. Left empty (the default), it is chosen again at
# every configure: .venv/bin/python (made by scripts/setup.sh) when it exists, else
# /usr/bin/python3. Caching the choice itself would freeze it at the first configure, so a
# .venv created later would never be used.
set(_gridnn_parity_venv "${CMAKE_SOURCE_DIR}/.venv/bin/python")
set(_gridnn_parity_help
    "Python with torch and safetensors for the PyTorch interop tests (empty: .venv/bin/python if it exists, else /usr/bin/python3, chosen at each configure)")
set(GRIDNN_PARITY_PYTHON "" CACHE FILEPATH "${_gridnn_parity_help}")

if(GRIDNN_PARITY_PYTHON)
  set(_gridnn_parity_python "${GRIDNN_PARITY_PYTHON}")
elseif(EXISTS "${_gridnn_parity_venv}")
  set(_gridnn_parity_python "${_gridnn_parity_venv}")
else()
  set(_gridnn_parity_python "/usr/bin/python3")
endif()

add_executable(write_safetensors_sample ${CMAKE_CURRENT_LIST_DIR}/write_safetensors_sample.cpp)
target_link_libraries(write_safetensors_sample PRIVATE gridnn gridnn_warnings)

add_test(NAME safetensors_loads_in_torch
  COMMAND sh ${CMAKE_CURRENT_LIST_DIR}/run_torch_load_check.sh
          $<TARGET_FILE:write_safetensors_sample> ${_gridnn_parity_python}
          ${CMAKE_CURRENT_LIST_DIR}/check_torch_load.py
          ${CMAKE_CURRENT_BINARY_DIR}/gridnn_written.safetensors)
set_tests_properties(safetensors_loads_in_torch PROPERTIES
  LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 120)
