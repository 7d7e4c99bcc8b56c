#pragma once
// What a user chooses about the fused embedding-bag + all-to-all (fused/embedding_all_to_all.hpp):
// the path, the slices and their order, the pooling, which ranks store into each other's memory, and
// the machine model the automatic choices consult.
#include <chrono>
#include <cstdint>
#include <optional>

#include "shardwise/fused/embedding_kernels.hpp"
#include "shardwise/fused/embedding_plan.hpp"
#include "shardwise/sim/gpu_initiated_model.hpp"
#include "shardwise/sim/machine.hpp"

namespace shardwise::fused {

enum class path { automatic, fused, baseline };

// embedding_options::slice_rows: a number of embeddings per slice, or automatic_slice_rows (the
// default) to let the operator choose the size from its machine model (best_slice_rows in
// fused/embedding_cost.hpp); without a model, one slice per table and destination where every slice is
// stored in place (nothing travels that a smaller slice could start early), else the paper's inter-node
// runs' 32.
inline constexpr std::int64_t paper_slice_rows = 32;
inline constexpr std::int64_t automatic_slice_rows = 0;

struct embedding_options {
  std::int64_t slice_rows = automatic_slice_rows;  // or embeddings per slice
  // automatic: communication_aware where slices travel (messages, sim_gpu), table_by_table where they
  // are stored straight into the peer's output (threads, MPI on one node: 10% faster at batch 1024 × 64
  // tables on threads, where the communication-aware order came back to every table after it had left
  // the cache).
  slice_order order = slice_order::automatic;
  fused::pooling pooling = pooling::sum;
  path choice = path::automatic;                                     // of the forward (operator())
  path backward_choice = path::automatic;                            // of the backward (backward())
  std::chrono::duration<double> timeout = std::chrono::seconds(60);  // for any one call's waits
  // fused() pools straight into the outputs of the peers whose memory this rank reaches (threads; MPI
  // ranks on its node, through an MPI-3 shared-memory window) and raises their flags, and sends slices to
  // the others as messages; false sends every slice as a message (on threads too). sim_gpu always stores
  // or puts: its model is of GPU-initiated stores and puts.
  bool share_memory = true;
  // More than 0: only groups of this many consecutive ranks share memory, as if each group were a node,
  // so one machine runs the path of several (stores within a group, messages between groups) to test or
  // measure it, as MPICH's MPIR_CVAR_NUM_CLIQUES does for its hierarchical collectives. Not on sim_gpu,
  // whose machine model says where its nodes are.
  int ranks_per_node = 0;
  sim::gpu_initiated_model gpu_initiated{};
  // The machine operator() decides on (sim_gpu: its own); without one operator() measures both paths.
  std::optional<sim::machine> machine;
  // Bag length the decision assumes: 1 is conservative (pooling is what fusing hides, so a gain with
  // the least of it holds with more).
  std::int64_t expected_bag_length = 1;
};

}  // namespace shardwise::fused
