# Rehearses a failure in the middle of training and the recovery from it, for the training examples:
#   1. an uninterrupted run of STEPS steps;
#   2. the same run with checkpoints every CHECKPOINT_EVERY steps, in which rank FAIL_RANK throws at
#      step FAIL_AT: every rank must stop (the run exits non-zero) with that rank's error;
#   3. --resume from the last complete checkpoint, to the end.
# The resumed run's losses after the checkpoint must equal the uninterrupted run's, bit for bit: its
# training curve and its final metrics.
# Variables: PROGRAM (the example's command, behind mpiexec ... for MPI), ARGS (the run's options) and
# FINAL (the --json keys of the final metrics), each with its words separated by "|"; STEPS,
# CHECKPOINT_EVERY, FAIL_AT, FAIL_RANK, WORK_DIR.
foreach(variable PROGRAM ARGS FINAL STEPS CHECKPOINT_EVERY FAIL_AT FAIL_RANK WORK_DIR)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "resume_after_failure.cmake needs -D${variable}=...")
  endif()
endforeach()
string(REPLACE "|" ";" PROGRAM "${PROGRAM}")
string(REPLACE "|" ";" ARGS "${ARGS}")
string(REPLACE "|" ";" FINAL "${FINAL}")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# A run that hangs instead of stopping is killed after a minute and fails the test.
function(run_example name expect_success)
  execute_process(COMMAND ${PROGRAM} ${ARGS} --steps ${STEPS} ${ARGN}
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors TIMEOUT 60)
  message(STATUS "${name}: exit ${result}\n${output}${errors}")
  if(NOT result MATCHES "^[0-9]+$")
    message(FATAL_ERROR "${name} did not end by itself: ${result}")
  elseif(expect_success AND NOT result EQUAL 0)
    message(FATAL_ERROR "${name} failed")
  elseif(NOT expect_success AND result EQUAL 0)
    message(FATAL_ERROR "${name} should have stopped with the injected failure")
  endif()
  set(output "${output}${errors}" PARENT_SCOPE)
endfunction()

run_example("uninterrupted" TRUE --json "${WORK_DIR}/uninterrupted.json")
run_example("failing" FALSE --checkpoint "${WORK_DIR}/checkpoints" --checkpoint-every ${CHECKPOINT_EVERY}
            --fail-at-step ${FAIL_AT} --fail-rank ${FAIL_RANK})
if(NOT output MATCHES "\\[rank ${FAIL_RANK}\\][^\n]*a failure injected at step ${FAIL_AT}")
  message(FATAL_ERROR "the failing run did not report rank ${FAIL_RANK}'s injected failure")
endif()
math(EXPR last_saved "(${FAIL_AT} - 1) / ${CHECKPOINT_EVERY} * ${CHECKPOINT_EVERY}")
run_example("resumed" TRUE --resume "${WORK_DIR}/checkpoints" --json "${WORK_DIR}/resumed.json")
if(NOT output MATCHES "resumed from [^\n]* at step ${last_saved} ")
  message(FATAL_ERROR "the resumed run did not start from step ${last_saved}, the last complete checkpoint")
endif()

# Every loss recorded after the checkpoint, and the final ones, equal.
file(READ "${WORK_DIR}/uninterrupted.json" uninterrupted)
file(READ "${WORK_DIR}/resumed.json" resumed)
foreach(key ${FINAL})
  string(JSON a GET "${uninterrupted}" ${key})
  string(JSON b GET "${resumed}" ${key})
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "${key}: ${a} uninterrupted, ${b} resumed")
  endif()
endforeach()
string(JSON resumed_steps LENGTH "${resumed}" train_curve)
string(JSON all_steps LENGTH "${uninterrupted}" train_curve)
math(EXPR first "${all_steps} - ${resumed_steps}")
math(EXPR last "${resumed_steps} - 1")
foreach(i RANGE ${last})
  math(EXPR j "${first} + ${i}")
  string(JSON a GET "${uninterrupted}" train_curve ${j})
  string(JSON b GET "${resumed}" train_curve ${i})
  if(NOT a STREQUAL b)
    message(FATAL_ERROR "training curve differs: ${a} uninterrupted, ${b} resumed")
  endif()
endforeach()
message(STATUS "resumed at step ${last_saved} after the failure at step ${FAIL_AT}: ${resumed_steps} steps equal")
