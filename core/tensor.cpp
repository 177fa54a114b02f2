#include "core/tensor.h"

#include <limits>

#include "core/memory.h"
#include "core/transfers.h"

namespace gridnn {

Storage::Storage(size_t bytes, const Device& device)
    : allocator_(&allocator_for(device)), data_(allocator_->allocate(bytes)), bytes_(bytes), device_(device) {}

Storage::~Storage() { allocator_->deallocate(data_, bytes_); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  GRIDNN_REQUIRE(shape.numel() <= std::numeric_limits<int64_t>::max() / int64_t(dtype_size(dtype)), "tensor ",
                 dtype_name(dtype), shape.str(), " needs more bytes than memory can address");
  Tensor t;
  t.storage_ = std::make_shared<Storage>(size_t(shape.numel()) * dtype_size(dtype), device);
  t.shape_ = shape;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  zero_bytes(t.raw(), device, t.nbytes());
  return t;
}

const Device& Tensor::device() const {
  static const Device kCpu = Device::cpu();
  return storage_ ? storage_->device() : kCpu;
}

void* Tensor::raw() {
  require_defined("raw");
  return static_cast<char*>(storage_->data()) + offset_ * int64_t(dtype_size(dtype_));
}

const void* Tensor::raw() const { return const_cast<Tensor*>(this)->raw(); }

Tensor Tensor::reshape(const Shape& shape) const {
  require_defined("reshape");
  GRIDNN_REQUIRE(shape.numel() == numel(), "reshape: cannot view ", str(), " as ", shape.str(), " (", numel(),
                 " elements vs ", shape.numel(), ")");
  Tensor v = *this;
  v.shape_ = shape;
  return v;
}

Tensor Tensor::narrow(int64_t start, int64_t length) const {
  require_defined("narrow");
  GRIDNN_REQUIRE(rank() >= 1, "narrow: a scalar tensor has no dimension 0");
  int64_t n = shape_[0];
  GRIDNN_REQUIRE(start >= 0 && length >= 0 && start + length <= n, "narrow: rows [", start, ", ", start + length,
                 ") are outside dimension 0 of ", str());
  Tensor v = *this;
  v.offset_ = offset_ + start * shape_.stride(0);
  v.shape_ = shape_.with(0, length);
  return v;
}

Tensor Tensor::to_host() const {
  require_defined("to_host");
  count_host_read();
  return device().is_cpu() ? *this : to(Device::cpu());
}

Tensor Tensor::to(const Device& device) const {
  require_defined("to");
  Tensor out = empty(shape_, dtype_, device);
  copy_bytes(out.raw(), device, raw(), this->device(), nbytes());
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  require_defined("copy_from");
  src.require_defined("copy_from");
  GRIDNN_REQUIRE(src.shape_ == shape_ && src.dtype_ == dtype_, "copy_from: source ", src.str(),
                 " does not match destination ", str(), "; cast or reshape first");
  GRIDNN_REQUIRE(!overlaps_partially(src), "copy_from: source ", src.str(),
                 " partly overlaps the destination in memory; copy through a temporary");
  copy_bytes(raw(), device(), src.raw(), src.device(), nbytes());
}

bool Tensor::overlaps_partially(const Tensor& other) const {
  if (!shares_storage_with(other)) return false;
  auto begin = [](const Tensor& t) { return static_cast<const char*>(t.raw()); };
  const char *a = begin(*this), *b = begin(other);
  if (a == b && nbytes() == other.nbytes()) return false;  // the very same elements
  return a < b + other.nbytes() && b < a + nbytes();
}

std::string Tensor::str() const {
  if (!defined()) return "undefined tensor";
  return std::string(dtype_name(dtype_)) + shape_.str() + " on " + device().str();
}

void Tensor::check_type(DType expected) const {
  GRIDNN_REQUIRE(dtype_ == expected, "tensor ", str(), " accessed as ", dtype_name(expected));
}

void Tensor::require_defined(const char* op) const {
  GRIDNN_REQUIRE(storage_ != nullptr, op, ": the tensor is undefined (default-constructed)");
}

}  // namespace gridnn
