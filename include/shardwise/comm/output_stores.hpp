#pragma once
// How a backend that writes a collective's output itself (the threads backend) stores it. By size, by
// default: around the caches (non-temporal stores) where a rank receives 4 MiB or more in the call, an
// output far bigger than the caches, and through them below that, where the caller usually reads it
// next. A caller that knows better, having measured both, says which. Backends whose output MPI or a
// simulated device writes ignore it.
namespace shardwise {

enum class output_stores { by_size, through_caches, around_caches };

}  // namespace shardwise
