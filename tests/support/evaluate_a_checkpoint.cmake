# Evaluates a training example's checkpoint with --eval-only, as a user who trained a model and wants
# its metrics (and a sample) from it later:
#   1. a run of ARGS and MODEL that saves its last step;
#   2. --eval-only of that checkpoint on the same mesh with ARGS alone (the example builds the checkpoint's model
#      from the sizes it records): no step trained, nothing saved, the metrics KEYS of --json the trained
#      run's final ones bit for bit, and, where it samples (PROMPT given), the same sample;
#   3. with PROMPT, --eval-only again with --prompt PROMPT: the sample goes on from that text; with
#      --temperature 0 it is the likeliest byte each time, the same text for every --seed.
# Variables: PROGRAM (the example's command), ARGS, MODEL (the model's options, or nothing where the
# evaluation needs them too: then in ARGS) and KEYS, each with its words separated by "|"; PROMPT;
# WORK_DIR.
include("${CMAKE_CURRENT_LIST_DIR}/example_scripts.cmake")
require_arguments(evaluate_a_checkpoint.cmake PROGRAM ARGS MODEL KEYS WORK_DIR)
split_words(PROGRAM ARGS MODEL KEYS)
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

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

run_example("trained" TRUE ${MODEL} --checkpoint "${WORK_DIR}/checkpoints" --json "${WORK_DIR}/trained.json")
if(DEFINED PROMPT)
  sample_of("${output}" trained_sample)
endif()
file(READ "${WORK_DIR}/trained.json" trained)
string(JSON steps GET "${trained}" steps_done)

run_example("evaluated" TRUE --resume "${WORK_DIR}/checkpoints" --eval-only --json "${WORK_DIR}/evaluated.json")
if(NOT output MATCHES "evaluated step ${steps}: ")
  message(FATAL_ERROR "the evaluation did not say that it evaluated step ${steps}")
elseif(output MATCHES "\nstep +[0-9]+/|saved step|note: ")
  message(FATAL_ERROR "the evaluation trained, saved or noted what a run that trains on would")
endif()
file(READ "${WORK_DIR}/evaluated.json" evaluated)
expect_same_values(trained "${trained}" evaluated "${evaluated}" steps_done ${KEYS})
if(DEFINED PROMPT)
  sample_of("${output}" evaluated_sample)
  if(NOT evaluated_sample STREQUAL trained_sample)
    message(FATAL_ERROR "the evaluated checkpoint sampled\n${evaluated_sample}\nwhere the trained model sampled\n${trained_sample}")
  endif()
  run_example("prompted" TRUE --resume "${WORK_DIR}/checkpoints" --eval-only --prompt "${PROMPT}")
  if(NOT output MATCHES "\n--- sampled after \"${PROMPT}\"\n")
    message(FATAL_ERROR "the sample did not go on from --prompt ${PROMPT}")
  endif()
  sample_of("${output}" prompted_sample)
  foreach(seed 1 2)
    run_example("greedy, seed ${seed}" TRUE --resume "${WORK_DIR}/checkpoints" --eval-only --prompt "${PROMPT}"
                --temperature 0 --seed ${seed})
    sample_of("${output}" greedy_sample_${seed})
  endforeach()
  if(NOT greedy_sample_1 MATCHES "^\n--- sampled after \"${PROMPT}\", the likeliest byte each time\n")
    message(FATAL_ERROR "the greedy sample did not say how it was drawn:${greedy_sample_1}")
  elseif(NOT greedy_sample_1 STREQUAL greedy_sample_2)
    message(FATAL_ERROR "greedy samples differ by --seed:${greedy_sample_1}\nand${greedy_sample_2}")
  endif()
  string(REGEX REPLACE "^\n[^\n]*\n" "" greedy_text "${greedy_sample_1}")  # after the "sampled after" line
  string(REGEX REPLACE "^\n[^\n]*\n" "" prompted_text "${prompted_sample}")
  if(greedy_text STREQUAL prompted_text)
    message(FATAL_ERROR "the greedy sample is the one at temperature 1: --temperature changed nothing")
  endif()
endif()
list(JOIN KEYS ", " compared)
message(STATUS "step ${steps} evaluated as trained: ${compared} the same")
