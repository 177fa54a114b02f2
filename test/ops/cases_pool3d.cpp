// kernels/pool3d.h: max pooling (y and argmax), average pooling and global average pooling,
// forward and backward, on odd sizes, strides 1 and 2, mixed kernels and strides, padding
// at the edges, overlapping windows, a kernel as large as the padded input and a volume
// with more outputs than the CUDA grid has threads, even rows; f16 and bf16 on the former
// GPU test's geometries and the even rows; and the layers MaxPool3d, AvgPool3d and
// GlobalAvgPool3d. References:
// test/ops/reference_conv_pool_norm.h, at the tolerances of the layers' test. The bodies
// (kernels/pool3d_bodies.h) only compare, add in a fixed order and divide, the same code on
// both backends (no FMA contraction): the backends agree bit for bit.
#include "kernels/pool3d.h"
#include "models/layers/pool3d.h"
#include "test/ops/harness.h"
#include "test/ops/layer_case.h"
#include "test/ops/reference_conv_pool_norm.h"

namespace gridnn::test {
namespace {

using nn::Triple3;

struct PoolGeometry {
  const char* name;
  Shape x;
  ops::Pool3dParams p;
  bool sixteen_bit;  // also in f16 and bf16 (the former GPU test's geometries)
};

const std::vector<PoolGeometry>& geometries() {
  static const std::vector<PoolGeometry> all = {
      {"k3_s2_p1_batch1", {1, 1, 5, 5, 5}, {{3, 3, 3}, {2, 2, 2}, {1, 1, 1}}, false},
      {"k3_s2_p1_odd", {2, 3, 7, 6, 5}, {{3, 3, 3}, {2, 2, 2}, {1, 1, 1}}, true},
      {"mixed", {2, 2, 6, 5, 7}, {{3, 2, 3}, {2, 1, 3}, {1, 0, 1}}, false},
      {"mixed", {1, 2, 6, 5, 7}, {{3, 2, 3}, {2, 1, 3}, {1, 0, 1}}, true},
      {"k2_s2_default", {3, 2, 4, 5, 3}, {{2, 2, 2}, {2, 2, 2}, {0, 0, 0}}, false},
      {"k1_s2", {1, 2, 5, 4, 3}, {{1, 1, 1}, {2, 2, 2}, {0, 0, 0}}, false},
      {"overlapping_s1", {2, 1, 4, 4, 4}, {{3, 3, 3}, {1, 1, 1}, {1, 1, 1}}, false},
      {"kernel_equals_padded_input", {1, 2, 3, 2, 3}, {{5, 4, 5}, {1, 1, 1}, {1, 1, 1}}, false},
      {"more_outputs_than_grid_threads", {2, 8, 32, 33, 31}, {{3, 3, 3}, {2, 2, 2}, {1, 1, 1}}, true},
      // Even rows (the CPU's max pooling runs its w stage over whole slices) in 16 bits too.
      {"k3_s2_p1_even_rows", {2, 2, 5, 6, 8}, {{3, 3, 3}, {2, 2, 2}, {1, 1, 1}}, true},
  };
  return all;
}

// Central differences only where a loss costs little.
bool grad_checked(const Shape& x) { return x.numel() <= 4096; }

std::vector<DType> dtypes_of(bool sixteen_bit) {
  if (sixteen_bit) return {DType::f32, DType::f16, DType::bf16};
  return {DType::f32};
}

Tensor like(const Tensor& t, const Shape& shape) { return Tensor::empty(shape, t.dtype(), t.device()); }

std::string params_name(const PoolGeometry& geo, DType dt) {
  return std::string(geo.name) + " " + shape_name(geo.x) + " " + dtype_name(dt);
}

// The forward's input: distinct values where the max-pool gradient is checked (no argmax
// may flip within the perturbation); uniform in [-2, 2) otherwise (16-bit values tie often:
// the first maximum in window order wins).
Tensor pool_input(const std::string& key, const Shape& x, DType dt, bool max) {
  if (max && dt == DType::f32 && grad_checked(x)) return distinct_values(x, 21);
  return case_input(key, 0, x, -2.0f, 2.0f, dt);
}

// Inputs x; outputs y and argmax (i64). Its backward: max_pool3d_backward with that argmax.
OpCase max_forward_case(const PoolGeometry& geo, DType dt) {
  OpCase c;
  c.op = "max_pool3d_forward";
  c.params = params_name(geo, dt);
  const std::string key = c.op + c.params;
  const ops::Pool3dParams p = geo.p;
  c.make_inputs = [=] { return Tensors{pool_input(key, geo.x, dt, true)}; };
  c.run = [p](const Tensors& in) {
    const Shape ys = ops::pool3d_output_shape("test", in[0].shape(), p);
    Tensor y = like(in[0], ys), argmax = Tensor::empty(ys, DType::i64, in[0].device());
    ops::max_pool3d_forward(in[0], p, y, argmax);
    return Tensors{y, argmax};
  };
  c.reference = [p](const Tensors& in) {
    const PoolReference r = reference_pool3d(true, in[0], p);
    return std::vector<Doubles>{r.y, Doubles(r.argmax.begin(), r.argmax.end())};
  };
  c.ref_tol = {0, 0};
  c.bitwise = true;
  if (dt == DType::f32 && grad_checked(geo.x)) {
    c.backward = [p](const Tensors& in, const Tensor& dy) {
      Tensor y = like(in[0], dy.shape()), argmax = Tensor::empty(dy.shape(), DType::i64, dy.device());
      ops::max_pool3d_forward(in[0], p, y, argmax);
      Tensor dx = like(in[0], in[0].shape());
      ops::max_pool3d_backward(dy, argmax, p, dx);
      return Tensors{dx};
    };
    c.grad_inputs = {0};
  }
  return c;
}

// Inputs dy and the argmax (the reference's, of a uniform x); output dx (overwritten).
OpCase max_backward_case(const PoolGeometry& geo, DType dt) {
  OpCase c;
  c.op = "max_pool3d_backward";
  c.params = params_name(geo, dt);
  const std::string key = c.op + c.params;
  const ops::Pool3dParams p = geo.p;
  const Shape xs = geo.x;
  c.make_inputs = [=] {
    const PoolReference r = reference_pool3d(true, case_input(key, 0, xs, -2.0f, 2.0f, dt), p);
    return Tensors{case_input(key, 1, r.y_shape, -1.0f, 1.0f, dt), Tensor::from_vector(r.argmax, r.y_shape)};
  };
  c.run = [=](const Tensors& in) {
    Tensor dx = like(in[0], xs);
    ops::max_pool3d_backward(in[0], in[1], p, dx);
    return Tensors{dx};
  };
  c.reference = [=](const Tensors& in) {
    PoolReference fwd;
    fwd.y_shape = in[0].shape();
    fwd.argmax = in[1].to_vector<int64_t>();
    return std::vector<Doubles>{reference_pool3d_backward(true, xs, fwd, in[0], p)};
  };
  c.ref_tol = stored_tolerance(dt, {1e-6, 1e-6});
  c.bitwise = true;
  return c;
}

// Inputs x; output y. Its backward: avg_pool3d_backward.
OpCase avg_forward_case(const PoolGeometry& geo, DType dt) {
  OpCase c;
  c.op = "avg_pool3d_forward";
  c.params = params_name(geo, dt);
  const std::string key = c.op + c.params;
  const ops::Pool3dParams p = geo.p;
  c.make_inputs = [=] { return Tensors{pool_input(key, geo.x, dt, false)}; };
  c.run = [p](const Tensors& in) {
    Tensor y = like(in[0], ops::pool3d_output_shape("test", in[0].shape(), p));
    ops::avg_pool3d_forward(in[0], p, y);
    return Tensors{y};
  };
  c.reference = [p](const Tensors& in) { return std::vector<Doubles>{reference_pool3d(false, in[0], p).y}; };
  c.ref_tol = stored_tolerance(dt, {1e-6, 1e-5});
  c.bitwise = true;
  if (dt == DType::f32 && grad_checked(geo.x)) {
    c.backward = [p](const Tensors& in, const Tensor& dy) {
      Tensor dx = like(in[0], in[0].shape());
      ops::avg_pool3d_backward(dy, p, dx);
      return Tensors{dx};
    };
    c.grad_inputs = {0};
  }
  return c;
}

// Inputs dy; output dx (overwritten).
OpCase avg_backward_case(const PoolGeometry& geo, DType dt) {
  OpCase c;
  c.op = "avg_pool3d_backward";
  c.params = params_name(geo, dt);
  const std::string key = c.op + c.params;
  const ops::Pool3dParams p = geo.p;
  const Shape xs = geo.x, ys = ops::pool3d_output_shape("test", geo.x, geo.p);
  c.make_inputs = [=] { return Tensors{case_input(key, 0, ys, -1.0f, 1.0f, dt)}; };
  c.run = [=](const Tensors& in) {
    Tensor dx = like(in[0], xs);
    ops::avg_pool3d_backward(in[0], p, dx);
    return Tensors{dx};
  };
  c.reference = [=](const Tensors& in) {
    PoolReference fwd;
    fwd.y_shape = ys;
    return std::vector<Doubles>{reference_pool3d_backward(false, xs, fwd, in[0], p)};
  };
  c.ref_tol = stored_tolerance(dt, {1e-6, 1e-5});
  c.bitwise = true;
  return c;
}

// Inputs x [N, C, D, H, W]; output y [N, C]. Its backward: global_avg_pool3d_backward.
OpCase global_forward_case(const Shape& xs, DType dt) {
  OpCase c;
  c.op = "global_avg_pool3d_forward";
  c.params = shape_name(xs) + " " + dtype_name(dt);
  const std::string key = c.op + c.params;
  c.make_inputs = [=] { return Tensors{case_input(key, 0, xs, -2.0f, 2.0f, dt)}; };
  c.run = [](const Tensors& in) {
    Tensor y = like(in[0], {in[0].size(0), in[0].size(1)});
    ops::global_avg_pool3d_forward(in[0], y);
    return Tensors{y};
  };
  c.reference = [](const Tensors& in) { return std::vector<Doubles>{reference_global_avg_pool3d(in[0])}; };
  // 16-bit: the sum and the mean are each rounded to the format.
  c.ref_tol = stored_tolerance(dt, {1e-6, 1e-5});
  c.bitwise = true;
  if (dt == DType::f32 && grad_checked(xs)) {
    c.backward = [](const Tensors& in, const Tensor& dy) {
      Tensor dx = like(in[0], in[0].shape());
      ops::global_avg_pool3d_backward(dy, dx);
      return Tensors{dx};
    };
    c.grad_inputs = {0};
  }
  return c;
}

// Inputs dy [N, C]; output dx (x's shape).
OpCase global_backward_case(const Shape& xs, DType dt) {
  OpCase c;
  c.op = "global_avg_pool3d_backward";
  c.params = shape_name(xs) + " " + dtype_name(dt);
  const std::string key = c.op + c.params;
  c.make_inputs = [=] { return Tensors{case_input(key, 0, {xs[0], xs[1]}, -1.0f, 1.0f, dt)}; };
  c.run = [xs](const Tensors& in) {
    Tensor dx = like(in[0], xs);
    ops::global_avg_pool3d_backward(in[0], dx);
    return Tensors{dx};
  };
  c.reference = [xs](const Tensors& in) {
    return std::vector<Doubles>{reference_global_avg_pool3d_backward(in[0], xs)};
  };
  c.ref_tol = stored_tolerance(dt, {1e-7, 1e-6});
  c.bitwise = true;
  return c;
}

// MaxPool3d / AvgPool3d (x only: no parameters) with the pooling reference.
OpCase pool_layer(bool max, const std::string& what, const Shape& x, const Triple3& kernel,
                  const Triple3& stride = {0, 0, 0}, const Triple3& padding = {0, 0, 0}) {
  OpCase c = layer_case(
      max ? "MaxPool3d" : "AvgPool3d", what,
      [=]() -> std::unique_ptr<nn::Module> {
        if (max) return std::make_unique<nn::MaxPool3d>(kernel, stride, padding);
        return std::make_unique<nn::AvgPool3d>(kernel, stride, padding);
      },
      x);
  // stride {0, 0, 0}: the kernel, as the layers (and PyTorch) take it.
  const ops::Pool3dParams p{kernel, stride == Triple3{0, 0, 0} ? kernel : stride, padding};
  if (max) c.make_inputs = [x] { return Tensors{distinct_values(x, 21)}; };
  c.reference = [max, p](const Tensors& in) { return std::vector<Doubles>{reference_pool3d(max, in[0], p).y}; };
  c.ref_tol = max ? Tolerance{0, 0} : Tolerance{1e-6, 1e-5};
  c.bitwise = true;
  return c;
}

}  // namespace

void add_pool3d_cases(OpCases& cases) {
  for (const PoolGeometry& geo : geometries())
    for (DType dt : dtypes_of(geo.sixteen_bit)) {
      cases.push_back(max_forward_case(geo, dt));
      cases.push_back(max_backward_case(geo, dt));
      cases.push_back(avg_forward_case(geo, dt));
      cases.push_back(avg_backward_case(geo, dt));
    }

  // A single voxel, the layers' test's volumes, and the pooling geometries' inputs.
  for (const Shape& xs : {Shape{1, 1, 1, 1, 1}, Shape{1, 3, 5, 4, 3}, Shape{2, 4, 3, 7, 5}})
    for (bool forward : {true, false})
      cases.push_back(forward ? global_forward_case(xs, DType::f32) : global_backward_case(xs, DType::f32));
  for (const PoolGeometry& geo : geometries())
    if (geo.sixteen_bit)
      for (DType dt : dtypes_of(true)) {
        cases.push_back(global_forward_case(geo.x, dt));
        cases.push_back(global_backward_case(geo.x, dt));
      }

  // The layers on the layers' test's geometries (not the large one, nor the batch-1 copy of
  // "mixed").
  for (const PoolGeometry& geo : geometries()) {
    if (!grad_checked(geo.x) || (std::string(geo.name) == "mixed" && geo.x[0] == 1)) continue;
    for (bool max : {true, false})
      cases.push_back(pool_layer(max, geo.name, geo.x, geo.p.kernel, geo.p.stride, geo.p.padding));
  }
  // The defaults: stride = kernel; the stem's MaxPool3d(3, 2, 1) on a 7^3 volume.
  cases.push_back(pool_layer(false, "k2_default_stride", {1, 1, 5, 4, 3}, {2, 2, 2}));
  cases.push_back(pool_layer(true, "stem_k3_s2_p1", {1, 2, 7, 7, 7}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}));

  OpCase global =
      layer_case("GlobalAvgPool3d", "f32", [] { return std::make_unique<nn::GlobalAvgPool3d>(); }, {2, 3, 3, 4, 5});
  global.reference = [](const Tensors& in) { return std::vector<Doubles>{reference_global_avg_pool3d(in[0])}; };
  global.ref_tol = {1e-6, 1e-5};
  global.bitwise = true;
  cases.push_back(global);
}

}  // namespace gridnn::test
