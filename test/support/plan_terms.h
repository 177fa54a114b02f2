// Looking up a layer of a plan::PlanCost in the cost model's tests.
#pragma once

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "plan/cost_model.h"

namespace gridnn::test {

inline const plan::LayerCost& layer_of(const plan::PlanCost& plan, const std::string& layer) {
  for (const plan::LayerCost& l : plan.layers)
    if (l.layer == layer) return l;
  throw std::runtime_error("no layer " + layer);
}

// The words the layer moves per step (-1 and a test failure when there is no such layer).
inline double words_of(const plan::PlanCost& plan, const std::string& layer) {
  for (const plan::LayerCost& l : plan.layers)
    if (l.layer == layer) return l.words();
  ADD_FAILURE() << "no layer " << layer;
  return -1;
}

}  // namespace gridnn::test
