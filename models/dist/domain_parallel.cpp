// DomainParallel: the halo exchange around a single-process layer (see the header).
#include "models/dist/domain_parallel.h"

#include <algorithm>
#include <limits>

#include "core/profile.h"
#include "models/layers/conv3d.h"
#include "models/layers/pool3d.h"

namespace gridnn::nn {

DomainParallel::DomainParallel(parallel::ProcessGrid& grid, std::unique_ptr<Module> layer, parallel::DepthWindow window,
                               int64_t global_in_depth, float padding_value, const std::string& kind,
                               parallel::HaloMode mode)
    : Module(kind),
      profile_kind_(dynamic_cast<const Conv3d*>(layer.get()) ? ProfileKind::convolution : ProfileKind::pooling),
      conv_(dynamic_cast<Conv3d*>(layer.get())),
      exchange_(grid.row(),
                parallel::plan_depth_halo(kind, global_in_depth, window, grid.row().size(), grid.row().rank()), kind),
      padding_value_(padding_value) {
  layer_ = &register_module("", std::move(layer));
  for (auto& [name, p] : layer_->named_parameters()) p->layout.grad_sum_over = &grid.stage_comm();
  const parallel::DepthHalo& h = exchange_.halo();
  if (mode != parallel::HaloMode::overlap || !conv_ || h.receives.empty()) return;
  overlap_ = true;
  // Forward in parts when every own plane is in the extended slab, in one piece.
  const parallel::Range mine = h.input.owned();
  if (h.needed.begin <= mine.begin && mine.end <= h.needed.end) {
    own_at_ = mine.begin - h.needed.begin;
    parts_ = conv_->parts(h.extended_planes(), own_at_, mine.size());
  }
  conv_->on_input_gradient([this](const Tensor& dx) { returning_ = exchange_.start_return_gradient(dx); });
}

Tensor DomainParallel::forward(const Tensor& x) {
  const ProfileScope profile(profile_kind_, name(), ProfilePass::forward);  // the halo exchange too
  parallel::CommLayerScope scope(name());
  exchange_.set_layer(name());
  if (!overlaps_forward()) return layer_->forward(exchange_.extend(x, padding_value_));  // halo in, own planes out
  parallel::HaloInFlight started = exchange_.start_extend(x, padding_value_);
  return conv_->forward_in_parts(x, own_at_, exchange_.halo().extended_planes(),
                                 [&] { return exchange_.finish_extend(started); });
}

Tensor DomainParallel::do_backward(const Tensor& dy) {
  const ProfileScope profile(profile_kind_, name(), ProfilePass::backward);
  parallel::CommLayerScope scope(name());
  returning_.reset();
  Tensor d_extended = layer_->backward(dy);  // weight gradients: this rank's part only
  if (!d_extended.defined()) return d_extended;
  if (!returning_) return exchange_.return_gradient(d_extended);  // halo gradients back to their owners
  Tensor dx = exchange_.finish_return_gradient(*returning_);      // ... started before the weight gradient
  returning_.reset();
  return dx;
}

Shape DomainParallel::describe(const Shape& in, plan::RankStep& step) const {
  const parallel::DepthHalo& h = exchange_.halo();
  require_layer(
      in.rank() == 5 && in[2] == h.input.owned().size(), name(),
      "cannot run on an input " + in.str() + " (a slab of " + std::to_string(h.input.owned().size()) + " planes)");
  const int64_t plane = in[0] * in[1] * in[3] * in[4];  // elements of one input plane of the shard
  int64_t sent = 0, received = 0, on_wire = 0;          // planes; bytes of the copies, one per transfer
  for (const parallel::PlaneTransfer& t : h.sends) sent += t.planes.size();
  for (const parallel::PlaneTransfer& t : h.receives) received += t.planes.size();
  for (const auto* transfers : {&h.sends, &h.receives})
    for (const parallel::PlaneTransfer& t : *transfers) on_wire += activation_bytes({t.planes.size(), plane});
  // The extended slab is a new tensor (also with no neighbour); the planes on the wire are
  // copies, both ways; backward returns dx of the own planes.
  plan::LayerMemory m;
  m.layer = name() + " (halo)";
  m.output = activation_bytes(in.with(2, h.extended_planes()));
  m.forward_scratch = m.backward_scratch = on_wire;
  m.wraps_next = true;
  const size_t halo = step.memory.size();
  step.memory.push_back(m);
  const Shape out = layer_->describe(in.with(2, h.extended_planes()), step);
  if (step.layers.back().input_gradient) step.memory[halo].input_grad = activation_bytes(in);
  if (returning_overlaps()) {  // dx and the planes on the wire, beside the weight gradient's pass
    plan::LayerMemory& conv = step.memory.back();
    conv.backward_scratch += on_wire + activation_bytes(in);
  }
  if (overlaps_forward()) {
    // The inner planes' output beside the wire and the input copy they may need, then beside
    // the whole output; then each edge's input and output in turn.
    const Conv3d::Piece& inner = parts_.inner;
    const int64_t y = activation_bytes(out), y_inner = activation_bytes(out.with(2, inner.out_count));
    const int64_t inner_copy = inner.in_count == in[2] ? 0 : activation_bytes(in.with(2, inner.in_count));
    int64_t edges = 0;
    for (const Conv3d::Piece& edge : parts_.edges)
      if (edge.out_count > 0)
        edges = std::max(edges,
                         activation_bytes(in.with(2, edge.in_count)) + activation_bytes(out.with(2, edge.out_count)));
    plan::LayerMemory& conv = step.memory.back();
    conv.forward_scratch += std::max({y_inner, on_wire + y_inner + inner_copy - y, edges});
    // Each part is a convolution of its own shape: its blocked copies in the workspace too.
    if (conv_->weight().value.device().is_cpu())
      for (const Conv3d::Piece& piece : {parts_.inner, parts_.edges[0], parts_.edges[1]}) {
        if (piece.out_count == 0) continue;
        const kernels::Workspace w = conv_->cpu_memory(in.with(2, piece.in_count)).workspace;
        for (size_t s = 0; s < w.size(); ++s) conv.workspace[s] = std::max(conv.workspace[s], w[s]);
      }
  }
  const int procs = exchange_.row().size();
  step.calls.push_back(plan::make_call(name(), "row", "send_recv", sent * plane, procs, double(received * plane)));
  if (step.layers.back().input_gradient) {  // the halo's gradients back
    step.calls.push_back(plan::make_call(name(), "row", "send_recv", received * plane, procs, double(sent * plane)));
    step.calls.back().backward = true;
  }
  return out;
}

namespace {
// The halo window along depth; also checks PyTorch's rule for pooling (padding at most half
// the kernel) along depth, which the wrapped layer (depth padding 0) no longer sees.
parallel::DepthWindow pool_window(const std::string& name, const Triple3& kernel, const Triple3& stride,
                                  const Triple3& padding) {
  require_layer(
      padding[0] >= 0 && 2 * padding[0] <= kernel[0], name,
      "depth padding " + std::to_string(padding[0]) + " must be at most half the kernel " + std::to_string(kernel[0]));
  return {kernel[0], stride == Triple3{0, 0, 0} ? kernel[0] : stride[0], padding[0]};
}
// H and W pad as given; the extended slab's padding planes stand in for the depth padding.
Triple3 without_depth(const Triple3& padding) { return {0, padding[1], padding[2]}; }
}  // namespace

std::unique_ptr<DomainParallel> domain_conv3d(parallel::ProcessGrid& grid, int64_t in_channels, int64_t out_channels,
                                              Triple3 kernel, Triple3 stride, Triple3 padding, bool bias,
                                              int64_t global_in_depth, bool input_gradient, const std::string& name,
                                              parallel::HaloMode mode) {
  auto conv = std::make_unique<Conv3d>(in_channels, out_channels, kernel, stride, without_depth(padding), bias);
  conv->set_input_gradient(input_gradient);
  return std::make_unique<DomainParallel>(grid, std::move(conv),
                                          parallel::DepthWindow{kernel[0], stride[0], padding[0]}, global_in_depth,
                                          0.0f, name, mode);
}

std::unique_ptr<DomainParallel> domain_max_pool3d(parallel::ProcessGrid& grid, Triple3 kernel, Triple3 stride,
                                                  Triple3 padding, int64_t global_in_depth, const std::string& name) {
  const parallel::DepthWindow w = pool_window(name, kernel, stride, padding);
  return std::make_unique<DomainParallel>(grid, std::make_unique<MaxPool3d>(kernel, stride, without_depth(padding)), w,
                                          global_in_depth, -std::numeric_limits<float>::infinity(), name);
}

std::unique_ptr<DomainParallel> domain_avg_pool3d(parallel::ProcessGrid& grid, Triple3 kernel, Triple3 stride,
                                                  Triple3 padding, int64_t global_in_depth, const std::string& name) {
  const parallel::DepthWindow w = pool_window(name, kernel, stride, padding);
  return std::make_unique<DomainParallel>(grid, std::make_unique<AvgPool3d>(kernel, stride, without_depth(padding)), w,
                                          global_in_depth, 0.0f, name);
}

}  // namespace gridnn::nn
