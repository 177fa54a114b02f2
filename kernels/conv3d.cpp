// Argument checks and backend dispatch for kernels/conv3d.h.
#include "kernels/conv3d.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <sstream>

#include "kernels/checks.h"
#include "kernels/cpu/conv3d_one_channel.h"
#include "kernels/cpu/conv3d_onednn.h"

namespace gridnn::ops {
using namespace gridnn::kernels;

namespace {

std::string triple_str(const int64_t* v) {
  std::ostringstream os;
  os << "[" << v[0] << ", " << v[1] << ", " << v[2] << "]";
  return os.str();
}

void expect_f32(const char* op, const char* name, const Tensor& t) {
  GRIDNN_REQUIRE(t.dtype() == DType::f32, op, ": ", name, " ", t.str(),
                 " must be f32 (the only dtype conv3d supports for now); cast it first");
}

void expect_shape(const char* op, const char* name, const Tensor& t, const Shape& want, const Conv3dGeometry& g) {
  GRIDNN_REQUIRE(t.shape() == want, op, ": ", name, " ", t.str(), " should be ", want.str(), " for the geometry ",
                 str(g));
}

// Without cuDNN, a CUDA tensor is a clear error rather than a link failure.
#if GRIDNN_HAVE_CUDA && GRIDNN_HAVE_CUDNN
#define GRIDNN_CONV3D_CALL(DEVICE, FN, ...) GRIDNN_BACKEND_CALL(DEVICE, FN, __VA_ARGS__)
#else
[[noreturn]] void throw_no_cudnn(const char* op) {
  if (!built_with_cuda()) throw_no_cuda(op);
  throw Error(std::string(op) +
              ": conv3d on a CUDA device needs cuDNN, but gridnn was built without it; install "
              "cuDNN 9 and rebuild (set CUDNN_ROOT to the folder holding include/cudnn.h and "
              "lib/libcudnn.so*), or keep the tensors on the cpu");
}
#define GRIDNN_CONV3D_CALL(DEVICE, FN, ...) \
  ((DEVICE).runs_on_host() ? ::gridnn::kernels::cpu::FN(__VA_ARGS__) : throw_no_cudnn(#FN))
#endif

}  // namespace

Conv3dGeometry conv3d_geometry(const std::string& who, int64_t in_channels, int64_t out_channels, Triple kernel,
                               Triple stride, Triple padding, Triple in_size) {
  Conv3dGeometry g;
  g.in_channels = in_channels;
  g.out_channels = out_channels;
  for (int d = 0; d < 3; ++d) {
    g.kernel[d] = kernel[size_t(d)];
    g.stride[d] = stride[size_t(d)];
    g.padding[d] = padding[size_t(d)];
    g.in_size[d] = in_size[size_t(d)];
  }
  GRIDNN_REQUIRE(in_channels > 0 && out_channels > 0, who, ": channel counts must be positive, got ", in_channels,
                 " in and ", out_channels, " out");
  static const char* kDim[3] = {"depth", "height", "width"};
  for (int d = 0; d < 3; ++d) {
    GRIDNN_REQUIRE(g.kernel[d] > 0 && g.stride[d] > 0, who, ": kernel ", triple_str(g.kernel), " and stride ",
                   triple_str(g.stride), " must be positive in every dimension");
    GRIDNN_REQUIRE(g.padding[d] >= 0, who, ": padding ", triple_str(g.padding), " must not be negative");
    GRIDNN_REQUIRE(g.in_size[d] > 0, who, ": input size [D, H, W] = ", triple_str(g.in_size),
                   " must be positive in every dimension");
    const int64_t padded = g.in_size[d] + 2 * g.padding[d];
    GRIDNN_REQUIRE(g.kernel[d] <= padded, who, ": kernel ", triple_str(g.kernel),
                   " is larger than the padded input in ", kDim[d], " (input ", triple_str(g.in_size), ", padding ",
                   triple_str(g.padding), "); use a smaller kernel, more padding or a larger input");
    g.out_size[d] = (padded - g.kernel[d]) / g.stride[d] + 1;
  }
  return g;
}

bool ConvTaps::all(const Conv3dGeometry& g) const {
  for (int d = 0; d < 3; ++d)
    if (count[size_t(d)] != g.kernel[d]) return false;
  return true;
}

bool ConvTaps::none() const { return volume() == 0; }

ConvTaps conv3d_reaching_taps(const Conv3dGeometry& g) {
  ConvTaps t;
  t.geometry = g;
  for (int d = 0; d < 3; ++d) {
    // Tap k reads input index o * stride + k - padding for output o.
    int64_t first = g.kernel[d], last = -1;
    for (int64_t k = 0; k < g.kernel[d]; ++k)
      for (int64_t o = 0; o < g.out_size[d]; ++o) {
        const int64_t i = o * g.stride[d] + k - g.padding[d];
        if (i >= g.in_size[d]) break;
        if (i < 0) continue;
        first = std::min(first, k);
        last = std::max(last, k);
        break;
      }
    const size_t D = size_t(d);
    t.first[D] = last < first ? 0 : first;
    t.count[D] = last < first ? 0 : last - first + 1;
    t.geometry.kernel[d] = t.count[D];
    t.geometry.padding[d] = g.padding[d] - t.first[D];
  }
  return t;
}

ConvTaps conv3d_symmetric_taps(const Conv3dGeometry& g) {
  ConvTaps t = conv3d_reaching_taps(g);
  if (t.none() || t.all(g)) return t;
  for (int d = 0; d < 3; ++d) {
    const size_t D = size_t(d);
    const int64_t first = t.first[D], end = first + t.count[D], in = g.in_size[d], s = g.stride[d];
    // Taps [lo, lo + count) with lo <= first and lo + count >= end: padding p - lo on both
    // sides gives (in + 2 (p - lo) - count) / s + 1 outputs. The whole kernel (lo = 0,
    // count = k) gives g's, so the search ends.
    bool found = false;
    for (int64_t count = t.count[D]; count <= g.kernel[d] && !found; ++count)
      for (int64_t lo = first; lo >= 0 && lo + count >= end && !found; --lo) {
        const int64_t span = in + 2 * (g.padding[d] - lo) - count;
        if (lo + count > g.kernel[d] || span < 0 || span / s + 1 != g.out_size[d]) continue;
        t.first[D] = lo;
        t.count[D] = count;
        found = true;
      }
    t.geometry.kernel[d] = t.count[D];
    t.geometry.padding[d] = g.padding[d] - t.first[D];
  }
  return t;
}

kernels::StridedBox conv3d_taps_box(const Conv3dGeometry& g, const ConvTaps& t, bool gather) {
  const Conv3dGeometry& n = t.geometry;
  kernels::StridedBox b;
  b.rank = 4;
  const int64_t sizes[4] = {g.out_channels * g.in_channels, n.kernel[0], n.kernel[1], n.kernel[2]};
  const int64_t full[4] = {g.kernel_volume(), g.kernel[1] * g.kernel[2], g.kernel[2], 1};
  const int64_t narrow[4] = {n.kernel_volume(), n.kernel[1] * n.kernel[2], n.kernel[2], 1};
  for (int k = 0; k < 4; ++k) {
    b.size[k] = sizes[k];
    b.src_stride[k] = gather ? full[k] : narrow[k];
    b.dst_stride[k] = gather ? narrow[k] : full[k];
  }
  const int64_t offset = (t.first[0] * g.kernel[1] + t.first[1]) * g.kernel[2] + t.first[2];
  (gather ? b.src_offset : b.dst_offset) = offset;
  return b;
}

std::string str(const Conv3dGeometry& g) {
  std::ostringstream os;
  os << "C " << g.in_channels << " -> O " << g.out_channels << ", kernel " << triple_str(g.kernel) << ", stride "
     << triple_str(g.stride) << ", padding " << triple_str(g.padding) << ", input " << triple_str(g.in_size)
     << " -> output " << triple_str(g.out_size);
  return os.str();
}

Shape conv3d_output_shape(const Conv3dGeometry& g, int64_t n) {
  return Shape{n, g.out_channels, g.out_size[0], g.out_size[1], g.out_size[2]};
}

Shape conv3d_weight_shape(const Conv3dGeometry& g) {
  return Shape{g.out_channels, g.in_channels, g.kernel[0], g.kernel[1], g.kernel[2]};
}

namespace {
Shape input_shape(const Conv3dGeometry& g, int64_t n) {
  return Shape{n, g.in_channels, g.in_size[0], g.in_size[1], g.in_size[2]};
}
int64_t batch_of(const char* op, const char* name, const Tensor& t, const Conv3dGeometry& g) {
  expect_defined(op, name, t);
  GRIDNN_REQUIRE(t.rank() == 5, op, ": ", name, " ", t.str(), " must be 5-D [N, C, D, H, W] for the geometry ", str(g));
  return t.size(0);
}
// cuDNN takes int sizes; the CPU GEMM needs 32-bit matrix dimensions too.
void expect_fits_int(const char* op, const Tensor& t) {
  GRIDNN_REQUIRE(t.numel() <= std::numeric_limits<int>::max(), op, ": ", t.str(),
                 " has more than 2^31 - 1 elements; split the batch");
}
}  // namespace

namespace {
// One tensor of a conv3d op and the shape the geometry gives it.
struct Operand {
  const char* name;
  const Tensor& tensor;
  Shape shape;
};

// Every operand defined, of its shape, f32 and int-indexable; the inputs on the output's
// device and not sharing its memory.
void expect_operands(const char* op, const Conv3dGeometry& g, std::initializer_list<Operand> inputs,
                     const Operand& out) {
  auto expect_one = [&](const Operand& o) {
    expect_defined(op, o.name, o.tensor);
    expect_shape(op, o.name, o.tensor, o.shape, g);
    expect_f32(op, o.name, o.tensor);
    expect_fits_int(op, o.tensor);
  };
  expect_one(out);
  for (const Operand& in : inputs) {
    expect_one(in);
    expect_same_device(op, in.tensor, out.tensor);
    expect_disjoint(op, in.tensor, out.tensor);
  }
}
}  // namespace

void conv3d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dGeometry& g, Tensor& y,
                    MathMode math) {
  const char* op = "conv3d_forward";
  const int64_t n = batch_of(op, "x", x, g);
  expect_operands(op, g, {{"x", x, input_shape(g, n)}, {"w", w, conv3d_weight_shape(g)}},
                  {"y", y, conv3d_output_shape(g, n)});
  if (bias.defined()) expect_operands(op, g, {{"bias", bias, Shape{g.out_channels}}}, {"y", y, y.shape()});
  if (n == 0) return;
  GRIDNN_CONV3D_CALL(x.device(), conv3d_forward, x, w, bias, g, y, math);
}

void conv3d_backward_data(const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx, MathMode math) {
  const char* op = "conv3d_backward_data";
  const int64_t n = batch_of(op, "dy", dy, g);
  expect_operands(op, g, {{"dy", dy, conv3d_output_shape(g, n)}, {"w", w, conv3d_weight_shape(g)}},
                  {"dx", dx, input_shape(g, n)});
  if (n == 0) return;
  GRIDNN_CONV3D_CALL(dy.device(), conv3d_backward_data, dy, w, g, dx, math);
}

void conv3d_backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw, MathMode math) {
  const char* op = "conv3d_backward_filter";
  const int64_t n = batch_of(op, "x", x, g);
  expect_operands(op, g, {{"x", x, input_shape(g, n)}, {"dy", dy, conv3d_output_shape(g, n)}},
                  {"dw", dw, conv3d_weight_shape(g)});
  if (n == 0) return;
  GRIDNN_CONV3D_CALL(x.device(), conv3d_backward_filter, x, dy, g, dw, math);
}

void conv3d_backward(const Tensor& x, const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx,
                     Tensor& dw, MathMode math, const std::function<void()>& between) {
  const char* op = "conv3d_backward";
  const int64_t n = batch_of(op, "x", x, g);
  expect_operands(
      op, g, {{"x", x, input_shape(g, n)}, {"dy", dy, conv3d_output_shape(g, n)}, {"w", w, conv3d_weight_shape(g)}},
      {"dw", dw, conv3d_weight_shape(g)});
  if (dx.defined()) expect_operands(op, g, {{"dy", dy, conv3d_output_shape(g, n)}}, {"dx", dx, input_shape(g, n)});
  if (n == 0) {
    if (between) between();
    return;
  }
  if (x.device().is_cpu()) {
    kernels::cpu::conv3d_backward(x, dy, w, g, dx, dw, math, between);
    return;
  }
  if (dx.defined()) GRIDNN_CONV3D_CALL(dy.device(), conv3d_backward_data, dy, w, g, dx, math);
  if (between) between();
  GRIDNN_CONV3D_CALL(x.device(), conv3d_backward_filter, x, dy, g, dw, math);
}

void conv3d_backward_bias(const Tensor& dy, Tensor& db) {
  const char* op = "conv3d_backward_bias";
  expect_defined(op, "dy", dy);
  expect_defined(op, "db", db);
  GRIDNN_REQUIRE(dy.rank() == 5, op, ": dy ", dy.str(), " must be 5-D [N, O, Do, Ho, Wo]");
  GRIDNN_REQUIRE(db.shape() == Shape{dy.size(1)}, op, ": db ", db.str(), " should be [", dy.size(1), "] for dy ",
                 dy.str());
  expect_f32(op, "dy", dy);
  expect_f32(op, "db", db);
  expect_same_device(op, dy, db);
  expect_disjoint(op, dy, db);
  expect_fits_int(op, dy);
  if (dy.numel() == 0) return;
  GRIDNN_CONV3D_CALL(dy.device(), conv3d_backward_bias, dy, db);
}

int64_t cuda_conv_workspace_budget(const Conv3dGeometry& g, int64_t n) {
  return n * std::max(g.in_channels * g.in_volume(), g.out_channels * g.out_volume()) * int64_t(sizeof(float));
}

namespace {
CpuConv cpu_conv_from_environment() {
  const char* v = std::getenv("GRIDNN_CPU_CONV");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "onednn") == 0) return CpuConv::onednn;
  if (std::strcmp(v, "vol2col") == 0) return CpuConv::vol2col;
  throw Error(std::string("GRIDNN_CPU_CONV=") + v + ": choose onednn (the default) or vol2col");
}
std::atomic<CpuConv>& cpu_conv_choice() {
  static std::atomic<CpuConv> c{cpu_conv_from_environment()};
  return c;
}
}  // namespace

CpuConv cpu_conv() { return cpu_conv_choice().load(); }
CpuConv set_cpu_conv(CpuConv c) { return cpu_conv_choice().exchange(c); }

std::string conv3d_cpu_implementation(const Conv3dGeometry& g, int64_t n, ConvPass pass) {
  const ConvTaps t = conv3d_reaching_taps(g);
  if (t.none()) return "none (every output voxel is padding alone)";
  const Conv3dGeometry& reaching = t.geometry;
  if (pass == ConvPass::backward_filter && kernels::cpu::conv3d_filter_by_planes(reaching)) return "planes+gemm";
  if (cpu_conv() == CpuConv::onednn) {
    const std::string impl = cpu::onednn::implementation(reaching, n, cpu::onednn::Pass(int(pass)));
    if (!impl.empty()) return "onednn " + impl;
  }
  return "vol2col+gemm";
}

Conv3dCpuMemory conv3d_cpu_memory(const Conv3dGeometry& g, int64_t n, bool bias, bool input_gradient) {
  Conv3dCpuMemory m;
  const ConvTaps t = conv3d_reaching_taps(g);
  if (t.none()) return m;
  const Conv3dGeometry& r = t.geometry;  // what the passes run
  for (const ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_filter}) {
    if (pass == ConvPass::backward_data && !input_gradient) continue;
    int64_t& scratch = pass == ConvPass::forward ? m.forward_scratch : m.backward_scratch;
    if (pass == ConvPass::backward_filter && kernels::cpu::conv3d_filter_by_planes(r)) {
      scratch = std::max(scratch, kernels::cpu::one_channel::scratch_bytes(r, n));
      continue;
    }
    kernels::Workspace w{};
    if (cpu_conv() == CpuConv::onednn) w = cpu::onednn::workspace(r, n, cpu::onednn::Pass(int(pass)), bias);
    const bool by_onednn =
        cpu_conv() == CpuConv::onednn && !cpu::onednn::implementation(r, n, cpu::onednn::Pass(int(pass))).empty();
    if (!by_onednn)
      scratch = std::max(scratch, kernels::cpu::conv3d_column_bytes(r, n, pass == ConvPass::backward_filter));
    for (size_t s = 0; s < w.size(); ++s) m.workspace[s] = std::max(m.workspace[s], w[s]);
  }
  // On fewer taps: the copy of the weights on them, and in backward their gradient beside it.
  if (!t.all(g)) {
    const int64_t weights = kernels::host_floats_bytes(r.out_channels * r.col_rows());
    m.forward_scratch += weights;
    m.backward_scratch += 2 * weights;
  }
  return m;
}

}  // namespace gridnn::ops
