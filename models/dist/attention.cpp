// nn::DistSelfAttention3d: SelfAttention3d's batched GEMMs and softmax on this rank's
// queries, with keys and values all-gathered over the row (see the header).
#include "models/dist/attention.h"

#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/reduce.h"
#include "kernels/softmax.h"

namespace gridnn::nn {
namespace {

// The key or value convolution's parameters, its output channels and where its block
// starts in a rank's [K^T | V^T] buffer.
struct Projection {
  Parameter* w;
  Parameter* bias;
  int64_t out, at;
};

// Elements [at, at + n) of a tensor, as a flat view.
Tensor flat_slice(const Tensor& t, int64_t at, int64_t n) {
  return t.reshape({t.numel()}).narrow(at, n);
}

// The Parameter called `name` of `module` ("weight", "bias").
Parameter* parameter_of(Module& module, const std::string& name) {
  for (auto& [n, p] : module.named_parameters())
    if (n == name) return p;
  GRIDNN_REQUIRE(false, "DistSelfAttention3d: no parameter ", name);
  return nullptr;
}

}  // namespace

DistSelfAttention3d::DistSelfAttention3d(parallel::Communicator& row, int64_t channels,
                                         int64_t global_depth, Device device)
    : row_(row), channels_(channels), global_depth_(global_depth) {
  require_layer(
      channels >= 8 && channels % 8 == 0, name(),
      "channels must be a positive multiple of 8 (queries and keys have channels / 8), got " +
          std::to_string(channels));
  require_layer(global_depth >= row.size(), name(),
                "depth " + std::to_string(global_depth) + " split over " +
                    std::to_string(row.size()) +
                    " row ranks leaves a rank without planes; the largest usable Pr is " +
                    std::to_string(global_depth));
  planes_ = parallel::balanced_range(global_depth, row.size(), row.rank());
  // The same registration as SelfAttention3d: same names, order and initialization. The
  // key and value convolutions hold the parameters; this layer runs them transposed.
  gamma_ = &register_parameter("gamma", Tensor::zeros({1}, DType::f32, device));
  query_ =
      &register_module("query", std::make_unique<PointwiseConv3d>(channels, channels / 8, device));
  auto& key =
      register_module("key", std::make_unique<PointwiseConv3d>(channels, channels / 8, device));
  auto& value =
      register_module("value", std::make_unique<PointwiseConv3d>(channels, channels, device));
  key_weight_ = parameter_of(key, "weight");
  key_bias_ = parameter_of(key, "bias");
  value_weight_ = parameter_of(value, "weight");
  value_bias_ = parameter_of(value, "bias");
}

std::string DistSelfAttention3d::name() const {
  return "DistSelfAttention3d(" + std::to_string(channels_) + ")";
}

void DistSelfAttention3d::reset_parameters(uint64_t, const std::string&) {
  ops::fill(gamma_->value, 0.0);
}

void DistSelfAttention3d::plan_layout(int64_t b, int64_t hw) {
  const int p = row_.size();
  const int64_t kv = channels_ / 8 + channels_;
  batch_ = b;
  positions_ = global_depth_ * hw;
  counts_.assign(size_t(p), 0);
  first_.assign(size_t(p), 0);
  elements_.assign(size_t(p), 0);
  base_.assign(size_t(p), 0);
  for (int i = 0; i < p; ++i) {
    const parallel::Range planes = parallel::balanced_range(global_depth_, p, i);
    counts_[size_t(i)] = planes.size() * hw;
    first_[size_t(i)] = planes.begin * hw;
    elements_[size_t(i)] = b * counts_[size_t(i)] * kv;
    if (i > 0) base_[size_t(i)] = base_[size_t(i - 1)] + elements_[size_t(i - 1)];
  }
}

// K^T = X^T Wk^T + 1 bk^T [B, N_r, C/8] and V^T likewise [B, N_r, C], written into this
// rank's send buffer [K^T | V^T].
void DistSelfAttention3d::project_keys_values(const Tensor& x, Tensor& send) {
  const int64_t b = x.size(0), c = channels_, c8 = channels_ / 8, nr = counts_[size_t(row_.rank())];
  const Tensor xm = x.reshape({b, c, nr});
  Tensor ones = Tensor::empty({b * nr, 1}, x.dtype(), x.device());
  ops::fill(ones, 1.0);
  for (const Projection& p : {Projection{key_weight_, key_bias_, c8, 0},
                              Projection{value_weight_, value_bias_, c, b * nr * c8}}) {
    Tensor t = flat_slice(send, p.at, b * nr * p.out).reshape({b, nr, p.out});
    ops::gemm_batched(xm, p.w->value.reshape({p.out, c}), t,
                      ops::gemm_options(true, true, 0.0f, math_mode()));
    Tensor t2 = t.reshape({b * nr, p.out});
    ops::gemm(ones, p.bias->value.reshape({1, p.out}), t2,
              ops::gemm_options(false, false, 1.0f));  // + 1 b^T
  }
}

// Given this rank's [dK^T | dV^T] (reduce-scattered), adds the projections' input gradient
// into dx and their parameter gradients into the key and value convolutions.
void DistSelfAttention3d::backward_keys_values(const Tensor& recv, Tensor& dx) {
  const int64_t b = batch_, c = channels_, c8 = channels_ / 8, nr = counts_[size_t(row_.rank())];
  Tensor dxm = dx.reshape({b, c, nr});
  const Tensor xm = x_.reshape({b, c, nr});
  for (const Projection& p : {Projection{key_weight_, key_bias_, c8, 0},
                              Projection{value_weight_, value_bias_, c, b * nr * c8}}) {
    const Tensor dt = flat_slice(recv, p.at, b * nr * p.out).reshape({b, nr, p.out});
    const Tensor w = p.w->value.reshape({p.out, c});
    ops::gemm_batched(w, dt, dxm, ops::gemm_options(true, true, 1.0f, math_mode()));  // dx_b += W^T dT_b^T
    Tensor dw = p.w->grad.reshape({p.out, c});
    for (int64_t s = 0; s < b; ++s)  // dW += dT_b^T x_b^T, sample by sample (a fixed order)
      ops::gemm(dt.narrow(s, 1).reshape({nr, p.out}), xm.narrow(s, 1).reshape({c, nr}), dw,
                ops::gemm_options(true, true, 1.0f, math_mode()));
    ops::axpy(1.0f, ops::sum(ops::sum(dt, 1), 0),
              p.bias->grad);  // db += sum over positions, samples
  }
}

void DistSelfAttention3d::unpack(const Tensor& gathered, Tensor& kt, Tensor& vt) const {
  const int64_t c8 = channels_ / 8, c = channels_, n = positions_;
  for (size_t i = 0; i < counts_.size(); ++i) {
    const int64_t ni = counts_[i];
    for (int64_t s = 0; s < batch_; ++s) {
      Tensor k_dst = flat_slice(kt, (s * n + first_[i]) * c8, ni * c8);
      ops::copy(flat_slice(gathered, base_[i] + s * ni * c8, ni * c8), k_dst);
      Tensor v_dst = flat_slice(vt, (s * n + first_[i]) * c, ni * c);
      ops::copy(flat_slice(gathered, base_[i] + batch_ * ni * c8 + s * ni * c, ni * c), v_dst);
    }
  }
}

void DistSelfAttention3d::pack(const Tensor& dkt, const Tensor& dvt, Tensor& gathered) const {
  const int64_t c8 = channels_ / 8, c = channels_, n = positions_;
  for (size_t i = 0; i < counts_.size(); ++i) {
    const int64_t ni = counts_[i];
    for (int64_t s = 0; s < batch_; ++s) {
      Tensor k_dst = flat_slice(gathered, base_[i] + s * ni * c8, ni * c8);
      ops::copy(flat_slice(dkt, (s * n + first_[i]) * c8, ni * c8), k_dst);
      Tensor v_dst = flat_slice(gathered, base_[i] + batch_ * ni * c8 + s * ni * c, ni * c);
      ops::copy(flat_slice(dvt, (s * n + first_[i]) * c, ni * c), v_dst);
    }
  }
}

Tensor DistSelfAttention3d::forward(const Tensor& x) {
  require_layer(
      x.defined() && x.rank() == 5 && x.size(1) == channels_ && x.size(2) == planes_.size(), name(),
      "expects this rank's slab [B, " + std::to_string(channels_) + ", " +
          std::to_string(planes_.size()) + " (planes " + std::to_string(planes_.begin) + ".." +
          std::to_string(planes_.end - 1) + " of " + std::to_string(global_depth_) +
          "), H, W], got " + (x.defined() ? x.str() : std::string("undefined")));
  require_layer(x.device() == gamma_->value.device(), name(),
                "input " + x.str() + " is not on the parameters' device " + gamma_->value.str());
  parallel::CommLayerScope scope(comm_label_);
  const int64_t b = x.size(0), c = channels_, c8 = channels_ / 8, hw = x.size(3) * x.size(4);
  const ops::MathMode m = math_mode();
  plan_layout(b, hw);
  const int64_t n = positions_, nr = counts_[size_t(row_.rank())];
  input_shape_ = x.shape();
  x_ = x;
  q_ = query_->forward(x).reshape({b, c8, nr});

  // Keys and values of all N positions: all_gatherv over the row (backward: reduce_scatterv).
  Tensor send = Tensor::empty({elements_[size_t(row_.rank())]}, x.dtype(), x.device());
  project_keys_values(x, send);
  Tensor gathered = Tensor::empty({base_.back() + elements_.back()}, x.dtype(), x.device());
  row_.all_gatherv(send, gathered, elements_);
  kt_ = Tensor::empty({b, n, c8}, x.dtype(), x.device());
  vt_ = Tensor::empty({b, n, c}, x.dtype(), x.device());
  unpack(gathered, kt_, vt_);

  attention_ = Tensor::empty({b, nr, n}, x.dtype(), x.device());
  o_ = Tensor::empty({b, c, nr}, x.dtype(), x.device());
  Tensor y = x.clone();
  ops::gemm_batched(q_, kt_, attention_, ops::gemm_options(true, true, 0.0f, m));  // S = Q^T K (own rows)
  ops::softmax_forward(attention_, attention_);  // A = softmax over all N keys
  ops::gemm_batched(vt_, attention_, o_, ops::gemm_options(true, true, 0.0f, m));  // O = V A^T
  scale_by_tensor(gamma_->value, o_, y, 1.0f);                             // y = x + gamma O
  return y;
}

Tensor DistSelfAttention3d::backward(const Tensor& dy) {
  require_layer(attention_.defined(), name(), "backward called before forward");
  require_layer(dy.defined() && dy.shape() == input_shape_, name(),
                "dy " + (dy.defined() ? dy.str() : std::string("undefined")) +
                    " does not match the output " + input_shape_.str() + " of the last forward");
  parallel::CommLayerScope scope(comm_label_);
  const int64_t b = batch_, c = channels_, c8 = channels_ / 8, n = positions_;
  const int64_t nr = counts_[size_t(row_.rank())];
  const ops::MathMode m = math_mode();
  const Tensor dym = dy.reshape({b, c, nr});

  // y = gamma O + x: dgamma += sum(dy * O) (this rank's share), dO = gamma dy.
  Tensor prod = Tensor::empty(dym.shape(), dy.dtype(), dy.device());
  ops::mul(dym, o_, prod);
  ops::axpy(1.0f, ops::sum_all(prod), gamma_->grad);
  Tensor d_o = Tensor::empty(dym.shape(), dy.dtype(), dy.device());
  scale_by_tensor(gamma_->value, dym, d_o, 0.0f);

  // O = V A^T: dV^T = A^T dO^T (all N positions, from own queries), dA = dO^T V.
  Tensor dvt = Tensor::empty({b, n, c}, dy.dtype(), dy.device());
  ops::gemm_batched(attention_, d_o, dvt, ops::gemm_options(true, true, 0.0f, m));
  Tensor ds = Tensor::empty({b, nr, n}, dy.dtype(), dy.device());
  ops::gemm_batched(d_o, vt_, ds, ops::gemm_options(true, true, 0.0f, m));
  ops::softmax_backward(attention_, ds, ds);  // dS = A * (dA - rowsum(dA * A)), in place
  // S = Q^T K: dQ = K dS^T (local), dK^T = dS^T Q^T (all N positions).
  Tensor dq = Tensor::empty({b, c8, nr}, dy.dtype(), dy.device());
  ops::gemm_batched(kt_, ds, dq, ops::gemm_options(true, true, 0.0f, m));
  Tensor dkt = Tensor::empty({b, n, c8}, dy.dtype(), dy.device());
  ops::gemm_batched(ds, q_, dkt, ops::gemm_options(true, true, 0.0f, m));

  // The forward's all_gatherv, reversed: dK, dV summed over the row, each rank keeping its
  // own positions.
  Tensor contributions = Tensor::empty({base_.back() + elements_.back()}, dy.dtype(), dy.device());
  pack(dkt, dvt, contributions);
  Tensor own = Tensor::empty({elements_[size_t(row_.rank())]}, dy.dtype(), dy.device());
  row_.reduce_scatterv(contributions, own, elements_);

  // dx = dy + Wq^T dQ + Wk^T dK + Wv^T dV (and the convolutions' parameter gradients).
  Tensor dx = Tensor::empty(input_shape_, dy.dtype(), dy.device());
  const Shape& s = input_shape_;
  ops::add(dy, query_->backward(dq.reshape({b, c8, s[2], s[3], s[4]})), dx);
  backward_keys_values(own, dx);
  return dx;
}

}  // namespace gridnn::nn
