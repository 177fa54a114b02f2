#include "test/ops/reference_layers.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/philox.h"
#include "test/support/tensor_compare.h"

namespace gridnn::test {

namespace {

// A row's max m and sum_j exp(row[j] - m): what softmax and the log-sum-exp of the loss
// share.
struct RowExp {
  double max = -std::numeric_limits<double>::infinity(), sum = 0;
};

RowExp row_exp(const double* row, int64_t cols) {
  RowExp e;
  for (int64_t j = 0; j < cols; ++j) e.max = std::max(e.max, row[j]);
  for (int64_t j = 0; j < cols; ++j) e.sum += std::exp(row[j] - e.max);
  return e;
}

}  // namespace

std::vector<double> reference_softmax(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * cols;
    const RowExp e = row_exp(row, cols);
    for (int64_t j = 0; j < cols; ++j) y[size_t(r * cols + j)] = std::exp(row[j] - e.max) / e.sum;
  }
  return y;
}

std::vector<double> reference_softmax_backward(const std::vector<double>& y, const std::vector<double>& dy,
                                               int64_t rows, int64_t cols) {
  std::vector<double> dx(y.size());
  for (int64_t r = 0; r < rows; ++r) {
    const size_t o = size_t(r * cols);
    double dot = 0;
    for (int64_t j = 0; j < cols; ++j) dot += dy[o + size_t(j)] * y[o + size_t(j)];
    for (int64_t j = 0; j < cols; ++j) dx[o + size_t(j)] = y[o + size_t(j)] * (dy[o + size_t(j)] - dot);
  }
  return dx;
}

double CrossEntropyReference::sum() const {
  double total = 0;
  for (double l : row_loss) total += l;
  return total;
}

CrossEntropyReference reference_cross_entropy(const std::vector<double>& logits, const std::vector<int64_t>& labels,
                                              int64_t classes) {
  const int64_t n = int64_t(labels.size());
  CrossEntropyReference r;
  r.probs = reference_softmax(logits, n, classes);
  for (int64_t i = 0; i < n; ++i) {
    const double* row = logits.data() + i * classes;
    const RowExp e = row_exp(row, classes);
    r.row_loss.push_back(e.max + std::log(e.sum) - row[labels[size_t(i)]]);
  }
  return r;
}

std::vector<double> reference_cross_entropy_grad(const std::vector<double>& probs, const std::vector<int64_t>& labels,
                                                 int64_t classes, double scale) {
  std::vector<double> g(probs.size());
  for (size_t i = 0; i < labels.size(); ++i)
    for (int64_t j = 0; j < classes; ++j) {
      const size_t e = i * size_t(classes) + size_t(j);
      g[e] = (probs[e] - (j == labels[i] ? 1.0 : 0.0)) * scale;
    }
  return g;
}

std::vector<double> reference_dropout(const std::vector<double>& x, float p, const ops::DropoutKey& key) {
  const float scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  const uint64_t first = (key.step << 40) + uint64_t(key.offset);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const bool keep = philox_uniform(key.seed, key.stream, first + i) >= p;
    y[i] = keep ? double(float(x[i]) * scale) : 0.0;
  }
  return y;
}

std::vector<double> reference_linear(const std::vector<double>& x, const std::vector<double>& w,
                                     const std::vector<double>& b, int64_t n, int64_t in, int64_t out) {
  std::vector<double> y(size_t(n * out));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double acc = b.empty() ? 0.0 : b[size_t(o)];
      for (int64_t k = 0; k < in; ++k) acc += x[size_t(i * in + k)] * w[size_t(o * in + k)];
      y[size_t(i * out + o)] = acc;
    }
  return y;
}

std::vector<double> reference_pointwise_conv3d(const std::vector<double>& x, const std::vector<double>& w,
                                               const std::vector<double>& b, int64_t batch, int64_t in, int64_t out,
                                               int64_t positions) {
  std::vector<double> y(size_t(batch * out * positions));
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < positions; ++i) {
        double acc = b[size_t(o)];
        for (int64_t c = 0; c < in; ++c) acc += w[size_t(o * in + c)] * x[size_t((s * in + c) * positions + i)];
        y[size_t((s * out + o) * positions + i)] = acc;
      }
  return y;
}

AttentionReference reference_attention(const Tensor& x, const std::vector<Tensor>& params) {
  std::vector<std::vector<double>> p;
  for (const Tensor& t : params) p.push_back(to_doubles(t));
  const double gamma = p[0][0];
  const int64_t b = x.size(0), c = x.size(1), c8 = c / 8, n = x.numel() / (b * c);
  const std::vector<double> xd = to_doubles(x);
  AttentionReference r;
  r.y.resize(xd.size());
  for (int64_t s = 0; s < b; ++s) {
    const std::vector<double> xs(xd.begin() + s * c * n, xd.begin() + (s + 1) * c * n);
    const std::vector<double> q = reference_pointwise_conv3d(xs, p[1], p[2], 1, c, c8, n);
    const std::vector<double> k = reference_pointwise_conv3d(xs, p[3], p[4], 1, c, c8, n);
    const std::vector<double> v = reference_pointwise_conv3d(xs, p[5], p[6], 1, c, c, n);
    std::vector<double> scores(size_t(n * n));  // S = Q^T K, unscaled
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t d = 0; d < c8; ++d) acc += q[size_t(d * n + i)] * k[size_t(d * n + j)];
        scores[size_t(i * n + j)] = acc;
      }
    const std::vector<double> a = reference_softmax(scores, n, n);
    r.attention.insert(r.attention.end(), a.begin(), a.end());
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < n; ++i) {
        double o = 0;  // O = V A^T
        for (int64_t j = 0; j < n; ++j) o += v[size_t(ch * n + j)] * a[size_t(i * n + j)];
        r.y[size_t(s * c * n + ch * n + i)] = gamma * o + xs[size_t(ch * n + i)];
      }
  }
  return r;
}

std::vector<Tensor> parameter_values(nn::Module& module) {
  std::vector<Tensor> values;
  for (auto& [name, p] : module.named_parameters()) values.push_back(p->value);
  return values;
}

}  // namespace gridnn::test
