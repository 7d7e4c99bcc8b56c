# Evaluates a training example's checkpoint with --eval-only, as a user who trained a model and wants
# its loss and a sample from it later:
#   1. a run of ARGS that saves its last step;
#   2. --eval-only of that checkpoint on the same mesh, with no model options (the checkpoint's sizes
#      build its model): no step trained, nothing saved, the validation loss the trained run's final one
#      bit for bit, and the sample the same bytes (the same seed and prompt);
#   3. --eval-only again with --prompt: the sample goes on from that text.
# Variables: PROGRAM (the example's command), ARGS (the run's options, without the model's sizes after
# the first run: MODEL), MODEL (the model's sizes), each with its words separated by "|"; WORK_DIR.
include("${CMAKE_CURRENT_LIST_DIR}/example_scripts.cmake")
require_arguments(evaluate_a_checkpoint.cmake PROGRAM ARGS MODEL WORK_DIR)
split_words(PROGRAM ARGS MODEL)
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

function(run_example name)
  execute_process(COMMAND ${PROGRAM} ${ARGS} ${ARGN}
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE errors TIMEOUT 60)
  message(STATUS "${name}: exit ${result}\n${output}${errors}")
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${name} failed")
  endif()
  set(output "${output}" PARENT_SCOPE)
endfunction()

# The sample: from its "--- sampled after" line to the "---" that ends it.
function(sample_of text into)
  string(FIND "${text}" "\n--- sampled after" first)
  string(FIND "${text}" "\n---\n" last REVERSE)
  if(first EQUAL -1 OR last LESS first)
    message(FATAL_ERROR "no sample in the output")
  endif()
  math(EXPR length "${last} - ${first}")
  string(SUBSTRING "${text}" ${first} ${length} sample)
  set(${into} "${sample}" PARENT_SCOPE)
endfunction()

run_example("trained" ${MODEL} --checkpoint "${WORK_DIR}/checkpoints" --json "${WORK_DIR}/trained.json")
sample_of("${output}" trained_sample)
file(READ "${WORK_DIR}/trained.json" trained)
string(JSON steps GET "${trained}" steps_done)

run_example("evaluated" --resume "${WORK_DIR}/checkpoints" --eval-only --json "${WORK_DIR}/evaluated.json")
if(NOT output MATCHES "evaluated step ${steps}: validation loss ")
  message(FATAL_ERROR "the evaluation did not say that it evaluated step ${steps}")
elseif(output MATCHES "\nstep +[0-9]+/|saved step|note: ")
  message(FATAL_ERROR "the evaluation trained, saved or noted what a run that trains on would")
endif()
sample_of("${output}" evaluated_sample)
if(NOT evaluated_sample STREQUAL trained_sample)
  message(FATAL_ERROR "the evaluated checkpoint sampled\n${evaluated_sample}\nwhere the trained model sampled\n${trained_sample}")
endif()
file(READ "${WORK_DIR}/evaluated.json" evaluated)
expect_same_values(trained "${trained}" evaluated "${evaluated}" steps_done final_val_loss)

run_example("prompted" --resume "${WORK_DIR}/checkpoints" --eval-only --prompt "To be, or")
if(NOT output MATCHES "\n--- sampled after \"To be, or\"\n")
  message(FATAL_ERROR "the sample did not go on from --prompt")
endif()
message(STATUS "step ${steps} evaluated as trained: the same validation loss and sample")
