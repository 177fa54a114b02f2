// Raw byte movement between devices. Every host/device copy in gridnn goes through
// these two functions, called explicitly (Tensor::to, Tensor::copy_from): no hidden copies.
#pragma once

#include <cstddef>

#include "core/device.h"

namespace gridnn {

// Copies n bytes. Device work is queued on the device's compute stream; a copy to the
// host waits for it, so the host can read the bytes when this returns.
void copy_bytes(void* dst, const Device& dst_device, const void* src, const Device& src_device, size_t n);
void zero_bytes(void* dst, const Device& device, size_t n);

}  // namespace gridnn
