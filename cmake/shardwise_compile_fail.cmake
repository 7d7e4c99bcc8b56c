# Driver of a compile-fail test, run as
# `cmake -DBUILD_DIR=... -DTARGET=... -DCONFIG=... -DEXPECT=<regex> [-DFIRST_ERROR=<regex>] -P`:
# building TARGET must fail, and the build's output must contain EXPECT (so it failed for the promised
# reason, not a typo); given FIRST_ERROR, the first line containing "error:" must match it; and the
# refusal must be the build's one error (none follows it), as Eigen's are.
# With `-DCOMPILER=<c++> -DSOURCE=<file> -DINCLUDES=<dir>|<dir>...` instead of BUILD_DIR and TARGET, the
# source is compiled by that compiler alone (-fsyntax-only), so the test holds under a second compiler.
if(COMPILER)
  string(REPLACE "|" ";" include_dirs "${INCLUDES}")
  # The system's own directory stays the compiler's: named with -I it would come before the C++ headers'.
  list(REMOVE_ITEM include_dirs "/usr/include")
  list(REMOVE_DUPLICATES include_dirs)
  list(TRANSFORM include_dirs PREPEND "-I")
  set(build_command "${COMPILER}" -std=c++20 -fsyntax-only ${include_dirs} "${SOURCE}")
  get_filename_component(TARGET "${SOURCE}" NAME)
else()
  set(build_command "${CMAKE_COMMAND}" --build "${BUILD_DIR}" --target "${TARGET}")
  if(CONFIG)
    list(APPEND build_command --config "${CONFIG}")
  endif()
endif()
execute_process(COMMAND ${build_command} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)

# The build's output is printed as is (FATAL_ERROR would re-wrap the compiler's lines).
if(result EQUAL 0)
  message("${output}")
  message(FATAL_ERROR "${TARGET} compiled, but it must not")
endif()
if(NOT output MATCHES "${EXPECT}")
  message("${output}")
  message(FATAL_ERROR "${TARGET} failed to compile, but its output above does not match \"${EXPECT}\"")
endif()
if(FIRST_ERROR)
  # Matched as a string, not split into a list: compiler lines hold semicolons ("[with T = float; ...]").
  string(REGEX MATCH "[^\n]*error:[^\n]*" first_error "${output}")
  if(NOT first_error MATCHES "${FIRST_ERROR}")
    message("${output}")
    message(FATAL_ERROR "${TARGET}: the first error line\n  ${first_error}\ndoes not match \"${FIRST_ERROR}\"")
  endif()
endif()
string(REGEX MATCHALL "error:" errors "${output}")
list(LENGTH errors error_count)
if(NOT error_count EQUAL 1)
  message("${output}")
  message(FATAL_ERROR "${TARGET}: the build reports ${error_count} errors where it must report one")
endif()
message(STATUS "${TARGET} does not compile, as expected, with a message matching \"${EXPECT}\"")
