// GradientSync: buckets by communicator, each a flat tensor the gradients are views of, one
// all-reduce each, after backward or overlapping it.
#include "models/run/gradient_sync.h"

#include <algorithm>
#include <chrono>
#include <unordered_set>

#include "core/error.h"
#include "core/profile.h"

namespace gridnn::run {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }
}  // namespace

GradientSync::GradientSync(nn::Module& model, std::vector<std::pair<std::string, nn::Parameter*>> params,
                           int64_t bucket_bytes)
    : bucket_bytes_(bucket_bytes), model_(&model) {
  std::reverse(params.begin(), params.end());  // about the order backward finishes them
  std::vector<CommOf> ordered;
  for (auto& [name, p] : params) {
    GRIDNN_REQUIRE(p->grad.dtype() == DType::f32, "gradient sync: parameter ", name, " has a ",
                   dtype_name(p->grad.dtype()), " gradient; only f32 is supported");
    parallel::Communicator* comm = p->layout.grad_sum_over;
    if (comm && comm->size() > 1) ordered.emplace_back(p, comm);
  }
  assign(ordered);
  index_slots();
  // Made before any backward, so the gradients hold nothing yet: they go first and the
  // buckets start at zero, so that setup never holds the gradients twice (the memory model
  // counts them once, docs/design.md §6a).
  for (Bucket& b : buckets_)
    for (nn::Parameter* p : b.params) p->grad = Tensor();
  for (Bucket& b : buckets_) bind(b);
}

GradientSync::GradientSync(nn::Module& model, int64_t bucket_bytes)
    : GradientSync(model, model.named_parameters(), bucket_bytes) {}

void GradientSync::assign(const std::vector<CommOf>& ordered) {
  buckets_.clear();
  for (auto& [p, comm] : ordered) {
    const int64_t bytes = gradient_slot_elements(p->value.numel()) * int64_t(sizeof(float));
    Bucket* open = nullptr;
    for (auto& b : buckets_)
      if (b.comm == comm && b.elements * int64_t(sizeof(float)) + bytes <= bucket_bytes_ &&
          b.params.front()->value.device() == p->value.device())
        open = &b;
    if (!open || open != &buckets_.back()) {  // keep buckets contiguous in the order given
      buckets_.push_back({comm, {}, 0, 0, {}, 0, nullptr});
      open = &buckets_.back();
    }
    open->params.push_back(p);
    open->elements += gradient_slot_elements(p->value.numel());
  }
  std::map<std::string, int64_t> used;  // elements of each device's arena
  for (Bucket& b : buckets_) {
    int64_t& at = used[b.params.front()->value.device().str()];
    b.offset = at;
    at += b.elements;
  }
}

void GradientSync::index_slots() {
  slot_bucket_.clear();
  slot_param_.clear();
  module_slots_.clear();
  std::unordered_map<const nn::Parameter*, int64_t> slot_of;
  for (size_t b = 0; b < buckets_.size(); ++b)
    for (nn::Parameter* p : buckets_[b].params) {
      slot_of[p] = int64_t(slot_bucket_.size());
      slot_bucket_.push_back(int64_t(b));
      slot_param_.push_back(p);
    }
  slot_ready_.assign(slot_bucket_.size(), 0);
  for (nn::Module* m : model_->modules()) {
    std::vector<int64_t> slots;
    for (auto& [name, p] : m->named_parameters()) {
      auto it = slot_of.find(p);
      if (it != slot_of.end()) slots.push_back(it->second);
    }
    if (!slots.empty()) module_slots_[m] = std::move(slots);
  }
}

void GradientSync::rebuild_in_ready_order() {
  std::unordered_map<const nn::Parameter*, parallel::Communicator*> comm_of;
  std::vector<CommOf> old_order;
  for (const Bucket& b : buckets_)
    for (nn::Parameter* p : b.params) {
      comm_of[p] = b.comm;
      old_order.emplace_back(p, b.comm);
    }
  std::vector<CommOf> ordered;
  const std::unordered_set<const nn::Parameter*> ready(ready_order_.begin(), ready_order_.end());
  for (nn::Parameter* p : ready_order_) ordered.emplace_back(p, comm_of.at(p));
  for (const CommOf& pc : old_order)
    if (!ready.count(pc.first)) ordered.push_back(pc);
  if (ordered == old_order) return;
  // The gradients are zero (on_zero_grad): the old buckets go first and the new ones start
  // at zero, so the rebuild never holds the gradients twice.
  for (Bucket& b : buckets_)
    for (nn::Parameter* p : b.params) p->grad = Tensor();
  buckets_.clear();
  arenas_.clear();
  assign(ordered);
  index_slots();
  for (Bucket& b : buckets_) bind(b);
}

void GradientSync::on_zero_grad() {
  if (rebuilt_ || ready_order_.empty()) return;
  rebuilt_ = true;  // every rank alike: the order comes from the module structure
  rebuild_in_ready_order();
}

GradientSync::~GradientSync() = default;  // a pending all-reduce waits for itself

void GradientSync::bind(Bucket& b) {
  const Device device = b.params.front()->value.device();
  if (!b.flat.defined() || b.flat.device() != device) {
    Tensor& arena = arenas_[device.str()];
    if (!arena.defined()) {
      int64_t elements = 0;
      for (const Bucket& other : buckets_)
        if (other.params.front()->value.device() == device) elements += other.elements;
      arena = Tensor::zeros({elements}, DType::f32, device);
      for (auto it = arenas_.begin(); it != arenas_.end();) {  // a device the parameters left
        bool used = false;
        for (const Bucket& other : buckets_) used |= other.params.front()->value.device().str() == it->first;
        it = used ? std::next(it) : arenas_.erase(it);
      }
    }
    b.flat = arena.narrow(b.offset, b.elements);
  }
  int64_t offset = 0;
  for (nn::Parameter* p : b.params) {
    Tensor view = b.flat.narrow(offset, p->value.numel()).reshape(p->value.shape());
    if (!p->grad.defined() || p->grad.raw() != view.raw()) {  // not bound yet, or replaced since
      if (p->grad.defined()) view.copy_from(p->grad);
      p->grad = std::move(view);
    }
    offset += gradient_slot_elements(p->value.numel());
  }
}

void GradientSync::reduce() {
  if (buckets_.empty()) return;
  const ProfileScope profile(ProfileKind::gradient_sync);
  parallel::CommLayerScope scope("gradients");
  for (Bucket& b : buckets_) {
    bind(b);
    b.comm->all_reduce(b.flat);
  }
}

void GradientSync::start(Bucket& b) {
  parallel::CommLayerScope scope("gradients");
  bind(b);
  b.pending = b.comm->start_all_reduce(b.flat);
  start_order_.push_back(int64_t(&b - buckets_.data()));
}

void GradientSync::advance() {
  for (Bucket& b : buckets_)
    if (b.pending) b.pending->test();
}

void GradientSync::begin() {
  for (Bucket& b : buckets_) {
    b.pending.reset();
    b.waiting = int64_t(b.params.size());
  }
  std::fill(slot_ready_.begin(), slot_ready_.end(), 0);
  ready_order_.clear();
  start_order_.clear();
  overlapping_ = true;
  started_in_backward_ = 0;
  seconds_in_backward_ = seconds_in_finish_ = 0;
}

void GradientSync::on_backward_done(nn::Module& module) {
  if (!overlapping_ || buckets_.empty()) return;
  const ProfileScope profile(ProfileKind::gradient_sync);
  const auto t0 = Clock::now();
  auto it = module_slots_.find(&module);
  if (it != module_slots_.end())
    for (int64_t slot : it->second) {
      if (slot_ready_[size_t(slot)]) continue;
      slot_ready_[size_t(slot)] = 1;
      Bucket& b = buckets_[size_t(slot_bucket_[size_t(slot)])];
      if (!rebuilt_) ready_order_.push_back(slot_param_[size_t(slot)]);
      if (--b.waiting == 0) {
        start(b);
        ++started_in_backward_;
      }
    }
  advance();
  seconds_in_backward_ += since(t0);
}

void GradientSync::finish() {
  GRIDNN_REQUIRE(overlapping_, "GradientSync::finish without begin");
  const auto t0 = Clock::now();
  overlapping_ = false;
  if (!buckets_.empty()) {
    const ProfileScope profile(ProfileKind::gradient_sync);
    for (Bucket& b : buckets_)  // whatever no notification covered (in bucket order on every rank)
      if (!b.pending) start(b);
    for (Bucket& b : buckets_) {
      b.pending->wait();
      b.pending.reset();
    }
  }
  seconds_in_finish_ = since(t0);
}

}  // namespace gridnn::run
