#pragma once
// AdamW: Adam with weight decay decoupled from the moments (d = Adam's direction + λ w).
#include "shardwise/optim/adam.hpp"

namespace shardwise::optim {

using adamw = basic_adam<weight_decay_style::decoupled>;

}  // namespace shardwise::optim
