// The message of the gridnn::Error that `f` throws, or "(no error)" when it throws none:
// for tests that check what an error says.
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace gridnn::test {

inline std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace gridnn::test
