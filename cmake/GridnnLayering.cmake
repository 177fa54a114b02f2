# The layering of gridnn's libraries (docs/design.md §1), checked on the sources:
#
#   core -> kernels -> parallel -> plan -> models -> tools
#
# and inside models/, its folders in the same way:
#
#   layers -> nets -> dist -> optim -> data -> explain -> run -> predict -> train
#
# A source file of one folder may include headers of its own folder and of the folders to
# its left, never of one to its right (a kernel that included parallel/ would tie the ops to
# the communicators; prediction that included train/ would run on the training loop's
# options). And no header may include itself through others: the headers' includes form no
# circle. gridnn_check_layering(SOURCE_DIR) stops the configure step with every offending
# line; `cmake -DGRIDNN_SOURCE_DIR=<repo> -P cmake/GridnnLayering.cmake` runs the same check
# on its own (the CTest test `layering`). bench/ and test/ may include anything.
cmake_policy(SET CMP0057 NEW)  # if(IN_LIST) in script mode too
# The libraries, one per folder, in their order (the build adds them, and their tests, in it).
set(GRIDNN_LIBRARY_FOLDERS core kernels parallel plan models tools)
# The folders the check orders: the libraries, with models/ in its own folders.
set(GRIDNN_LAYERS
    core
    kernels
    parallel
    plan
    models/layers
    models/nets
    models/dist
    models/optim
    models/data
    models/explain
    models/run
    models/predict
    models/train
    tools)

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
  gridnn_include_cycles(${SOURCE_DIR} cycles)
  list(APPEND found ${cycles})
  set(${OUT} "${found}" PARENT_SCOPE)
endfunction()

# The headers that include themselves through others: Kahn's order, which removes a header
# once every header it includes is removed; what is left lies on a circle or above one.
function(gridnn_include_cycles SOURCE_DIR OUT)
  set(globs "")
  foreach(layer IN LISTS GRIDNN_LAYERS)
    list(APPEND globs ${SOURCE_DIR}/${layer}/*.h ${SOURCE_DIR}/${layer}/*.cuh)
  endforeach()
  file(GLOB_RECURSE headers RELATIVE ${SOURCE_DIR} ${globs})
  list(REMOVE_DUPLICATES headers)
  foreach(h IN LISTS headers)
    file(STRINGS ${SOURCE_DIR}/${h} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]+\"")
    set(includes "")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[^\"]*\"([^\"]+)\".*$" "\\1" included "${line}")
      if(NOT included STREQUAL h AND EXISTS ${SOURCE_DIR}/${included})
        list(APPEND includes ${included})
      endif()
    endforeach()
    string(MAKE_C_IDENTIFIER "${h}" key)
    set(includes_${key} ${includes})
  endforeach()
  set(left ${headers})
  set(changed TRUE)
  while(changed)
    set(changed FALSE)
    set(still "")
    foreach(h IN LISTS left)
      string(MAKE_C_IDENTIFIER "${h}" key)
      set(waiting FALSE)
      foreach(included IN LISTS includes_${key})
        if(included IN_LIST left)
          set(waiting TRUE)
          break()
        endif()
      endforeach()
      if(waiting)
        list(APPEND still ${h})
      else()
        set(changed TRUE)
      endif()
    endforeach()
    set(left ${still})
  endwhile()
  set(found "")
  foreach(h IN LISTS left)
    list(APPEND found "${h}: on or above an include circle (it includes itself through others)")
  endforeach()
  set(${OUT} "${found}" PARENT_SCOPE)
endfunction()

function(gridnn_check_layering SOURCE_DIR)
  gridnn_layering_violations(${SOURCE_DIR} found)
  if(found)
    list(JOIN found "\n  " text)
    message(FATAL_ERROR "gridnn layering: a lower folder includes a higher one, or headers include each other:\n"
                        "  ${text}\nMove the code to the higher folder, or the header it needs to a lower one.")
  endif()
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT GRIDNN_SOURCE_DIR)
    message(FATAL_ERROR "usage: cmake -DGRIDNN_SOURCE_DIR=<repository> -P cmake/GridnnLayering.cmake")
  endif()
  gridnn_check_layering(${GRIDNN_SOURCE_DIR})
  list(JOIN GRIDNN_LAYERS " -> " chain)
  message(STATUS "gridnn layering: ${chain}: no lower folder includes a higher one, no header includes itself")
endif()
