// Checks shared by the datasets' load().
#include "models/data/dataset.h"

#include "core/error.h"

namespace gridnn::data {

SlabRange check_sample_output(const std::string& who, const Shape& sample_shape, const DepthSlab& slab,
                              const Tensor& x) {
  const int64_t depth = sample_shape[1];
  const SlabRange r{slab.d_begin, slab.d_end < 0 ? depth : slab.d_end};
  GRIDNN_REQUIRE(r.begin >= 0 && r.begin < r.end && r.end <= depth, who, ": depth slab [", slab.d_begin, ", ",
                 slab.d_end, ") is not inside the ", depth, " planes of a sample");
  const Shape want{sample_shape[0], r.end - r.begin, sample_shape[2], sample_shape[3]};
  GRIDNN_REQUIRE(x.defined() && x.device().is_cpu() && x.dtype() == DType::f32 && x.shape() == want, who,
                 ": the output must be a CPU f32 tensor ", want.str(), ", got ",
                 x.defined() ? x.str() : std::string("(undefined)"));
  return r;
}

}  // namespace gridnn::data
