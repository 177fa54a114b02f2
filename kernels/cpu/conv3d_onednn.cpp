// oneDNN's convolutions for the CPU backend: see kernels/cpu/conv3d_onednn.h.
#include "kernels/cpu/conv3d_onednn.h"

#if GRIDNN_HAVE_ONEDNN
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/error.h"
#include "core/profile.h"
#include "kernels/conv3d.h"
#endif

namespace gridnn::kernels::cpu::onednn {

#if !GRIDNN_HAVE_ONEDNN

bool built() { return false; }
std::string implementation(const Conv3dGeometry&, int64_t, Pass) { return ""; }
bool forward(const Tensor&, const Tensor&, const Tensor&, const Conv3dGeometry&, Tensor&) { return false; }
bool backward_data(const Tensor&, const Tensor&, const Conv3dGeometry&, Tensor&) { return false; }
bool backward_filter(const Tensor&, const Tensor&, const Conv3dGeometry&, Tensor&) { return false; }
bool backward(const Tensor&, const Tensor&, const Tensor&, const Conv3dGeometry&, Tensor*, Tensor&,
              const std::function<void()>&) {
  return false;
}
Workspace workspace(const Conv3dGeometry&, int64_t, Pass, bool) { return {}; }

#else

namespace {

using dnnl::memory;
using Dims = memory::dims;
using Tag = memory::format_tag;

const char* pass_name(Pass p) {
  return p == Pass::forward ? "forward" : p == Pass::backward_data ? "backward data" : "backward filter";
}

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

// ---- the per-thread workspace --------------------------------------------------------

// A 64-byte aligned buffer that only grows, from gridnn's host allocator (so the allocator's
// statistics and memory limit see it).
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { host_allocator().deallocate(data_, size_); }
  void* reserve(size_t bytes) {
    if (bytes > size_) {
      host_allocator().deallocate(data_, size_);
      data_ = nullptr;
      size_ = 0;
      const size_t size = round_up(bytes);
      data_ = host_allocator().allocate(size);
      size_ = size;
    }
    return data_;
  }
  static size_t round_up(size_t bytes) { return (bytes + 63) / 64 * 64; }
  // The bytes the host allocator holds for a buffer reserved for `bytes` (its size class).
  static int64_t held(size_t bytes) { return int64_t(block_bytes(Device::cpu(), round_up(bytes))); }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Which workspace buffer holds an operand's copy in the primitive's layout. The three roles
// of a convolution (activation in, weights, activation out) never need two copies at once.
enum Slot { kSource, kWeights, kDestination, kBias, kScratchpad, kSlots };
static_assert(kSlots == kWorkspaceSlots, "one workspace size per slot");

// ---- plans: one per geometry, batch, pass, bias and thread count -----------------------

// One argument of a primitive: `user` over gridnn's plain tensor, `inner` in the layout the
// primitive wants (the same memory when they agree and nothing forces a copy).
struct Operand {
  int arg = 0;
  memory user, inner;
  bool copy = false;
  bool is_output = false;
  Slot slot = kSource;
  dnnl::reorder to_inner, to_user;  // input: user -> inner; output: inner -> user
};

struct Plan {
  std::string impl;  // "" when oneDNN cannot run this pass well
  dnnl::primitive primitive;
  std::vector<Operand> operands;
  memory scratchpad;
  std::unordered_map<int, memory> args;
};

using Key = std::array<int64_t, 20>;

Key key_of(const Conv3dGeometry& g, int64_t n, Pass pass, bool bias) {
  Key k{};
  size_t i = 0;
  k[i++] = n;
  k[i++] = g.in_channels;
  k[i++] = g.out_channels;
  for (int d = 0; d < 3; ++d) {
    k[i++] = g.kernel[d];
    k[i++] = g.stride[d];
    k[i++] = g.padding[d];
    k[i++] = g.in_size[d];
  }
  k[i++] = int64_t(pass);
  k[i++] = bias;
  k[i++] = omp_get_max_threads();
  return k;
}

Dims dims(std::initializer_list<int64_t> v) { return Dims(v.begin(), v.end()); }
memory::desc f32(const Dims& d, Tag tag) { return memory::desc(d, memory::data_type::f32, tag); }

struct Shapes {
  Dims src, weights, bias, dst, strides, dilation, pad_l, pad_r;
  Tag activations;  // the layout the passes get src and dst (and their gradients) in
};

// Channels last (ndhwc) when a channel count other than the input's 1 is not a multiple of
// 16, else oneDNN's choice (`any`: nCdhw16c on AVX-512, nCdhw8c on AVX2). With 12 or 20
// channels oneDNN 2.6 pads the blocked layout and runs up to 3x slower than on ndhwc (its
// brgemm forward; a GEMM backward filter for 12), with 16, 32 or 80 the two are within ~10%,
// and the stem's single input channel runs its forward 2x faster blocked (bench/RESULTS.md).
// A rule of the geometry alone, so every run picks the same kernels.
Tag activation_layout(const Conv3dGeometry& g) {
  const bool padded = g.in_channels % 16 != 0 || g.out_channels % 16 != 0;
  return padded && g.in_channels > 1 ? Tag::ndhwc : Tag::any;
}

Shapes shapes_of(const Conv3dGeometry& g, int64_t n) {
  Shapes s;
  s.src = dims({n, g.in_channels, g.in_size[0], g.in_size[1], g.in_size[2]});
  s.weights = dims({g.out_channels, g.in_channels, g.kernel[0], g.kernel[1], g.kernel[2]});
  s.bias = dims({g.out_channels});
  s.dst = dims({n, g.out_channels, g.out_size[0], g.out_size[1], g.out_size[2]});
  s.strides = dims({g.stride[0], g.stride[1], g.stride[2]});
  s.dilation = dims({0, 0, 0});  // oneDNN counts dilation from 0
  s.activations = activation_layout(g);
  // The right padding that makes (in + pad_l + pad_r - k) / s + 1 == out exactly: the input
  // planes a stride leaves over are not read, as in gridnn's own loops.
  s.pad_l = dims({g.padding[0], g.padding[1], g.padding[2]});
  s.pad_r = s.pad_l;
  for (int d = 0; d < 3; ++d)
    s.pad_r[size_t(d)] = (g.out_size[d] - 1) * g.stride[d] + g.kernel[d] - g.in_size[d] - g.padding[d];
  return s;
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

// The operand `arg` of a primitive whose pd wants `inner`; gridnn holds it as `plain`.
// An output with `accumulate` is computed into the workspace and added into the user's.
Operand operand(int arg, const memory::desc& plain, const memory::desc& inner, Slot slot, bool is_output,
                bool accumulate = false) {
  Operand o;
  o.arg = arg;
  o.slot = slot;
  o.is_output = is_output;
  o.user = memory(plain, engine(), DNNL_MEMORY_NONE);
  o.copy = accumulate || plain != inner;
  if (!o.copy) {
    o.inner = o.user;
    return o;
  }
  o.inner = memory(inner, engine(), DNNL_MEMORY_NONE);
  if (!is_output) {
    o.to_inner = dnnl::reorder(o.user, o.inner);
  } else if (accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(sum);
    o.to_user = dnnl::reorder(o.inner, o.user, attr);
  } else {
    o.to_user = dnnl::reorder(o.inner, o.user);
  }
  return o;
}

bool is_reference(const std::string& impl) { return impl.rfind("ref", 0) == 0; }

// The forward pd (also the hint of both backward pds).
dnnl::convolution_forward::primitive_desc forward_pd(const Shapes& s, bool bias) {
  const auto any = [](const Dims& d) { return f32(d, Tag::any); };
  const auto act = [&s](const Dims& d) { return f32(d, s.activations); };
  using dnnl::algorithm;
  using dnnl::prop_kind;
  const auto desc =
      bias ? dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, act(s.src),
                                             any(s.weights), f32(s.bias, Tag::x), act(s.dst), s.strides, s.dilation,
                                             s.pad_l, s.pad_r)
           : dnnl::convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, act(s.src),
                                             any(s.weights), act(s.dst), s.strides, s.dilation, s.pad_l, s.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, user_scratchpad(), engine());
}

bool is_gemm(const std::string& impl) { return impl.rfind("gemm:", 0) == 0 || impl.rfind("x64:gemm:", 0) == 0; }

// The plan of one pass; a plan with impl "" when oneDNN would run only its reference kernel
// (slower than vol2col + GEMM by far).
Plan build(const Conv3dGeometry& g, int64_t n, Pass pass, bool bias) {
  const Shapes s = shapes_of(g, n);
  const memory::desc src = f32(s.src, Tag::ncdhw), weights = f32(s.weights, Tag::oidhw), dst = f32(s.dst, Tag::ncdhw);
  using dnnl::algorithm;
  const auto any = [](const Dims& d) { return f32(d, Tag::any); };
  const auto act = [&s](const Dims& d) { return f32(d, s.activations); };
  const auto fwd = forward_pd(s, bias && pass == Pass::forward);
  Plan p;
  if (pass == Pass::forward) {
    p.impl = fwd.impl_info_str();
    p.primitive = dnnl::convolution_forward(fwd);
    p.operands = {operand(DNNL_ARG_SRC, src, fwd.src_desc(), kSource, false),
                  operand(DNNL_ARG_WEIGHTS, weights, fwd.weights_desc(), kWeights, false),
                  operand(DNNL_ARG_DST, dst, fwd.dst_desc(), kDestination, true)};
    if (bias) p.operands.push_back(operand(DNNL_ARG_BIAS, f32(s.bias, Tag::x), fwd.bias_desc(), kBias, false));
    p.scratchpad = memory(fwd.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
  } else if (pass == Pass::backward_data) {
    const dnnl::convolution_backward_data::desc desc(algorithm::convolution_direct, act(s.src), any(s.weights),
                                                     act(s.dst), s.strides, s.dilation, s.pad_l, s.pad_r);
    const dnnl::convolution_backward_data::primitive_desc pd(desc, user_scratchpad(), engine(), fwd);
    p.impl = pd.impl_info_str();
    p.primitive = dnnl::convolution_backward_data(pd);
    p.operands = {operand(DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), kDestination, false),
                  operand(DNNL_ARG_WEIGHTS, weights, pd.weights_desc(), kWeights, false),
                  operand(DNNL_ARG_DIFF_SRC, src, pd.diff_src_desc(), kSource, true)};
    p.scratchpad = memory(pd.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
  } else {
    const dnnl::convolution_backward_weights::desc desc(algorithm::convolution_direct, act(s.src), any(s.weights),
                                                        act(s.dst), s.strides, s.dilation, s.pad_l, s.pad_r);
    const dnnl::convolution_backward_weights::primitive_desc pd(desc, user_scratchpad(), engine(), fwd);
    p.impl = pd.impl_info_str();
    p.primitive = dnnl::convolution_backward_weights(pd);
    p.operands = {operand(DNNL_ARG_SRC, src, pd.src_desc(), kSource, false),
                  operand(DNNL_ARG_DIFF_DST, dst, pd.diff_dst_desc(), kDestination, false),
                  operand(DNNL_ARG_DIFF_WEIGHTS, weights, pd.diff_weights_desc(), kWeights, true, true)};
    p.scratchpad = memory(pd.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
  }
  if (is_reference(p.impl)) return Plan{};
  for (const Operand& o : p.operands) p.args.emplace(o.arg, o.inner);
  if (p.scratchpad.get_desc().get_size() > 0) p.args.emplace(DNNL_ARG_SCRATCHPAD, p.scratchpad);
  return p;
}

// The plans and workspace of the calling thread (a primitive with a user scratchpad may run
// on any thread, but the workspace buffers must not be shared between threads).
struct ThreadState {
  std::map<Key, std::unique_ptr<Plan> > plans;
  Buffer buffers[kSlots];
  dnnl::stream stream{engine()};
};

ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

// One notice per geometry that falls back to vol2col + GEMM, for the whole process.
void notice_fallback(const Conv3dGeometry& g, int64_t n, Pass pass, const std::string& why) {
  static std::mutex m;
  static std::set<Key> told;
  const std::lock_guard<std::mutex> lock(m);
  if (!told.insert(key_of(g, 0, Pass::forward, false)).second) return;
  std::fprintf(stderr, "gridnn: conv3d %s of %s, batch %lld: %s; vol2col + GEMM runs it instead\n", pass_name(pass),
               ops::str(g).c_str(), static_cast<long long>(n), why.c_str());
}

// The runtime oneDNN was built with must be OpenMP (libgomp), the pool gridnn and OpenBLAS
// run on; another runtime would start a second pool and oversubscribe the cores.
bool openmp_runtime() {
  static const bool ok = [] {
    const dnnl_version_t* v = dnnl::version();
    if (v->cpu_runtime == DNNL_RUNTIME_OMP) return true;
    std::fprintf(stderr,
                 "gridnn: the oneDNN library loaded (%d.%d.%d) does not use OpenMP threads; "
                 "convolutions run on vol2col + GEMM instead\n",
                 v->major, v->minor, v->patch);
    return false;
  }();
  return ok;
}

// Where oneDNN 2.6 is wrong, found by comparing it with vol2col + GEMM over many small
// geometries (test/kernels/test_conv3d_cpu.cpp keeps them): with a kernel larger than the
// input, its JIT backward filter never returns (7^3 stride 2 on 5 planes); with a strided
// kernel reaching over almost the whole input (7^3 stride 2 on 6 or 7 planes, 6^3 on 5 or 6,
// batch > 1) it returns wrong filter gradients. The rules below keep such geometries on
// vol2col, with a margin: every pass needs a strided kernel to fit the input (unit-stride
// kernels larger than the input, 3^3 on 1-3 planes and 5^3 on 3, were right in every pass on
// its AVX-512, AVX2 and SSE4.1 kernels), backward filter with a strided kernel of 6 or more
// (3 and 5 were right on every depth tried) also two planes to spare along that dimension.
// A padding on either side as wide as the kernel (outputs that read padding alone) stays on
// vol2col too: oneDNN's forward wrote past its destination there (a depth kernel of 1 tap,
// the one that reaches, with padding 3 at stride 3 on one input plane).
const char* unsupported(const Conv3dGeometry& g, Pass pass) {
  for (int d = 0; d < 3; ++d)
    if (g.kernel[d] > g.in_size[d] && g.stride[d] > 1) return "a strided kernel is larger than the input";
  for (int d = 0; d < 3; ++d)
    if (g.padding[d] >= g.kernel[d] ||
        (g.out_size[d] - 1) * g.stride[d] + g.kernel[d] - g.in_size[d] - g.padding[d] >= g.kernel[d])
      return "a padding as wide as the kernel (outputs reading padding alone)";
  if (pass == Pass::backward_filter)
    for (int d = 0; d < 3; ++d)
      if (g.stride[d] > 1 && g.kernel[d] >= 6 && g.in_size[d] < g.kernel[d] + 2)
        return "a strided kernel spans almost the whole input, where oneDNN 2.6's backward filter is wrong";
  return nullptr;
}

// oneDNN 2.6's GEMM backward filter (its only one when the kernel is larger than the input)
// runs one GEMM per sample, as long as the sample's output: 8 voxels for ResAttNet3D's layer4
// on small inputs. Where vol2col + GEMM puts several samples into one GEMM, that runs it
// instead, by choice and without a notice (bench/RESULTS.md: 0.75 ms against 0.35-0.44 for
// bench_layers' layer4_residual, batch 2).
bool short_gemm_per_sample(const Plan& p, const Conv3dGeometry& g, int64_t n, Pass pass) {
  return pass == Pass::backward_filter && is_gemm(p.impl) && conv3d_filter_samples_per_gemm(g, n) > 1;  // not brgemm
}

Plan& plan(const Conv3dGeometry& g, int64_t n, Pass pass, bool bias) {
  std::unique_ptr<Plan>& slot = state().plans[key_of(g, n, pass, bias)];
  if (!slot) {
    slot = std::make_unique<Plan>();
    if (const char* why = unsupported(g, pass)) {
      notice_fallback(g, n, pass, why);
    } else if (openmp_runtime()) {
      try {
        *slot = build(g, n, pass, bias);
        if (slot->impl.empty()) notice_fallback(g, n, pass, "oneDNN has only its reference kernel for it");
        if (short_gemm_per_sample(*slot, g, n, pass)) *slot = Plan{};
      } catch (const dnnl::error& e) {
        notice_fallback(g, n, pass, std::string("oneDNN cannot build it (") + e.what() + ")");
        *slot = Plan{};
      }
    }
  }
  return *slot;
}

void* handle(const Tensor& t) { return const_cast<void*>(t.raw()); }

// Runs a plan on the tensors given per argument: inputs reordered into the workspace, the
// primitive, outputs reordered (or added) back into gridnn's tensors.
using Tensors = std::initializer_list<std::pair<int, const Tensor*> >;

const Tensor& tensor_of(const Tensors& tensors, int arg) {
  for (const auto& [a, t] : tensors)
    if (a == arg) return *t;
  throw Error("conv3d (oneDNN): no tensor for argument " + std::to_string(arg));
}

// A copy between gridnn's layout and oneDNN's. One under kSerialReorderBytes runs on the
// calling thread alone: it takes microseconds, and waking the pool's sleeping threads for
// it (OMP_WAIT_POLICY=passive) costs more than it saves; with two threads the reorders of a
// w16 64^3 step took 2x their one-thread time (bench/RESULTS.md). A copy gives the same
// bytes on any number of threads.
constexpr size_t kSerialReorderBytes = size_t(1) << 20;

// The calling thread's OpenMP thread count set to 1 for a scope, when `serial`.
class SerialScope {
 public:
  explicit SerialScope(bool serial) : threads_(serial ? omp_get_max_threads() : 0) {
    if (threads_ > 1) omp_set_num_threads(1);
  }
  ~SerialScope() {
    if (threads_ > 1) omp_set_num_threads(threads_);
  }
  SerialScope(const SerialScope&) = delete;
  SerialScope& operator=(const SerialScope&) = delete;

 private:
  int threads_;
};

void reorder(dnnl::reorder& r, dnnl::stream& stream, dnnl::memory& from, dnnl::memory& to) {
  const ProfileScope profile(ProfileKind::reorder);
  const SerialScope serial(from.get_desc().get_size() < kSerialReorderBytes);
  r.execute(stream, from, to);
}

// `ready`: an input argument whose blocked copy the previous execute on this thread left in
// its workspace buffer (0: none).
void execute(Plan& p, const Tensors& tensors, int ready = 0) {
  ThreadState& ts = state();
  try {
    for (Operand& o : p.operands) {
      o.user.set_data_handle(handle(tensor_of(tensors, o.arg)));
      if (!o.copy) continue;
      o.inner.set_data_handle(ts.buffers[o.slot].reserve(o.inner.get_desc().get_size()));
      if (!o.is_output && o.arg != ready) {
        reorder(o.to_inner, ts.stream, o.user, o.inner);
      }
    }
    const size_t scratch = p.scratchpad.get_desc().get_size();
    if (scratch > 0) p.scratchpad.set_data_handle(ts.buffers[kScratchpad].reserve(scratch));
    p.primitive.execute(ts.stream, p.args);
    for (Operand& o : p.operands)
      if (o.copy && o.is_output) {
        reorder(o.to_user, ts.stream, o.inner, o.user);
      }
    ts.stream.wait();
  } catch (const dnnl::error& e) {
    throw Error(std::string("conv3d (oneDNN ") + p.impl + "): " + e.what());
  }
}

}  // namespace

bool built() { return true; }

std::string implementation(const Conv3dGeometry& g, int64_t n, Pass pass) { return plan(g, n, pass, false).impl; }

Workspace workspace(const Conv3dGeometry& g, int64_t n, Pass pass, bool bias) {
  Workspace bytes{};
  Plan& p = plan(g, n, pass, bias);
  if (p.impl.empty()) return bytes;
  for (const Operand& o : p.operands)
    if (o.copy) bytes[o.slot] = std::max(bytes[o.slot], Buffer::held(o.inner.get_desc().get_size()));
  const size_t scratch = p.scratchpad.get_desc().get_size();
  if (scratch > 0) bytes[kScratchpad] = Buffer::held(scratch);
  return bytes;
}

bool forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv3dGeometry& g, Tensor& y) {
  Plan& p = plan(g, x.size(0), Pass::forward, bias.defined());
  if (p.impl.empty()) return false;
  execute(p, {{DNNL_ARG_SRC, &x}, {DNNL_ARG_WEIGHTS, &w}, {DNNL_ARG_DST, &y}, {DNNL_ARG_BIAS, &bias}});
  return true;
}

bool backward_data(const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor& dx) {
  Plan& p = plan(g, dy.size(0), Pass::backward_data, false);
  if (p.impl.empty()) return false;
  execute(p, {{DNNL_ARG_DIFF_DST, &dy}, {DNNL_ARG_WEIGHTS, &w}, {DNNL_ARG_DIFF_SRC, &dx}});
  return true;
}

bool backward_filter(const Tensor& x, const Tensor& dy, const Conv3dGeometry& g, Tensor& dw) {
  Plan& p = plan(g, x.size(0), Pass::backward_filter, false);
  if (p.impl.empty()) return false;
  execute(p, {{DNNL_ARG_SRC, &x}, {DNNL_ARG_DIFF_DST, &dy}, {DNNL_ARG_DIFF_WEIGHTS, &dw}});
  return true;
}

bool backward(const Tensor& x, const Tensor& dy, const Tensor& w, const Conv3dGeometry& g, Tensor* dx, Tensor& dw,
              const std::function<void()>& between) {
  Plan& filter = plan(g, x.size(0), Pass::backward_filter, false);
  Plan* data = dx ? &plan(g, x.size(0), Pass::backward_data, false) : nullptr;
  if (filter.impl.empty() || (data && data->impl.empty())) return false;
  int ready = 0;
  if (data) {
    execute(*data, {{DNNL_ARG_DIFF_DST, &dy}, {DNNL_ARG_WEIGHTS, &w}, {DNNL_ARG_DIFF_SRC, dx}});
    // Backward data left dy's blocked copy in the destination buffer; backward filter reads
    // it there when it wants the same layout (both plans take the forward's as their hint).
    const auto dy_of = [](const Plan& p) -> const Operand& {
      for (const Operand& o : p.operands)
        if (o.arg == DNNL_ARG_DIFF_DST) return o;
      throw Error("conv3d (oneDNN): a backward plan without dy");
    };
    const Operand &a = dy_of(*data), &b = dy_of(filter);
    if (a.copy && b.copy && a.slot == b.slot && a.inner.get_desc() == b.inner.get_desc()) ready = DNNL_ARG_DIFF_DST;
  }
  if (between) between();
  execute(filter, {{DNNL_ARG_SRC, &x}, {DNNL_ARG_DIFF_DST, &dy}, {DNNL_ARG_DIFF_WEIGHTS, &dw}}, ready);
  return true;
}

#endif  // GRIDNN_HAVE_ONEDNN

}  // namespace gridnn::kernels::cpu::onednn
