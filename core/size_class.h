// Size classes: the bytes an allocator holds for a request, the same function for the
// allocator that hands the memory out and for the memory model that predicts it
// (docs/design.md §6a).
//
// An allocator rounds every request up to its size class and hands out a block of exactly
// that size: a freed block is cached and serves later requests of the same class only. So the
// bytes in use are the sum of the classes of the live requests, whatever the order in which
// blocks were freed and taken, and a prediction that knows the tensors knows the bytes.
//   host: under 256 KiB a multiple of 64 bytes (aligned_alloc, a cache line); from 256 KiB a
//         whole number of pages (one mmap each, cached).
//   CUDA: up to 1 MiB a multiple of 512 bytes; above, of 2 MiB (cudaMalloc's own granule).
// The device stand-in (core/device.h) counts by the CUDA classes, so that a prediction for a
// GPU is checked on the CPU.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace gridnn {

enum class SizeClasses { host, cuda };

constexpr size_t kHostCachedFrom = size_t(256) << 10;  // host classes from here are cached blocks
constexpr size_t kHostSmallGranule = 64;
constexpr size_t kCudaSmallLimit = size_t(1) << 20;
constexpr size_t kCudaSmallGranule = 512;
constexpr size_t kCudaLargeGranule = size_t(2) << 20;

// The class of a request of `bytes` (0 for 0); `page` is the host's page size.
size_t size_class(SizeClasses classes, size_t bytes, size_t page);
// The classes of the allocator of `d` (the stand-in's are CUDA's).
SizeClasses size_classes_of(const Device& d);
// The class of `bytes` on `d`'s allocator, with this host's page size.
size_t block_bytes(const Device& d, size_t bytes);
size_t host_page_size();

}  // namespace gridnn
