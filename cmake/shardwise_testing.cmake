# Test scaffolding every test uses:
#   shardwise_add_backend_test(NAME <name> SOURCES <files...> [MPI_RANKS <n...>] [TIMEOUT <seconds>]
#                              [COMPILE_DEFINITIONS <definitions...>])
#   shardwise_add_mpi_test(NAME <name> SOURCES <files...> [MPI_RANKS <n...>] [TIMEOUT <seconds>]
#                          [COMPILE_DEFINITIONS <definitions...>])
#   shardwise_add_in_process_test(NAME <name> SOURCES <files...> [TARGET <target>] [TIMEOUT <seconds>])
#   shardwise_add_compile_fail_test(NAME <name> SOURCE <file> EXPECT <regex> [FIRST_ERROR <regex>])
#   shardwise_add_mpi_run(TEST <test> TARGET <target> RANKS <n> [TIMEOUT <seconds>] [LABELS <labels...>]
#                         [ARGS <arguments...>])
#   shardwise_add_header_check()
#   shardwise_add_doc_blocks_check(DOC <page.md> SCAFFOLD <file.cpp> [REQUIRES_MPI]
#                                  [RUN <block> PRINTS <regex>])
#   shardwise_add_mpi_main_library(): main() of the MPI tests, object library shardwise_test_mpi_main
#
# Included by each directory that registers tests (the variables below are directory-scoped).
include_guard(DIRECTORY)
include(shardwise_markdown)

set(_shardwise_default_timeout 300)

# Open MPI's launcher refuses more ranks than cores without --oversubscribe; other launchers
# oversubscribe silently and may reject the flag.
set(_shardwise_oversubscribe "")
if(MPIEXEC_EXECUTABLE)
  execute_process(COMMAND "${MPIEXEC_EXECUTABLE}" --version OUTPUT_VARIABLE _shardwise_mpiexec_version ERROR_QUIET)
  if(_shardwise_mpiexec_version MATCHES "Open MPI|OpenRTE")
    set(_shardwise_oversubscribe --oversubscribe)
  endif()
endif()

set(_shardwise_mpi_environment
  # CI machines and containers often run as root, which Open MPI refuses unless both are set.
  OMPI_ALLOW_RUN_AS_ROOT=1
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # Container seccomp profiles block cross-memory attach (process_vm_readv); copy through shared memory.
  OMPI_MCA_btl_vader_single_copy_mechanism=none
  # The ranks share one machine: shared memory only. Probing the network transports (InfiniBand, OFI,
  # PSM) took about 0.4 s of each launch's 1.4 s, and CI launches mpiexec a few hundred times.
  OMPI_MCA_btl=self,vader
  OMPI_MCA_pml=ob1
  # Open MPI forwards output through a pseudo-terminal, which would make GoogleTest colour the logs.
  GTEST_COLOR=no
  # Ranks that disagree on their calls wait for ever under MPI: a call that has waited 2 minutes names
  # itself and ends the job (comm/detail/call_watchdog.hpp), where CTest's timeout would end it later,
  # saying nothing. No test's calls wait near that long, even 8 ranks on 2 busy cores.
  SHARDWISE_MPI_TIMEOUT=120)

# Open MPI launchers started together race to create the session directory they share
# (/tmp/ompi.<host>.<uid>) and one may fail with "File exists" (open-mpi/ompi#8510), which CTest's
# parallel runs hit: each run gets a directory of its own under one made here.
set(_shardwise_mpi_sessions "${PROJECT_BINARY_DIR}/mpi-sessions")
file(MAKE_DIRECTORY "${_shardwise_mpi_sessions}")

# Sets OUT to the environment of the MPI run called RUN.
function(shardwise_mpi_environment out run)
  set(${out} ${_shardwise_mpi_environment} "OMPI_MCA_orte_tmpdir_base=${_shardwise_mpi_sessions}/${run}"
      PARENT_SCOPE)
endfunction()

# Registers CTest test TEST running TARGET on RANKS MPI processes, each given ARGS.
function(shardwise_add_mpi_run)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "TEST;TARGET;RANKS;TIMEOUT" "LABELS;ARGS")
  if(NOT arg_TEST OR NOT arg_TARGET OR NOT arg_RANKS OR arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR
            "usage: shardwise_add_mpi_run(TEST <test> TARGET <target> RANKS <n> [TIMEOUT <s>] [LABELS ...] [ARGS ...])")
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT ${_shardwise_default_timeout})
  endif()
  set(labels mpi ${arg_LABELS})
  shardwise_mpi_environment(environment ${arg_TEST})
  add_test(NAME ${arg_TEST}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${arg_RANKS} ${_shardwise_oversubscribe}
            ${MPIEXEC_PREFLAGS} $<TARGET_FILE:${arg_TARGET}> ${MPIEXEC_POSTFLAGS} ${arg_ARGS})
  set_tests_properties(${arg_TEST} PROPERTIES
    PROCESSORS ${arg_RANKS}
    TIMEOUT ${arg_TIMEOUT}
    ENVIRONMENT "${environment}"
    LABELS "${labels}")
endfunction()

# A test that needs no ranks, or only the threads backend: executable TARGET (default <name>_test),
# test <name>.
function(shardwise_add_in_process_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;TARGET;TIMEOUT" "SOURCES")
  if(NOT arg_NAME OR NOT arg_SOURCES OR arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "usage: shardwise_add_in_process_test(NAME <name> SOURCES <files...> [TARGET <t>] [TIMEOUT <s>])")
  endif()
  if(NOT arg_TARGET)
    set(arg_TARGET ${arg_NAME}_test)
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT ${_shardwise_default_timeout})
  endif()
  add_executable(${arg_TARGET} ${arg_SOURCES})
  target_include_directories(${arg_TARGET} PRIVATE "${PROJECT_SOURCE_DIR}/tests")
  target_link_libraries(${arg_TARGET} PRIVATE shardwise::shardwise GTest::gtest_main shardwise_project_options)
  add_test(NAME ${arg_NAME} COMMAND ${arg_TARGET})
  set_tests_properties(${arg_NAME} PROPERTIES TIMEOUT ${arg_TIMEOUT} LABELS threads)
endfunction()

# One test body, every backend: SOURCES build twice. <name>_threads runs in-process as test
# <name>.threads; with MPI, <name>_mpi (see shardwise_add_mpi_test, which takes the same arguments)
# runs under mpiexec. COMPILE_DEFINITIONS go to both executables.
function(shardwise_add_backend_test)
  shardwise_add_mpi_test(${ARGV})
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;TIMEOUT" "SOURCES;MPI_RANKS;COMPILE_DEFINITIONS")
  shardwise_add_in_process_test(NAME ${arg_NAME}.threads TARGET ${arg_NAME}_threads SOURCES ${arg_SOURCES}
                                TIMEOUT ${arg_TIMEOUT})
  if(arg_COMPILE_DEFINITIONS)
    target_compile_definitions(${arg_NAME}_threads PRIVATE ${arg_COMPILE_DEFINITIONS})
  endif()
endfunction()

# main() of the MPI test executables, compiled once: object library shardwise_test_mpi_main.
function(shardwise_add_mpi_main_library)
  if(TARGET shardwise_test_mpi_main)
    return()
  endif()
  add_library(shardwise_test_mpi_main OBJECT "${PROJECT_SOURCE_DIR}/tests/support/mpi_main.cpp")
  target_compile_definitions(shardwise_test_mpi_main PRIVATE SHARDWISE_TEST_MPI=1)
  target_include_directories(shardwise_test_mpi_main PRIVATE "${PROJECT_SOURCE_DIR}/tests")
  target_link_libraries(shardwise_test_mpi_main PRIVATE shardwise::mpi GTest::gtest shardwise_project_options)
endfunction()

# The MPI half of a backend test (nothing without MPI): <name>_mpi (SHARDWISE_TEST_MPI=1, main() from
# tests/support/mpi_main.cpp) runs under mpiexec as <name>.mpi.<n> for each n in MPI_RANKS (default
# 1 3 8), with only the tests that declare n among their rank counts (tests/support/rank_counts.hpp).
# Which tests those are, the executable says once built (cmake/shardwise_mpi_cases.cmake); the build
# fails if a size of MPI_RANKS runs no test, or a test runs at none of them.
function(shardwise_add_mpi_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;TIMEOUT" "SOURCES;MPI_RANKS;COMPILE_DEFINITIONS")
  if(NOT arg_NAME OR NOT arg_SOURCES OR arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "usage: shardwise_add_backend_test / shardwise_add_mpi_test(NAME <name> SOURCES <files...> "
                        "[MPI_RANKS <n...>] [TIMEOUT <s>] [COMPILE_DEFINITIONS <definitions...>])")
  endif()
  if(NOT TARGET shardwise::mpi)
    return()
  endif()
  if(NOT arg_MPI_RANKS)
    set(arg_MPI_RANKS 1 3 8)
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT ${_shardwise_default_timeout})
  endif()
  set(target ${arg_NAME}_mpi)
  if(arg_COMPILE_DEFINITIONS)
    # Definitions may change what the headers mpi_main.cpp includes define: its own compile, so that
    # no inline function has two bodies in one executable.
    add_executable(${target} ${arg_SOURCES} "${PROJECT_SOURCE_DIR}/tests/support/mpi_main.cpp")
  else()
    shardwise_add_mpi_main_library()
    add_executable(${target} ${arg_SOURCES})
    target_link_libraries(${target} PRIVATE shardwise_test_mpi_main)
  endif()
  target_compile_definitions(${target} PRIVATE SHARDWISE_TEST_MPI=1 ${arg_COMPILE_DEFINITIONS})
  target_include_directories(${target} PRIVATE "${PROJECT_SOURCE_DIR}/tests")
  target_link_libraries(${target} PRIVATE shardwise::mpi GTest::gtest shardwise_project_options)

  # The tests, registered when CTest reads the file the build writes (a placeholder that fails until then).
  set(cases "${CMAKE_CURRENT_BINARY_DIR}/${target}_cases.cmake")
  string(REPLACE ";" "|" ranks "${arg_MPI_RANKS}")
  # The script names each run's session directory: <ranks> becomes the run's size, or "listing".
  shardwise_mpi_environment(environment "${arg_NAME}.mpi.<ranks>")
  string(REPLACE ";" "|" environment "${environment}")
  string(REPLACE ";" "|" before "${_shardwise_oversubscribe};${MPIEXEC_PREFLAGS}")
  string(REPLACE ";" "|" after "${MPIEXEC_POSTFLAGS}")
  # A file of its own (not a post-build step), so that a build stopped between the link and the listing
  # lists again next time.
  add_custom_command(OUTPUT "${cases}"
    COMMAND "${CMAKE_COMMAND}" "-DNAME=${arg_NAME}" "-DEXECUTABLE=$<TARGET_FILE:${target}>" "-DRANKS=${ranks}"
            "-DTIMEOUT=${arg_TIMEOUT}" "-DMPIEXEC=${MPIEXEC_EXECUTABLE}" "-DNUMPROC_FLAG=${MPIEXEC_NUMPROC_FLAG}"
            "-DPREFLAGS=${before}" "-DPOSTFLAGS=${after}" "-DENVIRONMENT=${environment}" "-DOUTPUT=${cases}"
            -P "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/shardwise_mpi_cases.cmake"
    DEPENDS ${target} "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/shardwise_mpi_cases.cmake"
    COMMENT "Listing the MPI sizes of ${arg_NAME}'s tests"
    VERBATIM)
  add_custom_target(${target}_cases ALL DEPENDS "${cases}")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_include.cmake")
  file(WRITE "${include_file}"
       "if(EXISTS \"${cases}\")\n  include(\"${cases}\")\nelse()\n"
       "  add_test(${arg_NAME}.mpi.NOT_BUILT ${target}_NOT_BUILT)\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()

# Proves that SOURCE does not compile and that the compiler says EXPECT (a regex) while refusing it.
# With FIRST_ERROR, the first line of the output that contains "error:" must match that regex too: what
# a user reads first (e.g. the layouts that met), not only somewhere in the notes. The refusal must be
# the build's one error, as Eigen's are.
# The object target is outside ALL; test compile_fail.<name> builds it through cmake --build. Where the
# project builds with another compiler and Clang 14 is found, compile_fail_clang.<name> asks the same of
# Clang (EXPECT and one error; FIRST_ERROR is written in GCC's words). Clang 14 by name: what another
# version reports past a refusal is its own, and a test must not fail for a compiler it was not run with.
find_program(SHARDWISE_CLANG_FOR_COMPILE_FAIL NAMES clang++-14)
function(shardwise_add_compile_fail_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;SOURCE;EXPECT;FIRST_ERROR" "")
  if(NOT arg_NAME OR NOT arg_SOURCE OR NOT arg_EXPECT OR arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "usage: shardwise_add_compile_fail_test(NAME <name> SOURCE <file> EXPECT <regex> "
                        "[FIRST_ERROR <regex>])")
  endif()
  set(target compile_fail_${arg_NAME})
  add_library(${target} OBJECT EXCLUDE_FROM_ALL ${arg_SOURCE})
  set_target_properties(${target} PROPERTIES EXCLUDE_FROM_DEFAULT_BUILD TRUE)
  target_include_directories(${target} PRIVATE "${PROJECT_SOURCE_DIR}/tests")
  target_link_libraries(${target} PRIVATE shardwise::shardwise)
  add_test(NAME compile_fail.${arg_NAME}
    COMMAND "${CMAKE_COMMAND}" "-DBUILD_DIR=${CMAKE_BINARY_DIR}" "-DTARGET=${target}" "-DCONFIG=$<CONFIG>"
            "-DEXPECT=${arg_EXPECT}" "-DFIRST_ERROR=${arg_FIRST_ERROR}"
            -P "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/shardwise_compile_fail.cmake")
  # Concurrent builds in one build tree (Ninja's log, a re-run of configure) must not race.
  set_tests_properties(compile_fail.${arg_NAME} PROPERTIES LABELS compile_fail RESOURCE_LOCK shardwise_build_tree)
  if(SHARDWISE_CLANG_FOR_COMPILE_FAIL AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(includes "$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>")
    add_test(NAME compile_fail_clang.${arg_NAME}
      COMMAND "${CMAKE_COMMAND}" "-DCOMPILER=${SHARDWISE_CLANG_FOR_COMPILE_FAIL}"
              "-DSOURCE=${CMAKE_CURRENT_SOURCE_DIR}/${arg_SOURCE}" "-DINCLUDES=$<JOIN:${includes},|>"
              "-DEXPECT=${arg_EXPECT}" -P "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/shardwise_compile_fail.cmake")
    set_tests_properties(compile_fail_clang.${arg_NAME} PROPERTIES LABELS compile_fail)
  endif()
endfunction()

# Every public header compiles on its own, and twice in one translation unit (include guard). One
# generated .cpp per header under include/shardwise/, all in the object library shardwise_header_check
# (built with ALL); headers of the MPI backend go into shardwise_header_check_mpi, only with MPI.
function(shardwise_add_header_check)
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS RELATIVE "${PROJECT_SOURCE_DIR}/include"
       "${PROJECT_SOURCE_DIR}/include/shardwise/*.hpp")
  set(sources "")
  set(mpi_sources "")
  foreach(header IN LISTS headers)
    string(REGEX REPLACE "\\.hpp$" ".cpp" source "${CMAKE_CURRENT_BINARY_DIR}/header_check/${header}")
    # file(CONFIGURE) rewrites only on change, so a re-configure does not recompile every check.
    file(CONFIGURE OUTPUT "${source}" CONTENT "#include <${header}>\n#include <${header}>\n" @ONLY)
    if(header MATCHES "^shardwise/comm/mpi(\\.hpp$|/)")
      list(APPEND mpi_sources "${source}")
    else()
      list(APPEND sources "${source}")
    endif()
  endforeach()

  # Never merged by a unity build (CMAKE_UNITY_BUILD, as scripts/test builds): a header would then be
  # compiled after others that may include what it forgot.
  add_library(shardwise_header_check OBJECT ${sources})
  set_target_properties(shardwise_header_check PROPERTIES UNITY_BUILD OFF)
  target_link_libraries(shardwise_header_check PRIVATE shardwise::shardwise shardwise_project_options)
  if(mpi_sources AND TARGET shardwise::mpi)
    add_library(shardwise_header_check_mpi OBJECT ${mpi_sources})
    set_target_properties(shardwise_header_check_mpi PROPERTIES UNITY_BUILD OFF)
    target_link_libraries(shardwise_header_check_mpi PRIVATE shardwise::mpi shardwise_project_options)
    add_dependencies(shardwise_header_check shardwise_header_check_mpi)
  endif()
endfunction()

# Every C++ block of the Markdown page DOC (from a line "```cpp" to the next line "```") compiles, in
# the context its prose assumes: SCAFFOLD includes "<stem>_<n>.inc" for n = 1, 2, ... N, the page's
# blocks in its order, each where the names the page takes as given are declared (<stem>: the page's
# name with '_' for '-'). Each .inc is its block verbatim after a #line naming the page and the block's
# first line, so an error names the page's line; configuration fails when SCAFFOLD does not include
# exactly the page's blocks, and re-runs when either file changes. Object library doc_blocks_<stem>
# (built with ALL, compiled only). REQUIRES_MPI: against shardwise::mpi; without MPI, not compiled.
# RUN <n> PRINTS <regex>: for a page that quotes what its n-th block prints, doc_blocks_<stem> is a
# program running that block, and test doc.<stem>.block_<n>_prints_what_the_page_says checks every line
# it prints ends with the quote, the first group of <regex> on the page (cmake/shardwise_doc_output.cmake).
function(shardwise_add_doc_blocks_check)
  cmake_parse_arguments(PARSE_ARGV 0 arg "REQUIRES_MPI" "DOC;SCAFFOLD;RUN;PRINTS" "")
  if(NOT arg_DOC OR NOT arg_SCAFFOLD OR arg_UNPARSED_ARGUMENTS OR (arg_RUN AND NOT arg_PRINTS)
     OR (arg_PRINTS AND NOT arg_RUN))
    message(FATAL_ERROR "usage: shardwise_add_doc_blocks_check(DOC <page.md> SCAFFOLD <file.cpp> [REQUIRES_MPI] "
                        "[RUN <block> PRINTS <regex>])")
  endif()
  cmake_path(ABSOLUTE_PATH arg_DOC NORMALIZE OUTPUT_VARIABLE doc)
  cmake_path(ABSOLUTE_PATH arg_SCAFFOLD NORMALIZE OUTPUT_VARIABLE scaffold)
  file(RELATIVE_PATH doc_name "${PROJECT_SOURCE_DIR}" "${doc}")
  file(RELATIVE_PATH scaffold_name "${PROJECT_SOURCE_DIR}" "${scaffold}")
  cmake_path(GET doc STEM stem)
  string(REPLACE "-" "_" stem "${stem}")
  if(arg_REQUIRES_MPI AND NOT TARGET shardwise::mpi)
    message(STATUS "shardwise: MPI not found; the C++ blocks of ${doc_name} are not compiled")
    return()
  endif()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${doc}" "${scaffold}")

  # The blocks, each after a #line naming its page and line.
  set(directory "${CMAKE_CURRENT_BINARY_DIR}/doc_blocks")
  file(READ "${doc}" rest)
  string(PREPEND rest "\n")
  set(line 0)
  set(count 0)
  while(TRUE)
    shardwise_next_cpp_block("${doc_name}" rest line block first)
    if(first EQUAL 0)
      break()
    endif()
    math(EXPR count "${count} + 1")
    set(content "#line ${first} \"${doc_name}\"\n${block}")
    set(inc "${directory}/${stem}_${count}.inc")
    set(old "")
    if(EXISTS "${inc}")
      file(READ "${inc}" old)
    endif()
    if(NOT old STREQUAL content)  # rewritten only on change: no other page's check recompiles
      file(WRITE "${inc}" "${content}")
    endif()
  endwhile()
  file(GLOB stale "${directory}/${stem}_*.inc")
  foreach(inc IN LISTS stale)
    if(inc MATCHES "/${stem}_([0-9]+)\\.inc$" AND CMAKE_MATCH_1 GREATER count)
      file(REMOVE "${inc}")
    endif()
  endforeach()

  # The scaffold includes each block once, in the page's order (an #include on a line of its own).
  file(READ "${scaffold}" source)
  string(REGEX MATCHALL "\n[ \t]*#[ \t]*include[ \t]+\"${stem}_[0-9]+\\.inc\"" includes "\n${source}")
  set(found "")
  foreach(include IN LISTS includes)
    string(REGEX MATCH "${stem}_[0-9]+\\.inc" include "${include}")
    list(APPEND found "${include}")
  endforeach()
  set(expected "")
  if(count GREATER 0)
    foreach(n RANGE 1 ${count})
      list(APPEND expected "${stem}_${n}.inc")
    endforeach()
  endif()
  if(NOT found STREQUAL expected)
    if(found)
      list(JOIN found ", " found)
    else()
      set(found "none of them")
    endif()
    message(FATAL_ERROR "${doc_name} has ${count} C++ blocks; ${scaffold_name} includes ${found}. It must "
                        "include ${stem}_1.inc to ${stem}_${count}.inc, each once, in the page's order: give a new "
                        "block the context its prose assumes there, and take out a removed one's.")
  endif()

  set(target doc_blocks_${stem})
  if(arg_RUN)
    # A page that quotes what one of its programs prints: the blocks build into a program that runs
    # that block, and a test checks every line it prints ends with the text the page quotes.
    set(main "${directory}/${stem}_main.cpp")
    file(CONFIGURE OUTPUT "${main}" CONTENT "namespace doc_blocks {\nvoid block_${arg_RUN}();\n}\n\nint main() {\n  doc_blocks::block_${arg_RUN}();\n}\n")
    add_executable(${target} "${scaffold}" "${main}")
    add_test(NAME doc.${stem}.block_${arg_RUN}_prints_what_the_page_says
             COMMAND "${CMAKE_COMMAND}" "-DPROGRAM=$<TARGET_FILE:${target}>" "-DPAGE=${doc}"
                     "-DPRINTS=${arg_PRINTS}" -P "${PROJECT_SOURCE_DIR}/cmake/shardwise_doc_output.cmake")
    set_tests_properties(doc.${stem}.block_${arg_RUN}_prints_what_the_page_says PROPERTIES TIMEOUT 120)
  else()
    add_library(${target} OBJECT "${scaffold}")
  endif()
  target_include_directories(${target} PRIVATE "${directory}")
  if(arg_REQUIRES_MPI)
    target_link_libraries(${target} PRIVATE shardwise::mpi shardwise_project_options)
  else()
    target_link_libraries(${target} PRIVATE shardwise::shardwise shardwise_project_options)
  endif()
endfunction()

# ---- simulated GPUs
# The body of a backend test built a third time, against the sim_gpu backend (SHARDWISE_TEST_SIM_GPU=1):
# executable <name>_sim_gpu, in-process test <name>.sim_gpu.
function(shardwise_add_sim_gpu_test)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "NAME;TIMEOUT" "SOURCES")
  if(NOT arg_NAME OR NOT arg_SOURCES OR arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "usage: shardwise_add_sim_gpu_test(NAME <name> SOURCES <files...> [TIMEOUT <s>])")
  endif()
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT ${_shardwise_default_timeout})
  endif()
  shardwise_add_in_process_test(NAME ${arg_NAME}.sim_gpu TARGET ${arg_NAME}_sim_gpu SOURCES ${arg_SOURCES}
                                TIMEOUT ${arg_TIMEOUT})
  target_compile_definitions(${arg_NAME}_sim_gpu PRIVATE SHARDWISE_TEST_SIM_GPU=1)
endfunction()
