// The names of an enum's values, in one table per enum: printing, parsing (an unknown name is
// a gridnn::Error listing the names), the options' JSON (core/enum_json.h) and the programs'
// flags (tools/cli.h) all take their text from it.
//
//   enum class Fit { crop, resample };
//   inline constexpr EnumName<Fit> kFitNames[] = {{Fit::crop, "crop", "center crop / zero pad"},
//                                                 {Fit::resample, "resample", "trilinear"}};
//   constexpr EnumNames<Fit> enum_names(Fit) { return {"fit mode", kFitNames}; }  // found by ADL
//
//   enum_name(Fit::crop)          "crop"
//   parse_enum<Fit>("resample")   Fit::resample
//   parse_enum<Fit>("stretch")    Error: unknown fit mode "stretch"; use crop (center crop / zero pad) or
//                                 resample (trilinear)
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

#include "core/error.h"

namespace gridnn {

template <class E>
struct EnumName {
  E value;
  const char* name;
  const char* meaning = nullptr;  // what choosing it does, for the message that lists the names
};

template <class E>
struct EnumNames {
  template <size_t N>
  constexpr EnumNames(const char* what_they_are, const EnumName<E> (&names)[N])
      : what(what_they_are), first(names), count(N) {}
  constexpr const EnumName<E>* begin() const { return first; }
  constexpr const EnumName<E>* end() const { return first + count; }

  const char* what;  // what the values are ("fit mode"), for messages
  const EnumName<E>* first;
  size_t count;
};

// True for the enums that have a name table.
template <class E, class = void>
struct HasEnumNames : std::false_type {};
template <class E>
struct HasEnumNames<E, std::void_t<decltype(enum_names(E{}))>> : std::true_type {};

// `value`'s name in `names`: the enum's own table, or another spelling of it (a file format's);
// "?" for a value not in the table.
template <class E>
constexpr const char* name_in(const EnumNames<E>& names, E value) {
  for (const EnumName<E>& n : names)
    if (n.value == value) return n.name;
  return "?";
}

// The value named `name` in `names`; nullopt for a name not in the table.
template <class E>
std::optional<E> find_in(const EnumNames<E>& names, std::string_view name) {
  for (const EnumName<E>& n : names)
    if (name == n.name) return n.value;
  return std::nullopt;
}

template <class E>
constexpr const char* enum_name(E value) {
  return name_in(enum_names(E{}), value);
}

template <class E>
std::optional<E> find_enum(std::string_view name) {
  return find_in(enum_names(E{}), name);
}

// "crop or resample"; with meanings "crop (center crop / zero pad) or resample (trilinear)".
template <class E>
std::string enum_choices(bool meanings = false) {
  const EnumNames<E> names = enum_names(E{});
  std::string text;
  for (size_t i = 0; i < names.count; ++i) {
    const EnumName<E>& n = names.first[i];
    text += i == 0 ? "" : i + 1 == names.count ? " or " : ", ";
    text += n.name;
    if (meanings && n.meaning) text += std::string(" (") + n.meaning + ")";
  }
  return text;
}

template <class E>
E parse_enum(std::string_view name) {
  if (const std::optional<E> value = find_enum<E>(name)) return *value;
  throw Error(std::string("unknown ") + enum_names(E{}).what + " \"" + std::string(name) + "\"; use " +
              enum_choices<E>(true));
}

}  // namespace gridnn
