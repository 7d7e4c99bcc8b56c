#pragma once
// nn::no_grad: while one lives on a rank's thread, the layers' forward passes keep nothing for a
// backward pass, as under PyTorch's torch.no_grad(). Evaluation and sampling then hold a layer's
// activations only while that layer runs, not the whole model's until the next forward.
//
//   double validation_loss;
//   {
//     nn::no_grad evaluating;
//     validation_loss = model.forward(tokens, targets);
//   }
//
// A forward under no_grad replaces what the layers kept with nothing, so a backward after it throws
// (nn/saved_for_backward.hpp); train with a forward, then its backward, as always. Guards nest; each
// rank has its own mode (core/rank_local.hpp).
#include "shardwise/core/rank_local.hpp"

namespace shardwise::nn {

class no_grad {
 public:
  no_grad() noexcept : previous_(keeping()) { keeping() = false; }
  ~no_grad() { keeping() = previous_; }
  no_grad(const no_grad&) = delete;
  no_grad& operator=(const no_grad&) = delete;

  // Whether a forward on this thread keeps what its backward needs: no no_grad alive here.
  [[nodiscard]] static bool keeps_for_backward() noexcept { return keeping(); }

 private:
  struct mode {
    bool keeping = true;
  };
  static bool& keeping() noexcept { return rank_local<mode>().keeping; }
  bool previous_;
};

// At the end of a forward: under no_grad, what it kept is given back at once (std::optional,
// std::shared_ptr), since no backward will read it.
template <class... Kept>
void release_under_no_grad(Kept&... kept) {
  if (!no_grad::keeps_for_backward()) (kept.reset(), ...);
}

}  // namespace shardwise::nn
