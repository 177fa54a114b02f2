// kernels/elementwise.h: fill, copy, cast, add, mul, axpy, scale, ReLU forward and backward,
// for every floating dtype (cast: every pair of dtypes), on an odd shape and on one large
// enough that the CUDA grid-stride loops wrap. Each body is one correctly rounded float
// operation, so the backends agree bit for bit.
#include <cmath>

#include "kernels/elementwise.h"
#include "test/ops/harness.h"

namespace gridnn::test {
namespace {

constexpr DType kFloating[] = {DType::f32, DType::f16, DType::bf16};
constexpr DType kAll[] = {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64};
const Shape kOdd{3, 5, 7};
const Shape kLarge{(int64_t(1) << 21) + 7};  // more elements than threads in the CUDA grid

// A case of `op` on `n_inputs` uniform inputs in [-2, 2) of `shape` and `dtype`, whose
// reference applies `f` element by element (f gets the inputs' values at one index).
OpCase map_case(const std::string& op, const Shape& shape, DType dtype, int n_inputs,
                std::function<Tensor(const Tensors&)> run, std::function<double(const double*)> f) {
  OpCase c;
  c.op = op;
  c.params = shape_name(shape) + " " + dtype_name(dtype);
  const std::string key = c.op + c.params;
  c.make_inputs = [=] {
    Tensors in;
    for (int i = 0; i < n_inputs; ++i) in.push_back(case_input(key, i, shape, -2.0f, 2.0f, dtype));
    return in;
  };
  c.run = [run](const Tensors& in) { return Tensors{run(in)}; };
  c.reference = [f](const Tensors& in) {
    std::vector<Doubles> v;
    for (const Tensor& t : in) v.push_back(values(t));
    Doubles out(v[0].size());
    double args[4];
    for (size_t i = 0; i < out.size(); ++i) {
      for (size_t k = 0; k < v.size(); ++k) args[k] = v[k][i];
      out[i] = f(args);
    }
    return std::vector<Doubles>{out};
  };
  c.ref_tol = stored_tolerance(dtype);
  c.bitwise = true;
  return c;
}

Tensor like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

}  // namespace

void add_elementwise_cases(OpCases& cases) {
  for (const Shape& shape : {Shape{0, 4}, Shape{1}, kOdd, kLarge})
    for (DType dt : kAll) {
      OpCase c = map_case(
          "fill", shape, dt, 1,
          [](const Tensors& in) {
            Tensor t = like(in[0]);
            ops::fill(t, -2.75);
            return t;
          },
          [](const double*) { return -2.75; });
      c.ref_tol = {0, 0};  // -2.75 is exact in every floating format; integers truncate below
      if (dt == DType::i32 || dt == DType::i64)
        c.reference = [](const Tensors& in) { return std::vector<Doubles>{Doubles(size_t(in[0].numel()), -2.0)}; };
      cases.push_back(c);
    }

  // Zero is all zero bits, which fill sets by memset in blocks of 2^16 elements (a partial
  // last one on the 3 x (2^16 + 5) shape). The tensor holds another value first.
  for (const Shape& shape : {kOdd, kLarge, Shape{3, 65541}})
    for (DType dt : kAll) {
      OpCase c = map_case(
          "fill", shape, dt, 1,
          [](const Tensors& in) {
            Tensor t = like(in[0]);
            ops::fill(t, 5.0);
            ops::fill(t, 0.0);
            return t;
          },
          [](const double*) { return 0.0; });
      c.params += " zero";
      c.ref_tol = {0, 0};
      cases.push_back(c);
    }

  for (DType from : kAll)
    for (DType to : kAll) {
      OpCase c = map_case(
          "cast", {7, 11, 13}, from, 1, [to](const Tensors& in) { return ops::cast(in[0], to); },
          [](const double* a) { return *a; });
      c.params += " to " + std::string(dtype_name(to));
      c.make_inputs = [from] { return Tensors{case_input("cast", 0, {7, 11, 13}, -300.0f, 300.0f, from)}; };
      // Integers truncate toward zero; a float rounds once to the narrower format.
      const bool to_int = to == DType::i32 || to == DType::i64;
      c.reference = [to_int](const Tensors& in) {
        Doubles v = values(in[0]);
        if (to_int)
          for (double& x : v) x = std::trunc(x);
        return std::vector<Doubles>{v};
      };
      c.ref_tol = to_int ? Tolerance{0, 0} : stored_tolerance(to);
      cases.push_back(c);
    }

  for (const Shape& shape : {Shape{0, 4}, kOdd, kLarge})
    for (DType dt : kFloating) {
      const bool small_f32 = dt == DType::f32 && shape == kOdd;
      OpCase copy = map_case(
          "copy", shape, dt, 1,
          [](const Tensors& in) {
            Tensor y = like(in[0]);
            ops::copy(in[0], y);
            return y;
          },
          [](const double* a) { return a[0]; });
      copy.ref_tol = {0, 0};
      cases.push_back(copy);

      OpCase add = map_case(
          "add", shape, dt, 2,
          [](const Tensors& in) {
            Tensor y = like(in[0]);
            ops::add(in[0], in[1], y);
            return y;
          },
          [](const double* a) { return a[0] + a[1]; });
      if (small_f32) {
        add.backward = [](const Tensors&, const Tensor& dy) { return Tensors{dy.clone(), dy.clone()}; };
        add.grad_inputs = {0, 1};
      }
      cases.push_back(add);

      OpCase mul = map_case(
          "mul", shape, dt, 2,
          [](const Tensors& in) {
            Tensor y = like(in[0]);
            ops::mul(in[0], in[1], y);
            return y;
          },
          [](const double* a) { return a[0] * a[1]; });
      if (small_f32) {
        mul.backward = [](const Tensors& in, const Tensor& dy) {
          Tensor da = like(dy), db = like(dy);
          ops::mul(dy, in[1], da);
          ops::mul(dy, in[0], db);
          return Tensors{da, db};
        };
        mul.grad_inputs = {0, 1};
      }
      cases.push_back(mul);

      // In place: y starts as in[1] and becomes in[1] + 0.73 * in[0].
      OpCase axpy = map_case(
          "axpy", shape, dt, 2,
          [](const Tensors& in) {
            Tensor y = in[1].clone();
            ops::axpy(0.73f, in[0], y);
            return y;
          },
          [](const double* a) { return a[1] + double(0.73f) * a[0]; });
      axpy.ref_tol = stored_tolerance(dt, {1e-6, 1e-6});
      axpy.bitwise = false;  // the CPU and CUDA compilers may contract y + a * x into an FMA
      axpy.backend_tol = stored_tolerance(dt, {1e-6, 1e-6});
      if (small_f32) {
        axpy.backward = [](const Tensors&, const Tensor& dy) {
          Tensor dx = dy.clone();
          ops::scale(dx, 0.73f);
          return Tensors{dx, dy.clone()};
        };
        axpy.grad_inputs = {0, 1};
      }
      cases.push_back(axpy);

      OpCase scale = map_case(
          "scale", shape, dt, 1,
          [](const Tensors& in) {
            Tensor y = in[0].clone();
            ops::scale(y, -0.37f);
            return y;
          },
          [](const double* a) { return a[0] * double(-0.37f); });
      if (small_f32) {
        scale.backward = [](const Tensors&, const Tensor& dy) {
          Tensor dx = dy.clone();
          ops::scale(dx, -0.37f);
          return Tensors{dx};
        };
        scale.grad_inputs = {0};
      }
      cases.push_back(scale);

      OpCase relu = map_case(
          "relu_forward", shape, dt, 1,
          [](const Tensors& in) {
            Tensor y = like(in[0]);
            ops::relu_forward(in[0], y);
            return y;
          },
          [](const double* a) { return a[0] > 0 ? a[0] : 0.0; });
      relu.ref_tol = {0, 0};
      if (small_f32) {
        relu.backward = [](const Tensors& in, const Tensor& dy) {
          Tensor dx = like(dy);
          ops::relu_backward(in[0], dy, dx);
          return Tensors{dx};
        };
        relu.grad_inputs = {0};
        relu.grad.skip_kinks = true;
      }
      cases.push_back(relu);

      OpCase relu_back = map_case(
          "relu_backward", shape, dt, 2,
          [](const Tensors& in) {
            Tensor dx = like(in[0]);
            ops::relu_backward(in[0], in[1], dx);
            return dx;
          },
          [](const double* a) { return a[0] > 0 ? a[1] : 0.0; });
      relu_back.ref_tol = {0, 0};
      cases.push_back(relu_back);

      // The output aliasing an input: add(a, b, a), then relu_forward(a, a).
      OpCase in_place = map_case(
          "add_relu_in_place", shape, dt, 2,
          [](const Tensors& in) {
            Tensor a = in[0].clone();
            ops::add(a, in[1], a);
            ops::relu_forward(a, a);
            return a;
          },
          [dt](const double* a) {
            const double s = values(ops::cast(tensor_of({a[0] + a[1]}, {1}), dt))[0];  // a + b rounded as stored
            return s > 0 ? s : 0.0;
          });
      if (shape == kOdd) cases.push_back(in_place);  // (an empty tensor launches nothing)
    }
  // Views inside larger buffers (storage offsets, odd row lengths): only the view's rows of
  // the whole output buffer change.
  for (DType dt : kFloating) {
    OpCase add = map_case(
        "add", {10, 33}, dt, 3,
        [](const Tensors& in) {
          Tensor out = in[2].clone(), view = out.narrow(2, 5);
          ops::add(in[0].narrow(3, 5), in[1].narrow(1, 5), view);
          return out;
        },
        nullptr);
    add.params += " views";
    add.reference = [](const Tensors& in) {
      const Doubles a = values(in[0]), b = values(in[1]);
      Doubles out = values(in[2]);
      for (int64_t i = 0; i < 5 * 33; ++i) out[size_t(2 * 33 + i)] = a[size_t(3 * 33 + i)] + b[size_t(1 * 33 + i)];
      return std::vector<Doubles>{out};
    };
    cases.push_back(add);

    OpCase axpy = map_case(
        "axpy", {9, 1001}, dt, 2,
        [](const Tensors& in) {
          Tensor y = in[1].clone(), view = y.narrow(4, 3);
          ops::axpy(-1.25f, in[0].narrow(1, 3), view);
          return y;
        },
        nullptr);
    axpy.params += " views";
    axpy.reference = [](const Tensors& in) {
      const Doubles x = values(in[0]);
      Doubles y = values(in[1]);
      for (int64_t i = 0; i < 3 * 1001; ++i) y[size_t(4 * 1001 + i)] += -1.25 * x[size_t(1001 + i)];
      return std::vector<Doubles>{y};
    };
    axpy.bitwise = false;
    axpy.backend_tol = stored_tolerance(dt, {1e-6, 1e-6});
    cases.push_back(axpy);
  }
}

}  // namespace gridnn::test
