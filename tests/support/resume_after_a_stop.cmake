# Rehearses a stop in the middle of training and the resume from it, for the training examples:
#   1. an uninterrupted run of STEPS steps;
#   2. the same run with checkpoints every CHECKPOINT_EVERY steps, stopped at step STOP_AT: with STOP
#      "failure", rank FAIL_RANK throws in it and every rank must stop (the run exits non-zero) with
#      that rank's error; with STOP "planned", --stop-at-step STOP_AT ends it with that step saved;
#   3. --resume from the last complete checkpoint, to the end.
# With STOP "chain", 2 and 3 are a chain of batch jobs instead: the same command with --autoresume and a
# time limit that stops each job after a step or so, run until a job finds nothing left to train.
# The resumed run's losses after the checkpoint must equal the uninterrupted run's, bit for bit: its
# training curve and its final metrics. And the --log the stopped and the resumed run wrote together must
# be the uninterrupted run's, every step's line once (its times aside): the resumed run drops the lines of
# steps after its checkpoint, which the stopped run logged before it stopped.
# Variables: PROGRAM (the example's command, behind mpiexec ... for MPI), ARGS (the run's options) and
# FINAL (the --json keys of the final metrics), each with its words separated by "|"; STEPS,
# CHECKPOINT_EVERY, STOP, STOP_AT (not for a chain), FAIL_RANK (for a failure), WORK_DIR.
include("${CMAKE_CURRENT_LIST_DIR}/example_scripts.cmake")
require_arguments(resume_after_a_stop.cmake PROGRAM ARGS FINAL STEPS CHECKPOINT_EVERY STOP WORK_DIR)
if(NOT STOP MATCHES "^(failure|planned|chain)$")
  message(FATAL_ERROR "resume_after_a_stop.cmake: STOP is failure, planned or chain, not \"${STOP}\"")
endif()
split_words(PROGRAM ARGS FINAL)
list(APPEND ARGS --steps ${STEPS})
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

run_example("uninterrupted" TRUE --json "${WORK_DIR}/uninterrupted.json" --log "${WORK_DIR}/uninterrupted.log")
set(checkpoints --checkpoint "${WORK_DIR}/checkpoints" --checkpoint-every ${CHECKPOINT_EVERY}
                --log "${WORK_DIR}/stopped_and_resumed.log")
if(STOP STREQUAL "chain")
  # Each job stops after a step or so, saving it, and the next goes on from there; the job after the
  # last step finds nothing to train and succeeds. A chain of more jobs than steps has not ended.
  set(last_saved 0)
  math(EXPR most_jobs "${STEPS} + 1")
  foreach(job RANGE 1 ${most_jobs})
    run_example("job ${job}" TRUE ${checkpoints} --autoresume --stop-after-minutes 0.0001
                --json "${WORK_DIR}/resumed.json")
    if(job EQUAL 1 AND NOT output MATCHES "--autoresume found no checkpoint in [^\n]*: this run starts at step 1")
      message(FATAL_ERROR "the chain's first job did not say that it starts afresh")
    elseif(job GREATER 1 AND NOT output MATCHES "(resumed from|the checkpoint in) [^\n]* at step ${last_saved}[ ,]")
      message(FATAL_ERROR "job ${job} did not go on from step ${last_saved}, which job ${previous} saved")
    endif()
    if(output MATCHES "which this run trains again")
      message(FATAL_ERROR "job ${job} dropped lines of the log, where every job saved the step it stopped after")
    endif()
    if(output MATCHES "nothing is left to train")
      if(NOT last_saved EQUAL STEPS OR output MATCHES "saved step")
        message(FATAL_ERROR "job ${job} found nothing to train at step ${last_saved} of ${STEPS}")
      elseif(output MATCHES "resumed from")
        message(FATAL_ERROR "job ${job} loaded the checkpoint to find that nothing is left to train")
      endif()
      break()
    endif()
    string(REGEX MATCHALL "saved step [0-9]+ in " saves "${output}")
    list(POP_BACK saves last_save)
    if(NOT last_save MATCHES "([0-9]+)")
      message(FATAL_ERROR "job ${job} did not save the step it ended after")
    endif()
    set(last_saved ${CMAKE_MATCH_1})
    if(last_saved LESS STEPS AND NOT output MATCHES "stopped after step ${last_saved}, [^\n]*: the same command goes on from it")
      message(FATAL_ERROR "job ${job} did not say that the same command goes on from step ${last_saved}")
    endif()
    set(previous ${job})
  endforeach()
  if(NOT output MATCHES "nothing is left to train")
    message(FATAL_ERROR "the chain did not end in ${most_jobs} jobs")
  endif()
else()
  if(STOP STREQUAL "failure")
    run_example("failing" FALSE ${checkpoints} --fail-at-step ${STOP_AT} --fail-rank ${FAIL_RANK})
    if(NOT output MATCHES "\\[rank ${FAIL_RANK}\\][^\n]*a failure injected at step ${STOP_AT}")
      message(FATAL_ERROR "the failing run did not report rank ${FAIL_RANK}'s injected failure")
    endif()
    math(EXPR last_saved "(${STOP_AT} - 1) / ${CHECKPOINT_EVERY} * ${CHECKPOINT_EVERY}")
  else()
    run_example("stopped" TRUE ${checkpoints} --stop-at-step ${STOP_AT})
    if(NOT output MATCHES "saved step ${STOP_AT} in [^\n]*\nstopped after step ${STOP_AT}, as --stop-at-step asks")
      message(FATAL_ERROR "the stopped run did not save step ${STOP_AT} and stop after it")
    endif()
    set(last_saved ${STOP_AT})
  endif()
  run_example("resumed" TRUE --resume "${WORK_DIR}/checkpoints" --json "${WORK_DIR}/resumed.json"
              --log "${WORK_DIR}/stopped_and_resumed.log")
  if(NOT output MATCHES "resumed from [^\n]* at step ${last_saved} ")
    message(FATAL_ERROR "the resumed run did not start from step ${last_saved}, the last complete checkpoint")
  endif()
  # The stopped run logged every step it finished: those after the checkpoint's, the resumed run drops.
  if(STOP STREQUAL "failure")
    math(EXPR logged_again "${STOP_AT} - 1 - ${last_saved}")
  else()
    set(logged_again 0)
  endif()
  if(logged_again GREATER 0 AND NOT output MATCHES "held ${logged_again} lines? after step ${last_saved}, which this run trains again")
    message(FATAL_ERROR "the resumed run did not say that it drops the log's ${logged_again} lines after step ${last_saved}")
  elseif(logged_again EQUAL 0 AND output MATCHES "which this run trains again")
    message(FATAL_ERROR "the resumed run dropped lines of its log where none came after its checkpoint")
  endif()
endif()

# Every loss recorded after the checkpoint, and the final ones, equal.
file(READ "${WORK_DIR}/uninterrupted.json" uninterrupted)
file(READ "${WORK_DIR}/resumed.json" resumed)
expect_same_values(uninterrupted "${uninterrupted}" resumed "${resumed}" ${FINAL})
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

foreach(log uninterrupted stopped_and_resumed)
  file(READ "${WORK_DIR}/${log}.log" ${log}_log)
  string(REGEX REPLACE ", \"seconds\": [^}]*}" "}" ${log}_log "${${log}_log}")
endforeach()
if(NOT uninterrupted_log STREQUAL stopped_and_resumed_log)
  message(FATAL_ERROR "the --log of the stopped and resumed runs is not the uninterrupted run's:\n"
                      "${stopped_and_resumed_log}\nagainst\n${uninterrupted_log}")
endif()
string(REGEX MATCHALL "\n" lines "${uninterrupted_log}")
list(LENGTH lines logged)
if(NOT logged EQUAL STEPS)
  message(FATAL_ERROR "the --log holds ${logged} lines for ${STEPS} steps")
endif()
if(STOP STREQUAL "chain")
  message(STATUS "a chain of ${job} jobs: the last one's ${resumed_steps} steps equal")
else()
  message(STATUS "resumed at step ${last_saved} after the ${STOP} stop at step ${STOP_AT}: ${resumed_steps} steps equal")
endif()
