#include "models/layers/module.h"

#include "core/allocator.h"
#include "kernels/elementwise.h"

namespace gridnn::nn {

Parameter& Module::register_parameter(const std::string& name, Tensor value) {
  for (const auto& [n, p] : parameters_) GRIDNN_REQUIRE(n != name, "parameter '", name, "' registered twice");
  auto p = std::make_unique<Parameter>();
  p->grad = Tensor::zeros(value.shape(), value.dtype(), value.device());
  p->value = std::move(value);
  parameters_.emplace_back(name, std::move(p));
  return *parameters_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor value) {
  for (const auto& [n, b] : buffers_) GRIDNN_REQUIRE(n != name, "buffer '", name, "' registered twice");
  buffers_.emplace_back(name, std::make_unique<Tensor>(std::move(value)));
  return *buffers_.back().second;
}

std::string Module::child_prefix(const std::string& prefix, const std::string& name) {
  return name.empty() ? prefix : prefix + name + ".";
}

void Module::add_child(const std::string& name, std::unique_ptr<Module> child) {
  for (const auto& [n, c] : children_) GRIDNN_REQUIRE(n != name, "submodule '", name, "' registered twice");
  child->training_ = training_;
  child->set_math_mode(math_);
  children_.emplace_back(name, std::move(child));
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Parameter*>>* params,
                     std::vector<std::pair<std::string, Tensor*>>* buffers) {
  if (params)
    for (auto& [name, p] : parameters_) params->emplace_back(prefix + name, p.get());
  if (buffers)
    for (auto& [name, b] : buffers_) buffers->emplace_back(prefix + name, b.get());
  for (auto& [name, child] : children_) child->collect(child_prefix(prefix, name), params, buffers);
}

std::vector<std::pair<std::string, Parameter*>> Module::named_parameters() {
  std::vector<std::pair<std::string, Parameter*>> out;
  collect("", &out, nullptr);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Module::named_buffers() {
  std::vector<std::pair<std::string, Tensor*>> out;
  collect("", nullptr, &out);
  return out;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out{this};
  for (auto& [name, child] : children_)
    for (Module* m : child->modules()) out.push_back(m);
  return out;
}

namespace {
thread_local BackwardObserver* g_backward_observer = nullptr;
}  // namespace

BackwardObserverScope::BackwardObserverScope(BackwardObserver& observer) : previous_(g_backward_observer) {
  g_backward_observer = &observer;
}
BackwardObserverScope::~BackwardObserverScope() { g_backward_observer = previous_; }
BackwardObserver* BackwardObserverScope::current() { return g_backward_observer; }

Tensor Module::backward(Tensor dy) {  // NOLINT(performance-unnecessary-value-param): may be given up
  Tensor dx;
  {
    const AllocationScope scope("the backward of ", name_);
    dx = do_backward(dy);
  }
  if (BackwardObserver* observer = g_backward_observer) observer->on_backward_done(*this);
  return dx;
}

void Module::release_saved() {
  drop_saved();
  for (auto& [name, child] : children_) child->release_saved();
}

void Module::zero_grad() {
  for (auto& [name, p] : named_parameters()) ops::fill(p->grad, 0.0);
}

void Module::name_modules(const std::string& name) {
  if (!name.empty()) name_ = name;
  for (auto& [child_name, child] : children_)
    child->name_modules(child_name.empty() ? name : name.empty() ? child_name : name + "." + child_name);
}

void Module::to(const Device& device) {
  // A tensor already there stays (Tensor::to always copies: the copy would double the
  // parameters for a moment, the run's peak on a small network).
  auto move = [&device](Tensor& t) {
    if (t.defined() && t.device() != device) t = t.to(device);
  };
  for (auto& [name, p] : named_parameters()) {
    move(p->value);
    move(p->grad);
  }
  for (auto& [name, b] : named_buffers()) move(*b);
  notify_device_change(device);
}

void Module::notify_device_change(const Device& device) {
  on_device_change(device);
  for (auto& [name, child] : children_) child->notify_device_change(device);
}

void Module::train(bool on) {
  training_ = on;
  on_mode_change();
  for (auto& [name, child] : children_) child->train(on);
}

void Module::set_math_mode(ops::MathMode math) {
  math_ = math;
  for (auto& [name, child] : children_) child->set_math_mode(math);
}

void Module::initialize(uint64_t seed) { initialize_with_prefix(seed, ""); }

ops::RandomKey Module::parameter_key(uint64_t seed, const std::string& prefix, const std::string& name,
                                     const Parameter& p) {
  const ParameterLayout& l = p.layout;
  if (!l.split_over) return ops::RandomKey::named(seed, prefix + name);
  std::vector<int64_t> origin(size_t(p.value.rank()), 0);
  origin.at(size_t(l.split_dim)) = l.first;  // this block's place in the whole tensor
  return ops::RandomKey::box(seed, philox_stream_id((prefix + name).c_str()),
                             p.value.shape().with(l.split_dim, l.whole), origin);
}

Shape Module::describe(const Shape& input, plan::RankStep& /*step*/) const {
  require_layer(children_.empty(), name_.empty() ? "Module" : name_,
                "a container must describe how its children run (override describe)");
  return input;
}

void Module::initialize_with_prefix(uint64_t seed, const std::string& prefix) {
  reset_parameters(seed, prefix);
  for (auto& [name, child] : children_) child->initialize_with_prefix(seed, child_prefix(prefix, name));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor h = x;
  for (const auto& [name, child] : children()) h = child->forward(h);
  return h;
}

Tensor Sequential::do_backward(const Tensor& dy) {
  Tensor g = dy;
  for (auto it = children().rbegin(); it != children().rend(); ++it) g = it->second->backward(g);
  return g;
}

Shape Sequential::describe(const Shape& input, plan::RankStep& step) const {
  Shape s = input;
  for (const auto& [name, child] : children()) s = child->describe(s, step);
  return s;
}

void require_layer(bool cond, const std::string& layer, const std::string& what) {
  if (!cond) throw Error(layer + ": " + what);
}

namespace {
thread_local SizeClasses described_classes = SizeClasses::host;
}  // namespace

int64_t stored_bytes(int64_t bytes) { return int64_t(size_class(described_classes, size_t(bytes), host_page_size())); }
int64_t activation_bytes(const Shape& s) { return stored_bytes(s.numel() * int64_t(sizeof(float))); }

int64_t rounded_copies_bytes(ops::MathMode m, const Device& device, std::initializer_list<Shape> shapes) {
  int64_t bytes = 0;
  if (m != ops::MathMode::fp32 && device.runs_on_host())
    for (const Shape& s : shapes) bytes += activation_bytes(s);
  return bytes;
}

SizeClassScope::SizeClassScope(const Device& device) : previous_(described_classes) {
  described_classes = size_classes_of(device);
}
SizeClassScope::~SizeClassScope() { described_classes = previous_; }

}  // namespace gridnn::nn
