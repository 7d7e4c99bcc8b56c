# Test consumer.find_package, run as `cmake -D... -P run.cmake`: installs the shardwise build tree
# BUILD_DIR into a fresh prefix under WORK_DIR, then configures, builds and runs the consumer project
# SOURCE_DIR against that prefix alone, with the first C++ program of README (the page's path) among its
# programs, which must print what the page says it prints (the text after "It prints `").
cmake_policy(VERSION 3.21)
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    list(JOIN ARGV " " command)
    message(FATAL_ERROR "failed (${result}): ${command}")
  endif()
endfunction()

set(prefix "${WORK_DIR}/prefix")
set(build "${WORK_DIR}/build")
file(REMOVE_RECURSE "${WORK_DIR}")

set(config_args "")
if(CONFIG)
  set(config_args --config "${CONFIG}")
endif()

# The README's program: its first ```cpp block, and the line the page says it prints after it.
include("${CMAKE_CURRENT_LIST_DIR}/../../cmake/shardwise_markdown.cmake")
file(READ "${README}" readme)
string(PREPEND readme "\n")
set(line 0)
shardwise_next_cpp_block("${README}" readme line readme_source first)
if(first EQUAL 0)
  message(FATAL_ERROR "${README} has no ```cpp block")
endif()
shardwise_quoted_output("${README}" "${readme}" "It prints `([^`]+)`" readme_prints)
file(MAKE_DIRECTORY "${WORK_DIR}")
file(WRITE "${WORK_DIR}/readme_program.cpp" "${readme_source}")

run("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" ${config_args})
# The package registry and system prefixes could hide a broken install; only the fresh prefix counts.
run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${build}" -G "${GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
    "-DCMAKE_BUILD_TYPE=${CONFIG}"
    "-Dshardwise_ROOT=${prefix}"
    "-DREADME_PROGRAM=${WORK_DIR}/readme_program.cpp"
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
file(STRINGS "${build}/CMakeCache.txt" found REGEX "^shardwise_DIR:")
if(NOT found MATCHES "=${prefix}/")
  message(FATAL_ERROR "the consumer found shardwise outside the test prefix ${prefix}: ${found}")
endif()
run("${CMAKE_COMMAND}" --build "${build}" ${config_args})

set(programs consumer readme_program)
if(EXPECT_MPI)
  list(APPEND programs consumer_mpi)
endif()
foreach(program IN LISTS programs)
  # Single-config generators put programs in the build directory, multi-config ones in a folder per config.
  set(executable "${build}/${program}")
  if(NOT EXISTS "${executable}")
    set(executable "${build}/${CONFIG}/${program}")
  endif()
  if(program STREQUAL "readme_program")
    execute_process(COMMAND "${executable}" RESULT_VARIABLE result OUTPUT_VARIABLE printed ECHO_OUTPUT_VARIABLE)
    if(NOT result EQUAL 0)
      message(FATAL_ERROR "failed (${result}): ${executable}")
    endif()
    string(FIND "${printed}" "${readme_prints}\n" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "the README's program printed\n${printed}where the README says it prints ${readme_prints}")
    endif()
  else()
    run("${executable}")
  endif()
endforeach()
