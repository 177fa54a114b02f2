// Size classes (size_class.h).
#include "core/size_class.h"

#include <unistd.h>

#include <limits>

#include "core/error.h"

namespace gridnn {
namespace {

size_t round_up(size_t bytes, size_t granule) {
  GRIDNN_REQUIRE(bytes <= std::numeric_limits<size_t>::max() - granule, "size class: ", bytes,
                 " bytes cannot be allocated");
  return (bytes + granule - 1) / granule * granule;
}

}  // namespace

size_t size_class(SizeClasses classes, size_t bytes, size_t page) {
  if (bytes == 0) return 0;
  if (classes == SizeClasses::host) return round_up(bytes, bytes < kHostCachedFrom ? kHostSmallGranule : page);
  return round_up(bytes, bytes <= kCudaSmallLimit ? kCudaSmallGranule : kCudaLargeGranule);
}

SizeClasses size_classes_of(const Device& d) { return d.is_cpu() ? SizeClasses::host : SizeClasses::cuda; }

size_t host_page_size() {
  static const size_t page = [] {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? size_t(p) : size_t(4096);
  }();
  return page;
}

size_t block_bytes(const Device& d, size_t bytes) { return size_class(size_classes_of(d), bytes, host_page_size()); }

}  // namespace gridnn
