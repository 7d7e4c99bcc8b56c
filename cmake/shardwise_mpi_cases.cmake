# Run by the build after linking an MPI test executable (shardwise_add_mpi_test): asks it, on one rank,
# which MPI sizes each of its backend tests runs on (tests/support/rank_counts.hpp), and writes OUTPUT,
# the CTest file that registers NAME.mpi.<n> for each n of RANKS with those tests alone.
# Refuses (failing the build) a size of RANKS that runs no test and a test that runs at none of them.
# Lists arrive separated by "|" (their items may hold commas): RANKS, ENVIRONMENT, PREFLAGS, POSTFLAGS.
# In ENVIRONMENT, "<ranks>" stands for the size of the run (or "listing"), which names its session directory.
cmake_minimum_required(VERSION 3.21)
foreach(list IN ITEMS RANKS ENVIRONMENT PREFLAGS POSTFLAGS)
  string(REPLACE "|" ";" ${list} "${${list}}")
  list(REMOVE_ITEM ${list} "")
endforeach()

# Arguments of a command in the CTest file, each quoted as it is.
function(quoted out)
  set(text "")
  foreach(argument IN LISTS ARGN)
    string(APPEND text " [==[${argument}]==]")
  endforeach()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

function(refuse text)
  file(REMOVE "${OUTPUT}")  # so the next build asks again
  message(FATAL_ERROR "${NAME}: ${text}")
endfunction()

set(listing "${OUTPUT}.txt")
string(REPLACE "<ranks>" "listing" listing_environment "${ENVIRONMENT}")
execute_process(
  COMMAND "${CMAKE_COMMAND}" -E env ${listing_environment} "${MPIEXEC}" ${NUMPROC_FLAG} 1 ${PREFLAGS} "${EXECUTABLE}"
          ${POSTFLAGS} "--shardwise_list_rank_counts=${listing}"
  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output TIMEOUT 300)
if(NOT result EQUAL 0 OR NOT EXISTS "${listing}")
  refuse("listing the rank counts of its tests failed (${result}):\n${output}")
endif()

file(STRINGS "${listing}" lines)
set(sizes_of_none "")
foreach(n IN LISTS RANKS)
  set(tests_${n} "")
endforeach()
foreach(line IN LISTS lines)
  separate_arguments(fields UNIX_COMMAND "${line}")
  list(POP_FRONT fields test)
  set(launched FALSE)
  foreach(n IN LISTS fields)
    if(n IN_LIST RANKS)
      list(APPEND tests_${n} "${test}")
      set(launched TRUE)
    endif()
  endforeach()
  if(NOT launched)
    string(REPLACE ";" ", " declared "${fields}")
    list(APPEND sizes_of_none "${test} (runs on ${declared} ranks)")
  endif()
endforeach()
if(sizes_of_none)
  string(REPLACE ";" "; " sizes_of_none "${sizes_of_none}")
  string(REPLACE ";" " " launched "${RANKS}")
  refuse("MPI_RANKS ${launched} launches none of the sizes of ${sizes_of_none}")
endif()

set(registered "")
foreach(n IN LISTS RANKS)
  if(NOT tests_${n})
    refuse("MPI_RANKS lists ${n}, but no test runs on ${n} ranks")
  endif()
  string(REPLACE ";" ":" filter "${tests_${n}}")
  quoted(command "${MPIEXEC}" ${NUMPROC_FLAG} ${n} ${PREFLAGS} "${EXECUTABLE}" ${POSTFLAGS} "--gtest_filter=${filter}")
  string(REPLACE "<ranks>" "${n}" environment "${ENVIRONMENT}")
  string(APPEND registered
         "add_test([==[${NAME}.mpi.${n}]==]${command})\n"
         "set_tests_properties([==[${NAME}.mpi.${n}]==] PROPERTIES PROCESSORS ${n} TIMEOUT ${TIMEOUT} "
         "ENVIRONMENT [==[${environment}]==] LABELS mpi)\n")
endforeach()
file(WRITE "${OUTPUT}" "${registered}")
