// Shape of a Tensor: up to five dimensions (N, C, D, H, W), row-major.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace gridnn {

class Shape {
 public:
  static constexpr int kMaxRank = 5;

  Shape() = default;  // rank 0: a scalar with one element
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const;  // negative i counts from the end
  int64_t numel() const;
  // Elements between consecutive indices of dimension i (row-major).
  int64_t stride(int i) const;
  std::vector<int64_t> dims() const { return {dims_.begin(), dims_.begin() + rank_}; }
  // Same shape with dimension i replaced.
  Shape with(int i, int64_t size) const;

  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string str() const;  // "[2, 3, 4]"

 private:
  int normalize(int i) const;
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace gridnn
