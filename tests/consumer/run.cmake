# Test consumer.find_package, run as `cmake -D... -P run.cmake`: installs the shardwise build tree
# BUILD_DIR into a fresh prefix under WORK_DIR, then configures, builds and runs the consumer project
# SOURCE_DIR against that prefix alone.
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

run("${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${prefix}" ${config_args})
# The package registry and system prefixes could hide a broken install; only the fresh prefix counts.
run("${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${build}" -G "${GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
    "-DCMAKE_BUILD_TYPE=${CONFIG}"
    "-Dshardwise_ROOT=${prefix}"
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
file(STRINGS "${build}/CMakeCache.txt" found REGEX "^shardwise_DIR:")
if(NOT found MATCHES "=${prefix}/")
  message(FATAL_ERROR "the consumer found shardwise outside the test prefix ${prefix}: ${found}")
endif()
run("${CMAKE_COMMAND}" --build "${build}" ${config_args})

set(programs consumer)
if(EXPECT_MPI)
  list(APPEND programs consumer_mpi)
endif()
foreach(program IN LISTS programs)
  # Single-config generators put programs in the build directory, multi-config ones in a folder per config.
  set(executable "${build}/${program}")
  if(NOT EXISTS "${executable}")
    set(executable "${build}/${CONFIG}/${program}")
  endif()
  run("${executable}")
endforeach()
