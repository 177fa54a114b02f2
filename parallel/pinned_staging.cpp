// Pinned host buffers for staging device tensors (see pinned_staging.h).
#include "parallel/pinned_staging.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/transfers.h"

#if GRIDNN_HAVE_CUDA
#include "core/cuda_check.h"
#include "core/cuda_context.h"
#endif

namespace gridnn::parallel {

// ---- the pool -------------------------------------------------------------------------------

namespace {
// Requests are rounded up to a power of two (at least 64 KiB), so a tensor that grows a
// little from call to call does not reallocate every time.
size_t rounded_size(size_t bytes) {
  size_t n = size_t(64) << 10;
  while (n < bytes) n <<= 1;
  return n;
}

// Page-locked host memory (cudaHostAlloc) for staging tensors of `device`; plain host memory
// for the device stand-in (core/device.h), whose copies are memcpy.
void* host_buffer(size_t bytes, const Device& device) {
  if (device.is_standin()) {
    void* p = std::aligned_alloc(4096, bytes);
    GRIDNN_REQUIRE(p, "pinned staging: could not allocate ", bytes, " bytes of host memory");
    return p;
  }
#if GRIDNN_HAVE_CUDA
  void* p = nullptr;
  GRIDNN_CHECK_CUDA(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  return p;
#else
  throw Error(gridnn::detail::concat("pinned staging of ", bytes,
                                     " bytes asked for, but gridnn was built "
                                     "without CUDA (there are no device tensors to stage)"));
#endif
}

// `p` from host_buffer(..., device) with device.is_standin() == `plain`.
void free_host_buffer(void* p, bool plain) {  // never throws (destructors call it); nothing to do on failure
  if (plain) {
    std::free(p);
    return;
  }
#if GRIDNN_HAVE_CUDA
  cudaFreeHost(p);
#endif
}
}  // namespace

PinnedPool::~PinnedPool() {
  for (Buffer& b : buffers_)
    if (b.data) free_host_buffer(b.data, b.plain);
}

size_t PinnedPool::reserved_bytes() const {
  size_t n = 0;
  for (const Buffer& b : buffers_) n += b.bytes;
  return n;
}

PinnedPool::Lease PinnedPool::acquire(size_t bytes, const Device& device) {
  // The smallest free buffer that is large enough; else the largest free one, grown; else a
  // new one. So the pool holds as many buffers as were ever leased at once.
  size_t best = buffers_.size(), largest_free = buffers_.size();
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const Buffer& b = buffers_[i];
    if (b.leased) continue;
    if (b.bytes >= bytes && (best == buffers_.size() || b.bytes < buffers_[best].bytes)) best = i;
    if (largest_free == buffers_.size() || b.bytes > buffers_[largest_free].bytes) largest_free = i;
  }
  size_t slot = best;
  if (slot == buffers_.size()) {
    const size_t size = rounded_size(bytes);
    void* data = host_buffer(size, device);
    ++host_allocations_;
    if (largest_free != buffers_.size()) {  // grow that one
      slot = largest_free;
      free_host_buffer(buffers_[slot].data, buffers_[slot].plain);
    } else {
      buffers_.emplace_back();
    }
    buffers_[slot].data = data;
    buffers_[slot].bytes = size;
    buffers_[slot].plain = device.is_standin();
  }
  buffers_[slot].leased = true;
  return Lease(this, slot);
}

PinnedPool::Lease::Lease(Lease&& other) noexcept : pool_(std::exchange(other.pool_, nullptr)), slot_(other.slot_) {}

PinnedPool::Lease& PinnedPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::exchange(other.pool_, nullptr);
    slot_ = other.slot_;
  }
  return *this;
}

void* PinnedPool::Lease::data() const { return pool_ ? pool_->buffers_[slot_].data : nullptr; }
size_t PinnedPool::Lease::bytes() const { return pool_ ? pool_->buffers_[slot_].bytes : 0; }

void PinnedPool::Lease::release() {
  if (pool_) pool_->buffers_[slot_].leased = false;
  pool_ = nullptr;
}

// ---- copies -----------------------------------------------------------------------------------

void download_to_pinned(const Tensor& device_tensor, void* host) {
  GRIDNN_REQUIRE(device_tensor.device().is_cuda(), "download_to_pinned: ", device_tensor.str(),
                 " is not a device tensor");
  if (device_tensor.nbytes() == 0) return;
  count_staged_copy(/*to_device=*/false, device_tensor.nbytes());
  if (device_tensor.device().is_standin()) {
    std::memcpy(host, device_tensor.raw(), device_tensor.nbytes());
    return;
  }
#if GRIDNN_HAVE_CUDA
  cudaStream_t stream = cuda::context(device_tensor.device().index).stream;
  GRIDNN_CHECK_CUDA(cudaMemcpyAsync(host, device_tensor.raw(), device_tensor.nbytes(), cudaMemcpyDeviceToHost, stream));
  GRIDNN_CHECK_CUDA(cudaStreamSynchronize(stream));
#else
  (void)host;
  throw Error("download_to_pinned: gridnn was built without CUDA");
#endif
}

void upload_from_pinned(const void* host, Tensor& device_tensor) {
  GRIDNN_REQUIRE(device_tensor.device().is_cuda(), "upload_from_pinned: ", device_tensor.str(),
                 " is not a device tensor");
  if (device_tensor.nbytes() == 0) return;
  count_staged_copy(/*to_device=*/true, device_tensor.nbytes());
  if (device_tensor.device().is_standin()) {
    std::memcpy(device_tensor.raw(), host, device_tensor.nbytes());
    return;
  }
#if GRIDNN_HAVE_CUDA
  cudaStream_t stream = cuda::context(device_tensor.device().index).stream;
  GRIDNN_CHECK_CUDA(cudaMemcpyAsync(device_tensor.raw(), host, device_tensor.nbytes(), cudaMemcpyHostToDevice, stream));
  // The buffer goes back to the pool when the caller's lease ends and may be overwritten
  // by the next call at once: the copy must have read it by then.
  GRIDNN_CHECK_CUDA(cudaStreamSynchronize(stream));
#else
  (void)host;
  throw Error("upload_from_pinned: gridnn was built without CUDA");
#endif
}

// ---- staged tensors ---------------------------------------------------------------------------

StagedTensor::StagedTensor(PinnedPool& pool, const Tensor& t, bool fill) {
  GRIDNN_REQUIRE(t.defined(), "StagedTensor: undefined tensor");
  if (t.device().is_cpu()) {
    data_ = const_cast<void*>(t.raw());  // the transport writes outputs in place
    return;
  }
  staged_ = true;
  if (t.nbytes() == 0) return;  // nothing to move: data() stays null, as for an empty host tensor
  lease_ = pool.acquire(t.nbytes(), t.device());
  data_ = lease_.data();
  if (fill) download_to_pinned(t, data_);
}

void StagedTensor::store(Tensor& t) const {
  if (staged_) upload_from_pinned(data_, t);
}

}  // namespace gridnn::parallel
