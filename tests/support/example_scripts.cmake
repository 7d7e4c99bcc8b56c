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
