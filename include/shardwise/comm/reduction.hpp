#pragma once
// The reduction operators of the collectives, and the one place that says what each computes.
#include <algorithm>
#include <string_view>

#include "shardwise/core/element.hpp"

namespace shardwise {

enum class op { sum, prod, min, max };

[[nodiscard]] constexpr std::string_view name_of(op reduction) noexcept {
  switch (reduction) {
    case op::sum: return "sum";
    case op::prod: return "prod";
    case op::min: return "min";
    case op::max: return "max";
  }
  return "unknown";
}

// Combines two partial results; Reduction is a compile-time op so inner loops vectorise.
template <op Reduction, class A>
[[nodiscard]] constexpr A combine(A left, A right) noexcept {
  if constexpr (Reduction == op::sum) return left + right;
  else if constexpr (Reduction == op::prod)
    return left * right;
  else if constexpr (Reduction == op::min)
    return std::min(left, right);
  else
    return std::max(left, right);
}

// Calls f with std::integral_constant<op, reduction> so a run-time op selects a compiled loop.
template <class F>
decltype(auto) dispatch(op reduction, F&& f) {
  switch (reduction) {
    case op::sum: return f(std::integral_constant<op, op::sum>{});
    case op::prod: return f(std::integral_constant<op, op::prod>{});
    case op::min: return f(std::integral_constant<op, op::min>{});
    case op::max: break;
  }
  return f(std::integral_constant<op, op::max>{});
}

}  // namespace shardwise
