// CPU backend of kernels/optim.h: loops over the shared element bodies.
#include "kernels/optim.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/parallel_for.h"

namespace gridnn::kernels::cpu {

namespace {

// f(entry, begin, end) over every entry's parameter cut into chunks of at most kChunk
// elements, the chunks split statically over the threads (the same split every run): one
// parallel region for all the parameters.
template <class Entry, class F>
void for_each_chunk(const std::vector<Entry>& tensors, int64_t work_per_item, F&& f) {
  constexpr int64_t kChunk = 16384;
  struct Chunk {
    size_t entry;
    int64_t begin, end;
  };
  std::vector<Chunk> chunks;
  int64_t total = 0;
  for (size_t e = 0; e < tensors.size(); ++e) {
    const int64_t n = tensors[e].param->numel();
    for (int64_t b = 0; b < n; b += kChunk) chunks.push_back({e, b, std::min(n, b + kChunk)});
    total += n;
  }
  if (chunks.empty()) return;
  parallel_for(
      int64_t(chunks.size()),
      [&](int64_t c) {
        const Chunk& k = chunks[size_t(c)];
        f(tensors[k.entry], k.begin, k.end);
      },
      work_per_item * total / int64_t(chunks.size()));
}

}  // namespace

// The chunk loops read the constants from a local copy: through a reference the compiler
// must assume a store to the parameters may change them, reloads them every element and
// does not vectorize the loop.
void sgd_update(const SgdConstants& s, const std::vector<ops::SgdTensors>& tensors) {
  for_each_chunk(tensors, 4, [&s](const ops::SgdTensors& t, int64_t begin, int64_t end) {
    const SgdConstants c = s;
    float* p = t.param->data<float>();
    const float* g = t.grad->data<float>();
    float* buf = c.momentum != 0.0f ? t.momentum_buffer->data<float>() : nullptr;
    for (int64_t i = begin; i < end; ++i) body::sgd_at(c, p, g, buf, i);
  });
}

void adam_update(const AdamConstants& s, const std::vector<ops::AdamTensors>& tensors) {
  for_each_chunk(tensors, 8, [&s](const ops::AdamTensors& t, int64_t begin, int64_t end) {
    const AdamConstants c = s;
    float* p = t.param->data<float>();
    const float* g = t.grad->data<float>();
    float* m = t.exp_avg->data<float>();
    float* v = t.exp_avg_sq->data<float>();
    for (int64_t i = begin; i < end; ++i) body::adam_at(c, p, g, m, v, i);
  });
}

// One parameter: the list form with one entry.
void sgd_update(const SgdConstants& s, Tensor& param, const Tensor& grad, Tensor& momentum_buffer) {
  sgd_update(s, std::vector<ops::SgdTensors>{{&param, &grad, &momentum_buffer}});
}

void adam_update(const AdamConstants& s, Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq) {
  adam_update(s, std::vector<ops::AdamTensors>{{&param, &grad, &exp_avg, &exp_avg_sq}});
}

}  // namespace gridnn::kernels::cpu
