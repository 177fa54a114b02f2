// Dropout(p) with a Philox mask (kernels/dropout.h): in training, each element is zeroed
// with probability p and the others are scaled by 1 / (1 - p); in eval mode, and for
// p = 0, it is the identity.
//
// The mask is keyed by (seed, stream, step, global element index) and recomputed in
// backward, never stored. initialize(seed) sets the seed and takes the stream from the
// layer's full name ("fc_dropout." -> philox_stream_id("fc_dropout.mask")), so the mask
// does not depend on construction order; set_key sets them directly. The trainer calls
// set_step(step) once per training step (a new mask each step; repeated forwards within
// one step, as in a gradient check, see the same mask) and, on a batch shard,
// set_batch_offset(first global sample) so that the mask does not depend on the grid.
#pragma once

#include <cstdint>

#include "kernels/dropout.h"
#include "models/layers/module.h"

namespace gridnn::nn {

class Dropout : public Module {
 public:
  explicit Dropout(float p = 0.5f);

  Tensor forward(const Tensor& x) override;

  void set_key(uint64_t seed, const std::string& name);
  void set_step(uint64_t step) { key_.step = step; }
  void set_batch_offset(int64_t first_sample) { first_sample_ = first_sample; }
  float p() const { return p_; }

 protected:
  void reset_parameters(uint64_t seed, const std::string& prefix) override;

 private:
  Tensor do_backward(const Tensor& dy) override;

  std::string name() const;
  bool active() const { return is_training() && p_ > 0.0f; }
  ops::DropoutKey key_for(const Shape& shape) const;

  float p_;
  ops::DropoutKey key_;
  int64_t first_sample_ = 0;
  Shape input_shape_;
  ops::DropoutKey forward_key_;  // the mask of the last forward, for backward
  bool forward_active_ = false;
  bool has_forward_ = false;
};

}  // namespace gridnn::nn
