// Tensor: a shape, a dtype and a device over reference-counted contiguous storage.
//
// Storage is row-major and contiguous. Views (reshape, narrow along dimension 0) share
// the storage of the tensor they come from. Copying a Tensor object copies the handle,
// not the data; data moves only through clone(), to() and copy_from(), which you call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace gridnn {

// A block of memory from one allocator, returned to it when the last Tensor lets go.
class Storage {
 public:
  Storage(size_t bytes, const Device& device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  const Device& device() const { return device_; }

 private:
  Allocator* allocator_;
  void* data_;
  size_t bytes_;
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;  // undefined: no storage

  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
  // A CPU tensor holding `values` (converted from T to dtype DTypeOf<T>).
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  const Device& device() const;
  int64_t numel() const { return shape_.numel(); }
  int rank() const { return shape_.rank(); }
  int64_t size(int dim) const { return shape_[dim]; }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }

  void* raw();
  const void* raw() const;
  // Typed pointer; throws when T does not match the dtype.
  template <class T>
  T* data() {
    check_type(DTypeOf<T>::value);
    return static_cast<T*>(raw());
  }
  template <class T>
  const T* data() const {
    check_type(DTypeOf<T>::value);
    return static_cast<const T*>(raw());
  }

  // View with the same elements in another shape (numel must match).
  Tensor reshape(const Shape& shape) const;
  // View of rows [start, start + length) of dimension 0.
  Tensor narrow(int64_t start, int64_t length) const;

  // New tensor on `device` with the same values (always a copy, also on the same device).
  Tensor to(const Device& device) const;
  Tensor clone() const { return to(device()); }
  // This tensor itself when it is on the host, else a host copy: for reading values.
  Tensor to_host() const;
  // This tensor itself when it is on `device`, else a copy there: for an input that is only
  // read (a batch the step does not write).
  Tensor on(const Device& device) const { return this->device() == device ? *this : to(device); }
  // Copies src's values into this tensor's storage (same shape and dtype; any devices).
  void copy_from(const Tensor& src);
  // Values as a host vector of T (T must match the dtype); copies from the device if needed.
  template <class T>
  std::vector<T> to_vector() const;

  bool shares_storage_with(const Tensor& other) const { return storage_ && storage_ == other.storage_; }
  // No other handle (copy or view) refers to this storage: a callee given the only handle
  // may write over it (a gradient passed to nn::Module::backward with std::move).
  bool sole_handle() const { return storage_ && storage_.use_count() == 1; }
  // True when the two tensors' bytes overlap without being exactly the same range (an
  // element-wise op may write its input in place, but not a shifted view of it).
  bool overlaps_partially(const Tensor& other) const;
  // "f32[2, 3] on cpu"
  std::string str() const;

 private:
  void check_type(DType expected) const;
  void require_defined(const char* op) const;

  std::shared_ptr<Storage> storage_;
  int64_t offset_ = 0;  // in elements
  Shape shape_;
  DType dtype_ = DType::f32;
};

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  GRIDNN_REQUIRE(int64_t(values.size()) == shape.numel(), "from_vector: ", values.size(), " values do not fill shape ",
                 shape.str());
  Tensor t = empty(shape, DTypeOf<T>::value);
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  require_defined("to_vector");
  check_type(DTypeOf<T>::value);
  std::vector<T> out(static_cast<size_t>(numel()));
  Tensor host = to_host();
  const T* p = host.data<T>();
  std::copy(p, p + numel(), out.begin());
  return out;
}

}  // namespace gridnn
