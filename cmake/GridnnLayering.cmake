# The layering of gridnn's libraries (docs/design.md §1), checked on the sources:
#
#   core -> kernels -> parallel -> plan -> models -> tools
#
# A source file of one folder may include headers of its own folder and of the folders to
# its left, never of one to its right (a kernel that included parallel/ would tie the ops to
# the communicators). gridnn_check_layering(SOURCE_DIR) stops the configure step with every
# offending line; `cmake -DGRIDNN_SOURCE_DIR=<repo> -P cmake/GridnnLayering.cmake` runs the
# same check on its own (the CTest test `layering`). bench/ and test/ may include anything.
set(GRIDNN_LAYERS core kernels parallel plan models tools)

function(gridnn_layering_violations SOURCE_DIR OUT)
  set(found "")
  list(LENGTH GRIDNN_LAYERS count)
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    list(GET GRIDNN_LAYERS ${i} layer)
    # The folders this layer may include (itself and those before it), and the others.
    set(allowed "")
    foreach(j RANGE ${i})
      list(GET GRIDNN_LAYERS ${j} lower)
      string(APPEND allowed "${lower}/ ")
    endforeach()
    string(STRIP "${allowed}" allowed)
    set(above "")
    math(EXPR next "${i} + 1")
    if(next LESS_EQUAL last)
      foreach(j RANGE ${next} ${last})
        list(GET GRIDNN_LAYERS ${j} higher)
        list(APPEND above ${higher})
      endforeach()
    endif()
    if(NOT above)
      continue()
    endif()
    string(REPLACE ";" "|" above_regex "${above}")
    file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
         ${SOURCE_DIR}/${layer}/*.h ${SOURCE_DIR}/${layer}/*.cpp
         ${SOURCE_DIR}/${layer}/*.cu ${SOURCE_DIR}/${layer}/*.cuh)
    foreach(f IN LISTS files)
      file(STRINGS ${SOURCE_DIR}/${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"(${above_regex})/")
      foreach(line IN LISTS lines)
        string(STRIP "${line}" line)
        list(APPEND found "${f}: ${line} (${layer}/ may include only ${allowed})")
      endforeach()
    endforeach()
  endforeach()
  set(${OUT} "${found}" PARENT_SCOPE)
endfunction()

function(gridnn_check_layering SOURCE_DIR)
  gridnn_layering_violations(${SOURCE_DIR} found)
  if(found)
    list(JOIN found "\n  " text)
    message(FATAL_ERROR "gridnn layering: a lower library includes a higher folder:\n  ${text}\n"
                        "Move the code to the higher library, or the header it needs to a lower one.")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT GRIDNN_SOURCE_DIR)
    message(FATAL_ERROR "usage: cmake -DGRIDNN_SOURCE_DIR=<repository> -P cmake/GridnnLayering.cmake")
  endif()
  gridnn_check_layering(${GRIDNN_SOURCE_DIR})
  list(JOIN GRIDNN_LAYERS " -> " chain)
  message(STATUS "gridnn layering: ${chain}: no lower library includes a higher folder")
endif()
