#pragma once
// collective_matmul_choice: the form, ring or unfused (ops/collective_matmul.hpp), that one product
// of a layer takes call after call; nn::linear holds one for each collective product it runs. Given
// ring or unfused, every call takes that form. Given automatic, the first calls run the two in
// pairs, ring first in every other pair, and time them (comm/path_trial.hpp: on simulated GPUs in
// virtual time, one call of each; elsewhere by the wall clock, three to eight pairs), and every
// later call takes the faster. Which is faster depends on the machine and the shape: on simulated
// MI210 nodes of 8 the ring loses to the unfused form for an MLP of hidden 1024 or 2048 and wins at
// 4096 (docs/tensor-parallel.md). The trial's calls are collective over the communicator given, the
// world of the layer's mesh in nn::linear, so all its ranks keep the same form (with data replicas,
// the mesh of one replica: each replica chooses for itself, which changes results only in the order
// of float sums).
#include <optional>

#include "shardwise/comm/path_trial.hpp"
#include "shardwise/ops/matmul.hpp"

namespace shardwise {

class collective_matmul_choice {
 public:
  explicit collective_matmul_choice(collective_matmul_form form = collective_matmul_form::ring) : form_(form) {
    if (form == collective_matmul_form::automatic) trial_.emplace();
  }

  // product(form) in this call's form: collective over `comm` while the trial runs.
  template <class Comm, class Product>
  auto operator()(Comm& comm, Product&& product) {
    if (!trial_) return product(form_);
    auto result = trial_->call(comm, [&](bool ring) {
      return product(ring ? collective_matmul_form::ring : collective_matmul_form::unfused);
    });
    if (trial_->done()) {
      form_ = trial_->chose_first() ? collective_matmul_form::ring : collective_matmul_form::unfused;
      trial_.reset();
    }
    return result;
  }

  // The form calls take: the one given, or the trial's once it has chosen; automatic while it runs.
  [[nodiscard]] collective_matmul_form form() const noexcept { return form_; }

 private:
  collective_matmul_form form_;
  std::optional<path_trial> trial_;
};

}  // namespace shardwise
