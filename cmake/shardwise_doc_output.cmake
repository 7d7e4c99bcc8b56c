# Runs a documentation page's program and checks that every line it prints ends with the text the page
# quotes for it: the first group of the regular expression PRINTS, matched on the page PAGE (a figure
# that the simulator no longer gives fails here, naming both).
#   cmake -DPROGRAM=<program> -DPAGE=<page.md> -DPRINTS=<regex with one group> -P shardwise_doc_output.cmake
cmake_minimum_required(VERSION 3.25)
include("${CMAKE_CURRENT_LIST_DIR}/shardwise_markdown.cmake")

file(READ "${PAGE}" page)
shardwise_quoted_output("${PAGE}" "${page}" "${PRINTS}" quoted)

execute_process(COMMAND "${PROGRAM}" OUTPUT_VARIABLE output RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} ended with ${status}; it printed:\n${output}")
endif()
string(STRIP "${output}" output)
if(output STREQUAL "")
  message(FATAL_ERROR "${PROGRAM} printed nothing; ${PAGE} says its lines end \"${quoted}\"")
endif()
string(REPLACE "\n" ";" lines "${output}")
string(LENGTH "${quoted}" quoted_length)
foreach(line IN LISTS lines)
  string(LENGTH "${line}" length)
  set(tail "")
  if(length GREATER_EQUAL quoted_length)
    math(EXPR start "${length} - ${quoted_length}")
    string(SUBSTRING "${line}" ${start} -1 tail)
  endif()
  if(NOT tail STREQUAL quoted)
    message(FATAL_ERROR "${PROGRAM} printed\n  ${line}\nwhere ${PAGE} says its lines end\n  ${quoted}\n"
                        "(run the program and quote what it prints now, with the date)")
  endif()
endforeach()
message(STATUS "every line of the ${PAGE} program's output ends \"${quoted}\"")
