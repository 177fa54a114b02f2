// Argument checks and backend dispatch of the 3D pooling ops (kernels/pool3d.h).
#include "kernels/pool3d.h"

#include <string>

#include "kernels/checks.h"
#include "kernels/elementwise.h"
#include "kernels/reduce.h"

namespace gridnn::ops {
using namespace gridnn::kernels;

namespace {

std::string triple(const std::array<int64_t, 3>& v) {
  return "(" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + ", " + std::to_string(v[2]) + ")";
}

std::string describe(const Shape& x, const Pool3dParams& p) {
  return "input " + x.str() + ", kernel " + triple(p.kernel) + ", stride " + triple(p.stride) + ", padding " +
         triple(p.padding);
}

}  // namespace

Pool3dGeometry pool3d_geometry(const char* who, const Shape& x, const Pool3dParams& p) {
  GRIDNN_REQUIRE(x.rank() == 5, who, ": expects a [N, C, D, H, W] input, got ", x.str(), " (rank ", x.rank(),
                 "); reshape it to rank 5");
  std::array<int64_t, 3> out{};
  for (int i = 0; i < 3; ++i) {
    GRIDNN_REQUIRE(p.kernel[size_t(i)] >= 1 && p.stride[size_t(i)] >= 1 && p.padding[size_t(i)] >= 0, who,
                   ": kernel and stride must be >= 1 and padding >= 0; got ", describe(x, p));
    GRIDNN_REQUIRE(p.padding[size_t(i)] <= p.kernel[size_t(i)] / 2, who,
                   ": padding should be at most half of the kernel size (as in PyTorch); got ", describe(x, p),
                   "; lower the padding or enlarge the kernel");
    const int64_t padded = x[2 + i] + 2 * p.padding[size_t(i)];
    GRIDNN_REQUIRE(padded >= p.kernel[size_t(i)], who, ": the kernel is larger than the padded input along ", "DHW"[i],
                   " (", p.kernel[size_t(i)], " > ", padded, "); got ", describe(x, p),
                   "; use a smaller kernel, more padding or a larger input");
    out[size_t(i)] = (padded - p.kernel[size_t(i)]) / p.stride[size_t(i)] + 1;
  }
  return Pool3dGeometry{x[0] * x[1], x[2],         x[3],         x[4],        out[0],      out[1],
                        out[2],      p.kernel[0],  p.kernel[1],  p.kernel[2], p.stride[0], p.stride[1],
                        p.stride[2], p.padding[0], p.padding[1], p.padding[2]};
}

Shape pool3d_output_shape(const char* who, const Shape& x, const Pool3dParams& p) {
  Pool3dGeometry g = pool3d_geometry(who, x, p);
  return Shape{x[0], x[1], g.od, g.oh, g.ow};
}

namespace {

// Checks shared by the pooling ops: x floating, out of the expected shape, same device
// and dtype, no shared memory.
void expect_pool_output(const char* op, const Tensor& in, const Tensor& out, const Shape& expected) {
  expect_defined(op, "input", in);
  expect_defined(op, "output", out);
  expect_floating(op, in);
  expect_same_device(op, in, out);
  expect_same_dtype(op, in, out);
  expect_disjoint(op, in, out);
  GRIDNN_REQUIRE(out.shape() == expected, op, ": output ", out.str(), " should have shape ", expected.str(),
                 " for input ", in.str());
}

// The geometry of pooling `volume` ([N, C, D, H, W]: x forward, dx backward), after checking
// `pooled` (y forward, dy backward) against it: computed once per op.
Pool3dGeometry checked_geometry(const char* op, const Tensor& volume, const Tensor& pooled, const Pool3dParams& p) {
  expect_defined(op, "input", volume);
  Pool3dGeometry g = pool3d_geometry(op, volume.shape(), p);
  expect_pool_output(op, volume, pooled, Shape{volume.size(0), volume.size(1), g.od, g.oh, g.ow});
  return g;
}

void expect_argmax(const char* op, const Tensor& argmax, const Tensor& like) {
  expect_defined(op, "argmax", argmax);
  expect_same_device(op, argmax, like);
  GRIDNN_REQUIRE(argmax.dtype() == DType::i64 && argmax.shape() == like.shape(), op, ": argmax ", argmax.str(),
                 " should be i64 of shape ", like.shape().str());
}

}  // namespace

void max_pool3d_forward(const Tensor& x, const Pool3dParams& p, Tensor& y, Tensor& argmax) {
  Pool3dGeometry g = checked_geometry("max_pool3d_forward", x, y, p);
  expect_argmax("max_pool3d_forward", argmax, y);
  GRIDNN_BACKEND_CALL(x.device(), max_pool3d_forward, x, g, y, argmax);
}

void max_pool3d_backward(const Tensor& dy, const Tensor& argmax, const Pool3dParams& p, Tensor& dx) {
  Pool3dGeometry g = checked_geometry("max_pool3d_backward", dx, dy, p);
  expect_argmax("max_pool3d_backward", argmax, dy);
  GRIDNN_BACKEND_CALL(dy.device(), max_pool3d_backward, dy, argmax, g, dx);
}

void avg_pool3d_forward(const Tensor& x, const Pool3dParams& p, Tensor& y) {
  Pool3dGeometry g = checked_geometry("avg_pool3d_forward", x, y, p);
  GRIDNN_BACKEND_CALL(x.device(), avg_pool3d_forward, x, g, y);
}

void avg_pool3d_backward(const Tensor& dy, const Pool3dParams& p, Tensor& dx) {
  Pool3dGeometry g = checked_geometry("avg_pool3d_backward", dx, dy, p);
  GRIDNN_BACKEND_CALL(dy.device(), avg_pool3d_backward, dy, g, dx);
}

void global_avg_pool3d_forward(const Tensor& x, Tensor& y) {
  expect_defined("global_avg_pool3d_forward", "x", x);
  GRIDNN_REQUIRE(x.rank() == 5, "global_avg_pool3d_forward: expects a [N, C, D, H, W] input, got ", x.str());
  const int64_t volume = x.size(2) * x.size(3) * x.size(4);
  GRIDNN_REQUIRE(volume > 0, "global_avg_pool3d_forward: empty volume in ", x.str());
  expect_pool_output("global_avg_pool3d_forward", x, y, Shape{x.size(0), x.size(1)});
  Tensor flat = y.reshape({x.size(0) * x.size(1)});
  reduce(ReduceOp::sum, x.reshape({x.size(0) * x.size(1), volume}), 1, flat);
  scale(flat, float(1.0 / double(volume)));
}

void global_avg_pool3d_backward(const Tensor& dy, Tensor& dx) {
  expect_defined("global_avg_pool3d_backward", "dx", dx);
  GRIDNN_REQUIRE(dx.rank() == 5, "global_avg_pool3d_backward: dx should be [N, C, D, H, W], got ", dx.str());
  const int64_t volume = dx.size(2) * dx.size(3) * dx.size(4);
  expect_pool_output("global_avg_pool3d_backward", dx, dy, Shape{dx.size(0), dx.size(1)});
  GRIDNN_BACKEND_CALL(dy.device(), global_avg_pool3d_backward, dy, volume, dx);
}

}  // namespace gridnn::ops
