// Enum <-> name, declared once per enum as a constexpr list of {value, name}: name(), parse() and
// the "a, b or c" text for error messages all read the same list, so adding a value is one line.
//   inline constexpr auto kPinModeNames = enumNames<PinMode>({{PinMode::kNone, "none"}, ...});
//   kPinModeNames.name(PinMode::kNone) == "none";  kPinModeNames.parse("none") == PinMode::kNone
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace bpftrain {

template <typename E>
struct NamedValue {
  E value;
  std::string_view name;
};

template <typename E, size_t N>
class EnumNames {
 public:
  constexpr explicit EnumNames(const NamedValue<E> (&list)[N]) {
    for (size_t i = 0; i < N; ++i) list_[i] = list[i];
  }

  // `fallback` for a value the list does not name (a sentinel such as kCount, or a cast byte).
  constexpr std::string_view name(E e, std::string_view fallback = "unknown") const {
    for (const NamedValue<E>& v : list_)
      if (v.value == e) return v.name;
    return fallback;
  }
  constexpr std::optional<E> parse(std::string_view s) const {
    for (const NamedValue<E>& v : list_)
      if (v.name == s) return v.value;
    return std::nullopt;
  }
  // The names for an error message: "ring, halving-doubling, bcube or hierarchical".
  std::string alternatives() const {
    std::string out;
    for (size_t i = 0; i < N; ++i) {
      if (i > 0) out += i + 1 == N ? " or " : ", ";
      out += list_[i].name;
    }
    return out;
  }
  static constexpr size_t size() { return N; }
  constexpr auto begin() const { return list_.begin(); }
  constexpr auto end() const { return list_.end(); }

 private:
  std::array<NamedValue<E>, N> list_{};
};

// Deduces N from the braced list: enumNames<Topology>({{Topology::kRing, "ring"}, ...}).
template <typename E, size_t N>
constexpr EnumNames<E, N> enumNames(const NamedValue<E> (&list)[N]) {
  return EnumNames<E, N>(list);
}

}  // namespace bpftrain
