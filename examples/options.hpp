#pragma once
// How the examples that take options (07, 08, 09) read their command line: each lists its options as a
// table from flag to what stores the flag's value, and its switches (flags without a value). A flag
// that is not listed is refused as unknown before anything asks for its value, so a mistyped last
// flag is not reported as one that "needs a value". Every refusal prints the problem and the options'
// text to stderr and exits with 2; --help (-h) prints the text and the defaults, and exits with 0.
#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace shardwise::examples {

// What stores an option's value, and says which value it holds.
struct option_reader {
  // Stores `value`; returns what the option takes ("a whole number", "float or bf16") when the value
  // is not that, and nothing when it is.
  std::function<std::string(const std::string& value)> store;
  // The value held now, as the command line gives it: before any flag is read, the default; "" for
  // none.
  std::function<std::string()> shown;
};

// A number as a command line would give it: the shortest digits that read back as the same value, so
// that two values compare equal as text only when they are equal.
template <class Number>
requires std::is_arithmetic_v<Number> std::string number_text(Number number) {
  std::array<char, 32> text{};
  return std::string(text.data(), std::to_chars(text.data(), text.data() + text.size(), number).ptr);
}

// Which numbers an option takes besides its type's.
enum class number_sign { any, non_negative, positive };

// A whole number, or a number, which must be all of the value and of the sign asked for.
template <class Number>
requires std::is_arithmetic_v<Number> option_reader read_into(Number& into, number_sign sign = number_sign::any) {
  return {[&into, sign](const std::string& value) -> std::string {
            Number n{};
            const auto [end, problem] = std::from_chars(value.data(), value.data() + value.size(), n);
            const bool signed_right = sign == number_sign::positive       ? n > 0
                                      : sign == number_sign::non_negative ? n >= 0
                                                                          : true;
            if (problem == std::errc() && end == value.data() + value.size() && signed_right) {
              into = n;
              return "";
            }
            const std::string kind = std::is_integral_v<Number> ? "whole number" : "number";
            if (sign == number_sign::positive) return "a positive " + kind;
            if (sign == number_sign::non_negative || std::is_unsigned_v<Number>) return "a non-negative " + kind;
            return "a " + kind;
          },
          [&into] { return number_text(into); }};
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
  return {[&into](const std::string& value) {
            into = value;
            return std::string();
          },
          [&into] { return into; }};
}

// "a, b or c"
inline std::string listed(std::span<const std::string_view> choices) {
  std::string text;
  for (std::size_t i = 0; i < choices.size(); ++i)
    text += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(choices[i]);
  return text;
}

// One of `choices`.
inline option_reader read_one_of(std::string& into, std::span<const std::string_view> choices) {
  return {[&into, allowed = std::vector<std::string_view>(choices.begin(), choices.end()),
           takes = listed(choices)](const std::string& value) {
            if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) return takes;
            into = value;
            return std::string();
          },
          [&into] { return into; }};
}

inline option_reader read_one_of(std::string& into, std::initializer_list<std::string_view> choices) {
  return read_one_of(into, std::span(choices.begin(), choices.size()));
}

// One of an enumeration's values by its name, `names` in the enumerators' order.
template <class Enumeration, std::size_t N>
requires std::is_enum_v<Enumeration>
option_reader read_named(Enumeration& into, const std::array<std::string_view, N>& names) {
  return {[&into, &names](const std::string& value) {
            const auto named = std::find(names.begin(), names.end(), value);
            if (named == names.end()) return listed(names);
            into = static_cast<Enumeration>(named - names.begin());
            return std::string();
          },
          [&into, &names] { return std::string(names[static_cast<std::size_t>(into)]); }};
}

// The options a program takes, in the order its help lists their defaults.
using option_table = std::vector<std::pair<std::string_view, option_reader>>;

struct command_line {
  std::string_view program;  // "07_train_gpt", which every refusal starts with
  const char* options_text;  // what --help prints first

  [[noreturn]] void refuse(const std::string& problem) const {
    std::fprintf(stderr, "%.*s: %s\n%s", static_cast<int>(program.size()), program.data(), problem.c_str(),
                 options_text);
    std::exit(2);
  }

  // Reads argv[1..argc) and returns the flags given, switches included.
  std::set<std::string, std::less<>> read(int argc, char** argv, const option_table& readers,
                                          const std::vector<std::pair<std::string_view, bool*>>& switches = {}) const {
    for (int i = 1; i < argc; ++i)
      if (const std::string_view flag = argv[i]; flag == "--help" || flag == "-h") help(readers);
    const auto listed_as = [](std::string_view flag, const auto& table) {
      return std::find_if(table.begin(), table.end(), [&](const auto& entry) { return entry.first == flag; });
    };
    std::set<std::string, std::less<>> given;
    for (int i = 1; i < argc; ++i) {
      const std::string_view flag = argv[i];
      given.emplace(flag);
      if (const auto on = listed_as(flag, switches); on != switches.end()) {
        *on->second = true;
        continue;
      }
      const auto reader = listed_as(flag, readers);
      if (reader == readers.end()) refuse("unknown option " + std::string(flag));
      if (i + 1 >= argc) refuse("the option " + std::string(flag) + " needs a value");
      const std::string value = argv[++i];
      if (const std::string takes = reader->second.store(value); !takes.empty())
        refuse("the option " + std::string(flag) + " takes " + takes + ", not \"" + value + "\"");
    }
    return given;
  }

  // The options' text, then the defaults as the flags that give them, read from what stores each
  // option before any flag is: the program's own values, which no text can drift from. A default the
  // flag cannot give (0 meaning "the preset's" where the flag takes positive numbers) is left out.
  [[noreturn]] void help(const option_table& readers) const {
    std::string text = "defaults:", line;
    for (const auto& [flag, reader] : readers) {
      const std::string value = reader.shown();
      if (value.empty() || !reader.store(value).empty()) continue;
      const std::string option = " " + std::string(flag) + " " + value;
      if (line.size() + option.size() > 100 - 9) {
        text += line + "\n         ";
        line.clear();
      }
      line += option;
    }
    std::printf("%s%s%s\n", options_text, text.c_str(), line.c_str());
    std::exit(0);
  }
};

}  // namespace shardwise::examples
