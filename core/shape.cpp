#include "core/shape.h"

#include <limits>

#include "core/error.h"

namespace gridnn {

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
  GRIDNN_REQUIRE(dims.size() <= size_t(kMaxRank), "a shape has at most ", kMaxRank, " dimensions (N, C, D, H, W); got ",
                 dims.size());
  rank_ = int(dims.size());
  // The product of the non-zero dimensions must fit: strides are computed from them even
  // when another dimension makes the tensor empty.
  int64_t product = 1;
  for (int i = 0; i < rank_; ++i) {
    GRIDNN_REQUIRE(dims[i] >= 0, "shape dimensions must be >= 0; dimension ", i, " is ", dims[i]);
    dims_[i] = dims[i];
    if (dims[i] == 0) continue;
    GRIDNN_REQUIRE(product <= std::numeric_limits<int64_t>::max() / dims[i], "shape ", str(),
                   " has too many elements to index with 64 bits");
    product *= dims[i];
  }
}

int Shape::normalize(int i) const {
  int j = i < 0 ? i + rank_ : i;
  GRIDNN_REQUIRE(j >= 0 && j < rank_, "dimension ", i, " is out of range for shape ", str());
  return j;
}

int64_t Shape::operator[](int i) const { return dims_[normalize(i)]; }

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

int64_t Shape::stride(int i) const {
  int64_t s = 1;
  for (int j = rank_ - 1; j > normalize(i); --j) s *= dims_[j];
  return s;
}

Shape Shape::with(int i, int64_t size) const {
  std::vector<int64_t> d = dims();
  d[normalize(i)] = size;
  return Shape(d);
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

}  // namespace gridnn
