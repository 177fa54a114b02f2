// kernels/random.h: uniform_, normal_ and the Kaiming/Xavier initializers for every floating
// dtype, on a small and a large tensor, a row block drawn alone (offset), a depth box drawn
// alone (RandomKey::box) and a view inside a buffer. The reference draws straight from
// core/philox.h in double with PyTorch's scales; uniform draws agree bit for bit across
// backends, normals (through logf/cosf) within a tolerance.
#include <cmath>

#include "core/philox.h"
#include "kernels/elementwise.h"
#include "kernels/random.h"
#include "test/ops/harness.h"

namespace gridnn::test {
namespace {

enum class Init { uniform, normal, kaiming_normal, kaiming_uniform, xavier_uniform };
constexpr int64_t kFanIn = 27, kFanOut = 64;

constexpr EnumName<Init> kInitOps[] = {{Init::uniform, "random_uniform"},
                                       {Init::normal, "random_normal"},
                                       {Init::kaiming_normal, "random_kaiming_normal"},
                                       {Init::kaiming_uniform, "random_kaiming_uniform"},
                                       {Init::xavier_uniform, "random_xavier_uniform"}};
constexpr EnumNames<Init> enum_names(Init) { return {"initializer", kInitOps}; }

void draw(Init i, Tensor& t, const ops::RandomKey& key) {
  switch (i) {
    case Init::uniform:
      return ops::uniform_(t, -0.5f, 2.0f, key);
    case Init::normal:
      return ops::normal_(t, 0.25f, 1.5f, key);
    case Init::kaiming_normal:
      return ops::kaiming_normal_(t, kFanIn, key);
    case Init::kaiming_uniform:
      return ops::kaiming_uniform_(t, kFanIn, key);
    default:
      return ops::xavier_uniform_(t, kFanIn, kFanOut, key);
  }
}

// Draw `index` of the stream, in double: PyTorch's scale of a Philox uniform or normal.
double expected(Init i, uint64_t seed, uint64_t stream, uint64_t index) {
  const double u = philox_uniform(seed, stream, index), z = philox_normal(seed, stream, index);
  const double gain = std::sqrt(2.0);
  switch (i) {
    case Init::uniform:
      return -0.5 + 2.5 * u;
    case Init::normal:
      return 0.25 + 1.5 * z;
    case Init::kaiming_normal:
      return gain / std::sqrt(double(kFanIn)) * z;
    case Init::kaiming_uniform: {
      const double bound = gain * std::sqrt(3.0 / double(kFanIn));
      return -bound + 2 * bound * u;
    }
    default: {
      const double bound = std::sqrt(6.0 / double(kFanIn + kFanOut));
      return -bound + 2 * bound * u;
    }
  }
}

// `shape` drawn with `key`, the element at flat i being draw index(i) of the stream.
OpCase random_case(Init init, const std::string& what, const Shape& shape, DType dt, ops::RandomKey key,
                   std::function<uint64_t(int64_t)> index) {
  OpCase c;
  c.op = enum_name(init);
  c.params = what + " " + shape_name(shape) + " " + dtype_name(dt);
  c.make_inputs = [=] { return Tensors{Tensor::zeros(shape, dt)}; };  // where to draw (its device)
  c.run = [=](const Tensors& in) {
    Tensor t = Tensor::empty(shape, dt, in[0].device());
    draw(init, t, key);
    return Tensors{t};
  };
  c.reference = [=](const Tensors&) {
    Doubles v(size_t(shape.numel()));
    for (int64_t i = 0; i < shape.numel(); ++i) v[size_t(i)] = expected(init, key.seed, key.stream, index(i));
    return std::vector<Doubles>{v};
  };
  const bool normal = init == Init::normal || init == Init::kaiming_normal;
  c.ref_tol = stored_tolerance(dt, {1e-6, 1e-6});
  c.backend_tol = stored_tolerance(dt, normal ? Tolerance{1e-5, 1e-5} : Tolerance{1e-6, 1e-6});
  return c;
}

}  // namespace

void add_random_cases(OpCases& cases) {
  const ops::RandomKey key{1234, philox_stream_id("layer1.0.conv1.weight"), 1000};
  for (Init init : {Init::uniform, Init::normal, Init::kaiming_normal, Init::kaiming_uniform, Init::xavier_uniform})
    for (DType dt : {DType::f32, DType::f16, DType::bf16})
      for (int64_t n : {int64_t(0), int64_t(17), (int64_t(1) << 21) + 7})
        cases.push_back(random_case(init, "offset 1000", {n}, dt, key, [](int64_t i) { return uint64_t(1000 + i); }));

  // Rows [3, 7) of a [10, 33] tensor drawn alone: the whole tensor's draws 99..231.
  cases.push_back(random_case(Init::normal, "rows 3..7 of 10x33", {4, 33}, DType::f32, {7, 99, 3 * 33},
                              [](int64_t i) { return uint64_t(3 * 33 + i); }));
  // Depth planes [1, 3) of a [2, 3, 4, 2, 5] tensor (a domain-parallel rank's slab).
  const Shape global{2, 3, 4, 2, 5};
  cases.push_back(random_case(Init::uniform, "depth 1..3 of 2x3x4x2x5", {2, 3, 2, 2, 5}, DType::f32,
                              ops::RandomKey::box(9, philox_stream_id("x"), global, {0, 0, 1, 0, 0}), [](int64_t i) {
                                const int64_t hw = i % 10, d = (i / 10) % 2 + 1, nc = i / 20;
                                return uint64_t((nc * 4 + d) * 10 + hw);
                              }));

  // Rows [5, 9) of a [12, 37] buffer filled with -9 drawn in place; the rest stays -9.
  for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
    const ops::RandomKey view_key{99, philox_stream_id("fc.weight"), 5 * 37};
    OpCase c = random_case(Init::uniform, "view rows 5..9 of 12x37", {12, 37}, dt, view_key, nullptr);
    c.run = [=](const Tensors& in) {
      Tensor t = Tensor::empty({12, 37}, dt, in[0].device());
      ops::fill(t, -9.0);
      Tensor view = t.narrow(5, 4);
      ops::uniform_(view, -0.5f, 2.0f, view_key);
      return Tensors{t};
    };
    c.reference = [=](const Tensors&) {
      Doubles v(12 * 37, -9.0);
      for (int64_t i = 5 * 37; i < 9 * 37; ++i)
        v[size_t(i)] = expected(Init::uniform, 99, view_key.stream, uint64_t(i));
      return std::vector<Doubles>{v};
    };
    cases.push_back(c);
  }
}

}  // namespace gridnn::test
