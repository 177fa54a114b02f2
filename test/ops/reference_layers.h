// Double-precision references of the softmax, cross-entropy, dropout, Linear and attention
// layers and their kernels, shared by the op harness's cases (test/ops/cases_*.cpp) and the
// layers' own tests (test/models/layers): the textbook loops, written once, independent of
// the kernels under test. Matrices are row-major.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/dropout.h"
#include "models/layers/module.h"

namespace gridnn::test {

// Softmax of each row of x [rows, cols] (the row max subtracted first).
std::vector<double> reference_softmax(const std::vector<double>& x, int64_t rows, int64_t cols);
// dx = y * (dy - sum(dy * y)) per row, for y the softmax output.
std::vector<double> reference_softmax_backward(const std::vector<double>& y, const std::vector<double>& dy,
                                               int64_t rows, int64_t cols);

// Softmax cross-entropy of logits [n, classes] with labels [n].
struct CrossEntropyReference {
  std::vector<double> probs;     // softmax of each row
  std::vector<double> row_loss;  // logsumexp(row) - row[label]
  double sum() const;
  double mean() const { return sum() / double(row_loss.size()); }
};
CrossEntropyReference reference_cross_entropy(const std::vector<double>& logits, const std::vector<int64_t>& labels,
                                              int64_t classes);
// dlogits = (probs - onehot(labels)) * scale: the gradient of the mean loss for scale 1 / n.
std::vector<double> reference_cross_entropy_grad(const std::vector<double>& probs, const std::vector<int64_t>& labels,
                                                 int64_t classes, double scale);

// x through the dropout mask of `key`, as an f32 result holds it: element i is kept when
// the Philox uniform of (key.seed, key.stream, (key.step << 40) + key.offset + i) is at
// least p, and a kept element is x * s rounded to float, s the float 1 / (1 - p).
std::vector<double> reference_dropout(const std::vector<double>& x, float p, const ops::DropoutKey& key);

// y = x W^T + b for x [n, in], W [out, in] and b [out] (empty: no bias).
std::vector<double> reference_linear(const std::vector<double>& x, const std::vector<double>& w,
                                     const std::vector<double>& b, int64_t n, int64_t in, int64_t out);

// y_s = W x_s + b 1^T for each sample s of x [batch, in, positions], W [out, in], b [out]
// (nn::PointwiseConv3d with its volume flattened).
std::vector<double> reference_pointwise_conv3d(const std::vector<double>& x, const std::vector<double>& w,
                                               const std::vector<double>& b, int64_t batch, int64_t in, int64_t out,
                                               int64_t positions);

// nn::SelfAttention3d (docs/design.md §5) for x [B, C, D, H, W] and the layer's parameters
// in its order: gamma, query.weight, query.bias, key.weight, key.bias, value.weight,
// value.bias.
struct AttentionReference {
  std::vector<double> y;          // shaped like x
  std::vector<double> attention;  // A [B, N, N], row i the weights of query position i
};
AttentionReference reference_attention(const Tensor& x, const std::vector<Tensor>& params);

// A module's parameter values, in named_parameters() order.
std::vector<Tensor> parameter_values(nn::Module& module);

}  // namespace gridnn::test
