# The C++ blocks of a Markdown page: the code between a line "```cpp" and the next line "```". Used at
# configure time (shardwise_add_doc_blocks_check) and by the test script that builds README's program
# (tests/consumer/run.cmake). String operations throughout: a CMake list would split C++ at its
# semicolons.
#
#   shardwise_next_cpp_block(<page> <text> <line> <block> <first>)
#
# <text> names a variable holding the rest of the page from a newline on, the one that ends page line
# <line> (a variable; for a whole page, 0 and the page with a newline in front). Sets <block> to the
# next block's code, its last newline included, and <first> to the page line of its first code line,
# and moves <text> and <line> on to the newline that ends the closing fence's line. <first> is 0 when
# no block is left; a block with no closing fence is an error naming <page>.
#
#   shardwise_quoted_output(<page> <text> <regex> <out>)
#
# Sets <out> to the first group of <regex> matched on <text>, the text of <page>: the page's quote of
# what one of its programs prints (README's "It prints `...`"), which a test compares with what the
# program prints. A page that quotes nothing so is an error naming it and <regex>.
include_guard(GLOBAL)

function(_shardwise_newlines text out_var)
  string(REGEX REPLACE "[^\n]" "" text "${text}")
  string(LENGTH "${text}" count)
  set(${out_var} ${count} PARENT_SCOPE)
endfunction()

function(shardwise_next_cpp_block page text_var line_var block_var first_var)
  set(text "${${text_var}}")
  string(FIND "${text}" "\n```cpp\n" start)
  if(start EQUAL -1)
    set(${first_var} 0 PARENT_SCOPE)
    return()
  endif()
  string(SUBSTRING "${text}" 0 ${start} before)
  _shardwise_newlines("${before}" newlines)
  math(EXPR first "${${line_var}} + ${newlines} + 2")
  math(EXPR start "${start} + 8")
  string(SUBSTRING "${text}" ${start} -1 text)
  string(FIND "\n${text}" "\n```\n" end)
  if(end EQUAL -1)
    message(FATAL_ERROR "${page}: the C++ block that starts on line ${first} has no closing ``` line")
  endif()
  string(SUBSTRING "${text}" 0 ${end} block)
  _shardwise_newlines("${block}" newlines)
  math(EXPR last "${first} + ${newlines}")
  math(EXPR end "${end} + 3")
  string(SUBSTRING "${text}" ${end} -1 text)
  set(${text_var} "${text}" PARENT_SCOPE)
  set(${line_var} ${last} PARENT_SCOPE)
  set(${block_var} "${block}" PARENT_SCOPE)
  set(${first_var} ${first} PARENT_SCOPE)
endfunction()

function(shardwise_quoted_output page text regex out_var)
  if(NOT text MATCHES "${regex}")
    message(FATAL_ERROR "${page} does not say what its program prints: no text matches ${regex}")
  endif()
  set(${out_var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()
