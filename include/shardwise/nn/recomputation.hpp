#pragma once
// What a Transformer block computes again in its backward pass instead of keeping it from its forward
// (Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"; Megatron's
// --recompute-granularity):
//   none       every activation the backward reads is kept;
//   attention  all but attention's probabilities, a sequence x sequence matrix per sample and head,
//              which the backward computes again from the kept queries and keys (Megatron's selective):
//              the activations that grow with the sequence's square, for one more QKᵀ and softmax;
//   block      only the block's input, the backward running the block's forward again first
//              (Megatron's full, torch.utils.checkpoint round a block): one block's activations at a
//              time, for one more forward pass of the blocks.
// The gradients are the same bits in all three.
#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace shardwise::nn {

enum class recomputation { none, attention, block };

inline constexpr std::array<std::string_view, 3> recomputation_names{"none", "attention", "block"};

[[nodiscard]] constexpr std::string_view name_of(recomputation what) {
  return recomputation_names[static_cast<std::size_t>(what)];
}

// What a run that recomputes so does, in words for a program's output: "recomputing attention",
// "recomputing each block", or nothing.
[[nodiscard]] constexpr std::string_view describe(recomputation what) {
  constexpr std::array<std::string_view, 3> words{"", "recomputing attention", "recomputing each block"};
  return words[static_cast<std::size_t>(what)];
}

// The recomputation a command line names ("none", "attention", "block"), or none if it names none.
[[nodiscard]] constexpr std::optional<recomputation> recomputation_named(std::string_view name) {
  for (std::size_t i = 0; i < recomputation_names.size(); ++i)
    if (recomputation_names[i] == name) return static_cast<recomputation>(i);
  return std::nullopt;
}

}  // namespace shardwise::nn
