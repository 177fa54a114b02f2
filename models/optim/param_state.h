// What the optimizers share (models/optim/sgd.cpp, adam.cpp): the checks of a parameter
// list and the per-parameter buffers behind state() and load_state().
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "models/optim/optimizer.h"

namespace gridnn::optim::detail {

// Throws gridnn::Error unless the list is non-empty, every entry has a unique name and a
// defined f32 value. `optimizer` ("SGD", "Adam", "AdamW") starts the message.
void check_parameters(const std::string& optimizer, const ParameterList& params);

// Throws gridnn::Error unless `lr` is finite and >= 0.
void check_learning_rate(const std::string& optimizer, double lr);

// One buffer of one parameter: its state name ("fc.bias.exp_avg"), the parameter it is
// shaped and placed like, and where the optimizer keeps it (undefined until created).
struct BufferSlot {
  std::string name;
  const nn::Parameter* param;
  Tensor* tensor;
};

// Replaces every slot with a copy of its tensor on the parameter's device, or clears them
// all when steps == 0 (no buffer exists before the first step). Strict: with steps > 0
// every slot needs a tensor of its parameter's shape and dtype f32, and no other name may
// be present; otherwise throws one gridnn::Error listing every missing, unexpected and
// mis-shaped name, and changes nothing.
void load_buffers(const std::string& optimizer, const std::vector<BufferSlot>& slots,
                  const std::map<std::string, Tensor>& tensors, int64_t steps);

}  // namespace gridnn::optim::detail
