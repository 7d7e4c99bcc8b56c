#pragma once
// A type's name as the compiler writes it ("user::tiles<3>"), for messages about types the library
// has no name of its own for (a user's layout). Read from the compiler's function signature, so it
// needs no RTTI; a compiler that writes neither GCC's nor Clang's form gives "a type".
#include <string>
#include <string_view>

namespace shardwise {

template <class T>
[[nodiscard]] std::string type_name() {
#if defined(__clang__) || defined(__GNUC__)
  const std::string_view signature = __PRETTY_FUNCTION__;  // "… [with T = user::tiles<3>; …]" or "… [T = …]"
  const auto start = signature.find("T = ");
  if (start != std::string_view::npos) {
    const auto name = signature.substr(start + 4);
    return std::string(name.substr(0, name.find_first_of(";]")));
  }
#endif
  return "a type";
}

}  // namespace shardwise
