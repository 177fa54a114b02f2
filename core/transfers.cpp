// The host <-> device copy counters of core/transfers.h.
#include "core/transfers.h"

#include <atomic>
#include <cstdio>
#include <initializer_list>

namespace gridnn {
namespace {

struct Counters {
  std::atomic<int64_t> uploads{0}, downloads{0}, upload_bytes{0}, download_bytes{0};
  std::atomic<int64_t> staged_uploads{0}, staged_downloads{0}, staged_bytes{0};
  std::atomic<int64_t> host_reads{0};
};

Counters& counters() {
  static Counters c;
  return c;
}

void add(std::atomic<int64_t>& counter, int64_t n) { counter.fetch_add(n, std::memory_order_relaxed); }
int64_t get(const std::atomic<int64_t>& counter) { return counter.load(std::memory_order_relaxed); }

std::string bytes_str(int64_t bytes) {
  char buf[32];
  if (bytes < 1024)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  else if (bytes < 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.1f KB", double(bytes) / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.1f MB", double(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

TransferCounts TransferCounts::since(const TransferCounts& e) const {
  TransferCounts d;
  d.uploads = uploads - e.uploads;
  d.downloads = downloads - e.downloads;
  d.upload_bytes = upload_bytes - e.upload_bytes;
  d.download_bytes = download_bytes - e.download_bytes;
  d.staged_uploads = staged_uploads - e.staged_uploads;
  d.staged_downloads = staged_downloads - e.staged_downloads;
  d.staged_bytes = staged_bytes - e.staged_bytes;
  d.host_reads = host_reads - e.host_reads;
  return d;
}

TransferCounts& TransferCounts::operator+=(const TransferCounts& o) {
  uploads += o.uploads;
  downloads += o.downloads;
  upload_bytes += o.upload_bytes;
  download_bytes += o.download_bytes;
  staged_uploads += o.staged_uploads;
  staged_downloads += o.staged_downloads;
  staged_bytes += o.staged_bytes;
  host_reads += o.host_reads;
  return *this;
}

std::string TransferCounts::str() const {
  return std::to_string(uploads) + " uploads (" + bytes_str(upload_bytes) + "), " + std::to_string(downloads) +
         " downloads (" + bytes_str(download_bytes) + "), staged for communication " + std::to_string(staged_uploads) +
         " up / " + std::to_string(staged_downloads) + " down (" + bytes_str(staged_bytes) + "), " +
         std::to_string(host_reads) + " host reads";
}

TransferCounts transfer_counts() {
  const Counters& c = counters();
  TransferCounts t;
  t.uploads = get(c.uploads);
  t.downloads = get(c.downloads);
  t.upload_bytes = get(c.upload_bytes);
  t.download_bytes = get(c.download_bytes);
  t.staged_uploads = get(c.staged_uploads);
  t.staged_downloads = get(c.staged_downloads);
  t.staged_bytes = get(c.staged_bytes);
  t.host_reads = get(c.host_reads);
  return t;
}

void reset_transfer_counts() {
  Counters& c = counters();
  for (std::atomic<int64_t>* a : {&c.uploads, &c.downloads, &c.upload_bytes, &c.download_bytes, &c.staged_uploads,
                                  &c.staged_downloads, &c.staged_bytes, &c.host_reads})
    a->store(0, std::memory_order_relaxed);
}

void count_copy(const Device& dst, const Device& src, size_t bytes) {
  Counters& c = counters();
  if (dst.is_cpu() && !src.is_cpu()) {
    add(c.downloads, 1);
    add(c.download_bytes, int64_t(bytes));
  } else if (!dst.is_cpu() && src.is_cpu()) {
    add(c.uploads, 1);
    add(c.upload_bytes, int64_t(bytes));
  }
}

void count_staged_copy(bool to_device, size_t bytes) {
  Counters& c = counters();
  add(to_device ? c.staged_uploads : c.staged_downloads, 1);
  add(c.staged_bytes, int64_t(bytes));
}

void count_host_read() { add(counters().host_reads, 1); }

}  // namespace gridnn
