#pragma once
// How the examples that take options (07, 08, 09) read their command line: each lists its options as a
// table from flag to what stores the flag's value, and its switches (flags without a value). A flag
// that is not listed is refused as unknown before anything asks for its value, so a mistyped last
// flag is not reported as one that "needs a value". Every refusal prints the problem and the options'
// text to stderr and exits with 2; --help (-h) prints the text and exits with 0.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>

namespace shardwise::examples {

// Stores an option's value; returns what the option takes ("a whole number", "float or bf16") when
// the value is not that, and nothing when it is.
using option_reader = std::function<std::string(const std::string& value)>;

// Which numbers an option takes besides its type's.
enum class number_sign { any, non_negative, positive };

// A whole number, or a number, which must be all of the value and of the sign asked for.
template <class Number>
requires std::is_arithmetic_v<Number> option_reader read_into(Number& into, number_sign sign = number_sign::any) {
  return [&into, sign](const std::string& value) -> std::string {
    Number n{};
    const auto [end, problem] = std::from_chars(value.data(), value.data() + value.size(), n);
    const bool signed_right = sign == number_sign::positive ? n > 0 : sign == number_sign::non_negative ? n >= 0 : true;
    if (problem == std::errc() && end == value.data() + value.size() && signed_right) {
      into = n;
      return "";
    }
    const std::string kind = std::is_integral_v<Number> ? "whole number" : "number";
    if (sign == number_sign::positive) return "a positive " + kind;
    if (sign == number_sign::non_negative || std::is_unsigned_v<Number>) return "a non-negative " + kind;
    return "a " + kind;
  };
}
template <class Number>
option_reader read_positive_into(Number& into) {
  return read_into(into, number_sign::positive);
}
template <class Number>
option_reader read_non_negative_into(Number& into) {
  return read_into(into, number_sign::non_negative);
}

inline option_reader read_into(std::string& into) {
  return [&into](const std::string& value) {
    into = value;
    return std::string();
  };
}

// One of `choices`.
inline option_reader read_one_of(std::string& into, std::initializer_list<std::string_view> choices) {
  std::string takes;
  for (const auto choice : choices)
    takes += (takes.empty() ? "" : choice == *(choices.end() - 1) ? " or " : ", ") + std::string(choice);
  return [&into, allowed = std::set<std::string, std::less<>>(choices.begin(), choices.end()),
          takes](const std::string& value) {
    if (!allowed.contains(value)) return takes;
    into = value;
    return std::string();
  };
}

struct command_line {
  std::string_view program;  // "07_train_gpt", which every refusal starts with
  const char* options_text;  // what --help prints

  [[noreturn]] void refuse(const std::string& problem) const {
    std::fprintf(stderr, "%.*s: %s\n%s", static_cast<int>(program.size()), program.data(), problem.c_str(),
                 options_text);
    std::exit(2);
  }

  // Reads argv[1..argc) and returns the flags given, switches included.
  std::set<std::string, std::less<>> read(int argc, char** argv,
                                          const std::map<std::string_view, option_reader>& readers,
                                          const std::map<std::string_view, bool*>& switches = {}) const {
    std::set<std::string, std::less<>> given;
    for (int i = 1; i < argc; ++i) {
      const std::string_view flag = argv[i];
      if (flag == "--help" || flag == "-h") {
        std::fputs(options_text, stdout);
        std::exit(0);
      }
      given.emplace(flag);
      if (const auto on = switches.find(flag); on != switches.end()) {
        *on->second = true;
        continue;
      }
      const auto reader = readers.find(flag);
      if (reader == readers.end()) refuse("unknown option " + std::string(flag));
      if (i + 1 >= argc) refuse("the option " + std::string(flag) + " needs a value");
      const std::string value = argv[++i];
      if (const std::string takes = reader->second(value); !takes.empty())
        refuse("the option " + std::string(flag) + " takes " + takes + ", not \"" + value + "\"");
    }
    return given;
  }
};

}  // namespace shardwise::examples
