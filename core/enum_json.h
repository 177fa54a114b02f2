// Enums with a name table (core/names.h) in nlohmann JSON: written as their names, read back
// from them (an unknown name is a gridnn::Error listing the names).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>

#include "core/names.h"

namespace nlohmann {

template <class E>
struct adl_serializer<E, std::enable_if_t<gridnn::HasEnumNames<E>::value>> {
  template <class Json>
  static void to_json(Json& j, E value) {
    j = gridnn::enum_name(value);
  }
  template <class Json>
  static void from_json(const Json& j, E& value) {
    value = gridnn::parse_enum<E>(j.template get<std::string>());
  }
};

}  // namespace nlohmann
