#pragma once
// A kernel: local computation that an operation declares with the work it does (core/work.hpp), so a
// backend that models time prices it while the operation knows nothing of the model.
//
//   run_kernel(carrier, work, name, compute)
//
// runs `compute` now, for its result; where `carrier` (the communicator that moves the result on)
// launches kernels — sim_gpu's ranks drive modelled devices (sim/sim_gpu.hpp) — it is also one kernel
// on the device's compute stream, lasting what the device's roofline gives `work`. Elsewhere the check
// is compiled away and nothing is counted. On a rank that stores no values (sim_gpu's shapes only,
// core/element_memory.hpp) `compute` does not run, whatever the carrier: a kernel computes values only,
// and there are none to compute (nor memory behind them).
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "shardwise/core/element_memory.hpp"
#include "shardwise/core/work.hpp"

namespace shardwise {

template <class Carrier>
concept launches_kernels =
    requires(Carrier& c, const work& w, void (*compute)(), const std::string& name) { c.launch(w, compute, name); };

// `work_of` returns the kernel's work; `name` is anything a std::string is made from, or a callable that
// returns one. Both are only called where the kernel is launched, so work that takes counting and names
// that take formatting cost nothing elsewhere.
template <class Carrier, class WorkOf, class Name, class Compute>
requires std::is_invocable_r_v<work, WorkOf&>
void run_kernel(Carrier& carrier, WorkOf&& work_of, Name&& name, Compute&& compute) {
  if constexpr (launches_kernels<Carrier>) {
    if constexpr (std::is_invocable_v<Name&>) {
      carrier.launch(work_of(), std::forward<Compute>(compute), std::string(name()));
    } else {
      carrier.launch(work_of(), std::forward<Compute>(compute), std::string(std::forward<Name>(name)));
    }
  } else {
    (void)work_of;
    (void)name;
    if (element_memory::stored_on_this_thread()) std::forward<Compute>(compute)();
  }
}

template <class Carrier, class Name, class Compute>
void run_kernel(Carrier& carrier, const work& w, Name&& name, Compute&& compute) {
  run_kernel(carrier, [&w] { return w; }, std::forward<Name>(name), std::forward<Compute>(compute));
}

// `copy`, which reads and writes `elements` elements of T, as one kernel named "<operation> copy".
template <class T, class Carrier, class Copy>
void run_copy(Carrier& carrier, std::int64_t elements, std::string_view operation, Copy&& copy) {
  run_kernel(
      carrier, copy_work(static_cast<double>(sizeof(T)) * static_cast<double>(elements)),
      [&] { return std::string(operation) + " copy"; }, std::forward<Copy>(copy));
}

}  // namespace shardwise
