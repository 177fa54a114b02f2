#include "test/ops/guarded_memory.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/allocator.h"
#include "core/memory.h"

namespace gridnn::test {
namespace {

// 256 bytes keep a block's alignment (64 on the host, 256 from cudaMalloc) and are wider
// than any vector store.
constexpr size_t kGuardBytes = 256;
using Guard = std::array<unsigned char, kGuardBytes>;

// The pattern before (side 0) and after (side 1) a block: no byte repeats within 16 and
// none is 0x00 or 0xFF, so a zero, a NaN, a small integer or a copy of the neighbouring
// bytes changes it.
const Guard& pattern(int side) {
  static const std::array<Guard, 2> patterns = [] {
    std::array<Guard, 2> p;
    for (int s = 0; s < 2; ++s)
      for (size_t i = 0; i < kGuardBytes; ++i)
        p[size_t(s)][i] = static_cast<unsigned char>(1 + (i * 37 + size_t(s) * 101) % 254);
    return p;
  }();
  return patterns[size_t(side)];
}

// Where side `side` of the block at `user` (`bytes` long) lies.
unsigned char* guard_at(void* user, size_t bytes, int side) {
  return static_cast<unsigned char*>(user) + (side == 0 ? -std::ptrdiff_t(kGuardBytes) : std::ptrdiff_t(bytes));
}

// A device's allocator with guards around every block; blocks it hands out are tracked until
// freed. One per device for the whole process (storage may outlive any GuardedMemory).
class GuardAllocator final : public Allocator {
 public:
  explicit GuardAllocator(const Device& device) : device_(device), base_(allocator_for(device)) {}

  void* allocate(size_t bytes) override {
    if (bytes == 0) return base_.allocate(0);
    void* user = static_cast<unsigned char*>(base_.allocate(bytes + 2 * kGuardBytes)) + kGuardBytes;
    write_guards(user, bytes);
    std::lock_guard<std::mutex> lock(mu_);
    live_[user] = bytes;
    return user;
  }

  void deallocate(void* ptr, size_t bytes) override {
    if (!ptr) return base_.deallocate(ptr, bytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (live_.erase(ptr) == 0) {  // a bug in the caller; called from destructors, so no throw
        std::fprintf(stderr, "gridnn: guarded allocator on %s: freeing unknown pointer %p\n", device_.str().c_str(),
                     ptr);
        std::abort();
      }
    }
    std::string damage;
    try {
      damage = damage_of(ptr, bytes);
    } catch (const std::exception& e) {
      damage = std::string("its guards could not be read: ") + e.what();
    }
    if (!damage.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      freed_damage_.push_back("a " + std::to_string(bytes) + "-byte block on " + device_.str() +
                              " (freed since): " + damage);
    }
    base_.deallocate(static_cast<unsigned char*>(ptr) - kGuardBytes, bytes + 2 * kGuardBytes);
  }

  AllocatorStats stats() const override { return base_.stats(); }
  Device device() const override { return device_; }
  void release_cached() override { base_.release_cached(); }
  void set_limit(size_t bytes) override { base_.set_limit(bytes); }

  // The damage found in every live block (named by `name_of`) and every block freed since the
  // last sweep; the live blocks' guards are written anew.
  template <class NameOf>
  std::vector<std::string> sweep(NameOf&& name_of) {
    std::vector<std::string> found;
    std::vector<std::pair<void*, size_t>> blocks;
    {
      std::lock_guard<std::mutex> lock(mu_);
      found.swap(freed_damage_);
      blocks.assign(live_.begin(), live_.end());
    }
    for (const auto& [user, bytes] : blocks) {
      const std::string damage = damage_of(user, bytes);
      if (damage.empty()) continue;
      found.push_back(name_of(user, bytes) + ": " + damage);
      write_guards(user, bytes);
    }
    return found;
  }

 private:
  void write_guards(void* user, size_t bytes) const {
    for (int side : {0, 1})
      copy_bytes(guard_at(user, bytes, side), device_, pattern(side).data(), Device::cpu(), kGuardBytes);
  }

  // "" when both guards hold their pattern; else which bytes changed.
  std::string damage_of(void* user, size_t bytes) const {
    std::string out;
    for (int side : {0, 1}) {
      Guard seen;
      copy_bytes(seen.data(), Device::cpu(), guard_at(user, bytes, side), device_, kGuardBytes);
      size_t changed = 0, nearest = 0;
      for (size_t i = 0; i < kGuardBytes; ++i) {
        if (seen[i] == pattern(side)[i]) continue;
        // The distance from the block of the changed byte closest to it.
        const size_t distance = side == 0 ? kGuardBytes - i : i + 1;
        if (changed++ == 0 || distance < nearest) nearest = distance;
      }
      if (changed == 0) continue;
      if (!out.empty()) out += "; ";
      out += std::to_string(changed) + (changed == 1 ? " byte" : " bytes") + " written " +
             (side == 0 ? "before its start (the nearest " : "past its end (the nearest ") + std::to_string(nearest) +
             (side == 0 ? " before)" : " past)");
    }
    return out;
  }

  const Device device_;
  Allocator& base_;
  std::mutex mu_;
  std::unordered_map<void*, size_t> live_;  // the user pointer of each handed-out block, its bytes
  std::vector<std::string> freed_damage_;
};

GuardAllocator& front_for(const Device& device) {
  static std::mutex mu;
  static auto* fronts = new std::map<std::string, std::unique_ptr<GuardAllocator>>;  // never destroyed
  std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<GuardAllocator>& front = (*fronts)[device.str()];
  if (!front) front = std::make_unique<GuardAllocator>(device);
  return *front;
}

}  // namespace

GuardedMemory::GuardedMemory(const std::vector<Device>& devices) : devices_(devices) {
  for (const Device& d : devices_) set_front_allocator(d, &front_for(d));
}

GuardedMemory::~GuardedMemory() {
  for (const Device& d : devices_) set_front_allocator(d, nullptr);
}

::testing::AssertionResult GuardedMemory::check(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> found;
  for (const Device& d : devices_) {
    auto name_of = [&](void* user, size_t bytes) {
      const auto* first = static_cast<const unsigned char*>(user);
      for (const auto& [name, t] : named) {
        if (!t.defined() || t.device() != d || t.numel() == 0) continue;
        const auto* p = static_cast<const unsigned char*>(t.raw());
        if (p >= first && p < first + bytes) return name + " (" + t.str() + ")";
      }
      return "a " + std::to_string(bytes) + "-byte block on " + d.str() + " (no input or output)";
    };
    for (std::string& f : front_for(d).sweep(name_of)) found.push_back(std::move(f));
  }
  if (found.empty()) return ::testing::AssertionSuccess();
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  r << "wrote outside its memory: ";
  for (size_t i = 0; i < found.size(); ++i) r << (i ? "; " : "") << found[i];
  return r;
}

}  // namespace gridnn::test
