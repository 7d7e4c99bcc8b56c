#pragma once
// Which algorithm the simulator runs for a collective (comm/algorithms/), a policy of the machine
// model. The automatic rule is MPICH's, in short: latency-bound messages take the algorithms with
// log P steps, bandwidth-bound ones the algorithms that move each byte the fewest times.
//
//   all_reduce       n < small_message_bytes → recursive doubling;
//                    otherwise P a power of two → Rabenseifner; otherwise → ring
//   all_gather,      P a power of two and the whole result (P·b) < small_message_bytes
//   reduce_scatter     → recursive doubling / halving; otherwise → ring
//   all_to_all(_v)   pairwise (direct, every block at once, where the model finds it faster)
//   broadcast,       n < small_message_bytes or P ≤ 2 → binomial; otherwise → pipelined chain in
//   reduce             segments of pipeline_segment_bytes
//   barrier          dissemination
//
// Any collective's algorithm can be fixed instead (e.g. `choice.all_reduce = algorithm::ring`);
// fixing one that does not apply (recursive all-gather on 6 ranks) is an argument_error.
//
// by_modelled_cost (the default): an automatic choice goes to whichever applicable algorithm the model
// gives the least time on the group's devices (sim/collective_cost.hpp), the rule's pick on a tie; the
// rule above alone when false. The channels an algorithm runs in (comm/algorithms/pattern.hpp) are
// the model's choice too (sim/collective_cost.hpp): one when by_modelled_cost is false.
#include <bit>
#include <string>

#include "shardwise/core/error.hpp"
#include "shardwise/sim/schedule.hpp"

namespace shardwise::sim {

struct algorithm_choice {
  double small_message_bytes = 64 * 1024;
  // How far collectives pipeline, as NCCL does: a broadcast or reduce chain in slices of one 512 KiB
  // step (sim/schedule.hpp); the other collectives in slices of two steps, 1 MiB
  // (ALLREDUCE_SLICESTEPS = NCCL_STEPS / 4, and alike for all-gather and reduce-scatter), each of
  // which a receiver reduces while the next arrives.
  double pipeline_segment_bytes = nccl_broadcast_slice_bytes;
  double reduction_slice_bytes = 2 * nccl_broadcast_slice_bytes;
  algorithm all_reduce = algorithm::automatic;
  algorithm all_gather = algorithm::automatic;
  algorithm reduce_scatter = algorithm::automatic;
  algorithm broadcast = algorithm::automatic;
  algorithm reduce = algorithm::automatic;
  algorithm all_to_all = algorithm::automatic;  // and all_to_all_v
  bool by_modelled_cost = true;

  // Whether `kind` is left to the automatic choice (collectives with one algorithm never are).
  [[nodiscard]] bool is_automatic(collective kind) const noexcept {
    switch (kind) {
      case collective::all_reduce: return all_reduce == algorithm::automatic;
      case collective::all_gather: return all_gather == algorithm::automatic;
      case collective::reduce_scatter: return reduce_scatter == algorithm::automatic;
      case collective::broadcast: return broadcast == algorithm::automatic;
      case collective::reduce: return reduce == algorithm::automatic;
      case collective::all_to_all:
      case collective::all_to_all_v: return all_to_all == algorithm::automatic;
      default: return false;
    }
  }

  [[nodiscard]] algorithm pick(const collective_shape& shape, int ranks) const {
    const bool power_of_two = std::has_single_bit(static_cast<unsigned>(ranks));
    const double whole = shape.bytes * ranks;
    switch (shape.kind) {
      case collective::all_reduce:
        return checked(shape, ranks,
                       all_reduce != algorithm::automatic  ? all_reduce
                       : shape.bytes < small_message_bytes ? algorithm::recursive_doubling
                       : power_of_two                      ? algorithm::rabenseifner
                                                           : algorithm::ring);
      case collective::all_gather:
      case collective::reduce_scatter: {
        const algorithm fixed = shape.kind == collective::all_gather ? all_gather : reduce_scatter;
        return checked(shape, ranks,
                       fixed != algorithm::automatic                 ? fixed
                       : power_of_two && whole < small_message_bytes ? algorithm::recursive_doubling
                                                                     : algorithm::ring);
      }
      case collective::all_to_all:
      case collective::all_to_all_v:
        return checked(shape, ranks, all_to_all != algorithm::automatic ? all_to_all : algorithm::pairwise);
      case collective::broadcast:
      case collective::reduce: {
        const algorithm fixed = shape.kind == collective::broadcast ? broadcast : reduce;
        return checked(shape, ranks,
                       fixed != algorithm::automatic                     ? fixed
                       : shape.bytes < small_message_bytes || ranks <= 2 ? algorithm::binomial
                                                                         : algorithm::pipelined);
      }
      case collective::barrier: return algorithm::dissemination;
    }
    return algorithm::automatic;
  }

 private:
  static algorithm checked(const collective_shape& shape, int ranks, algorithm a) {
    if (!applies(shape.kind, a, ranks))
      throw argument_error(-1, "algorithm_choice",
                           std::string(name_of(a)) + " is not an algorithm for " + std::string(name_of(shape.kind)) +
                               " on " + std::to_string(ranks) + " ranks");
    return a;
  }
};

}  // namespace shardwise::sim
