#pragma once
// The simulated GPU backend is sim/sim_gpu.hpp; this path includes it for code written against it here.
#include "shardwise/sim/sim_gpu.hpp"
