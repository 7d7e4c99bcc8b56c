# What the scripts that CTest runs the examples with (cmake -P) share. CTest passes their arguments as
# -D<variable>=<value>, a list's words separated by "|" (a ";" would split the command line).

# require_arguments(<script> <variable>...): each given, or the script stops, naming the one missing.
function(require_arguments script)
  foreach(variable ${ARGN})
    if(NOT DEFINED ${variable})
      message(FATAL_ERROR "${script} needs -D${variable}=...")
    endif()
  endforeach()
endfunction()

# split_words(<variable>...): each "|"-separated value as a CMake list.
macro(split_words)
  foreach(variable ${ARGN})
    string(REPLACE "|" ";" ${variable} "${${variable}}")
  endforeach()
endmacro()

# run_example(<name> <expect success: TRUE or FALSE> <options...>): runs PROGRAM with ARGS and the options,
# prints what it wrote, stops the script where it ends otherwise than expected, and sets `output` to its
# stdout and stderr. A run that hangs is killed after a minute and fails the test.
function(run_example name expect_success)
  execute_process(COMMAND ${PROGRAM} ${ARGS} ${ARGN}
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors TIMEOUT 60)
  message(STATUS "${name}: exit ${result}\n${output}${errors}")
  if(NOT result MATCHES "^[0-9]+$")
    message(FATAL_ERROR "${name} did not end by itself: ${result}")
  elseif(expect_success AND NOT result EQUAL 0)
    message(FATAL_ERROR "${name} failed")
  elseif(NOT expect_success AND result EQUAL 0)
    message(FATAL_ERROR "${name} succeeded where it should have failed")
  endif()
  set(output "${output}${errors}" PARENT_SCOPE)
endfunction()

# expect_same_values(<first name> <first JSON> <second name> <second JSON> <key>...): each key's value the
# same text in both (numbers to their last digit), or the script stops, naming the key and both values.
function(expect_same_values first_name first second_name second)
  foreach(key ${ARGN})
    string(JSON a GET "${first}" ${key})
    string(JSON b GET "${second}" ${key})
    if(NOT a STREQUAL b)
      message(FATAL_ERROR "${key}: ${a} ${first_name}, ${b} ${second_name}")
    endif()
  endforeach()
endfunction()
