#include "ops/ops.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "backends/cpu/packed.h"
#include "ops/logit_order.h"
#include "ops/vec.h"
#include "util/check.h"

namespace salvo::ops {

void rms_norm(const float* x, const float* w, float* out, int64_t n_rows, int dim, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = out + r * dim;
    const float mean_sq = vec::dot(xr, xr, dim) / static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(mean_sq + eps);
    for (int i = 0; i < dim; ++i) yr[i] = xr[i] * inv * w[i];
  }
}

void rms_norm_heads(float* x, const float* w, int64_t n_rows, int n_heads, int head_dim,
                    float eps) {
  rms_norm(x, w, x, n_rows * n_heads, head_dim, eps);
}

void rope(float* x, const int32_t* positions, int64_t n_rows, int n_heads, int head_dim, int n_rot,
          float base, RopeMode mode) {
  // theta_i = pos * base^(-2i/n_rot), built by repeated multiplication in float as ggml does, so
  // both engines round the same way.
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(n_rot));
  std::vector<float> cos_sin(n_rot);
  for (int64_t r = 0; r < n_rows; ++r) {
    float theta = static_cast<float>(positions[r]);
    for (int i = 0; i < n_rot / 2; ++i) {
      cos_sin[2 * i] = std::cos(theta);
      cos_sin[2 * i + 1] = std::sin(theta);
      theta *= theta_scale;
    }
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (r * n_heads + h) * head_dim;
      for (int i = 0; i < n_rot / 2; ++i) {
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const int a = mode == RopeMode::kRopeNorm ? 2 * i : i;
        const int b = mode == RopeMode::kRopeNorm ? 2 * i + 1 : i + n_rot / 2;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  }
}

void add_bias(float* x, const float* bias, int64_t n_rows, int dim) {
  for (int64_t r = 0; r < n_rows; ++r) {
    for (int i = 0; i < dim; ++i) x[r * dim + i] += bias[i];
  }
}

void add(float* x, const float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] += y[i];
}

void scale(float* x, float s, size_t n) {
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

void silu_mul(float* gate, const float* up, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

int32_t argmax(const float* x, int64_t n) {
  float best = -std::numeric_limits<float>::infinity();
  int32_t best_index = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] > best) {
      best = x[i];
      best_index = static_cast<int32_t>(i);
    }
  }
  return best_index;
}

void top_logits(const float* x, int64_t n, int k, int32_t* ids, float* values) {
  SALVO_CHECK(k > 0 && k <= n);
  std::vector<std::pair<uint32_t, int32_t>> keyed(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) keyed[i] = {logit_order_key(x[i]), static_cast<int32_t>(i)};
  const auto ranks_before = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  std::partial_sort(keyed.begin(), keyed.begin() + k, keyed.end(), ranks_before);
  for (int j = 0; j < k; ++j) {
    ids[j] = keyed[j].second;
    values[j] = x[keyed[j].second];
  }
}

void gelu_tanh_mul(float* gate, const float* up, size_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCoef = 0.044715f;
  for (size_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * g * (1.0f + kCoef * g * g))) * up[i];
  }
}

void embed(const WeightView& table, const int32_t* tokens, int64_t n, float* out) {
  const size_t bytes = row_bytes(table.type, table.n_in);
  const auto* base = static_cast<const uint8_t*>(table.data);
  // A table packed for a tied LM head gives its rows from the packed copy: the mapped pages
  // were released after packing, and random tokens would otherwise fault most of them back.
  std::vector<uint8_t> row(table.packed != nullptr ? bytes : 0);
  for (int64_t i = 0; i < n; ++i) {
    SALVO_CHECK(tokens[i] >= 0 && tokens[i] < table.n_out);
    const uint8_t* src = base + bytes * tokens[i];
    if (table.packed != nullptr && cpu::unpack_row(table, tokens[i], row.data())) src = row.data();
    dequantize_row(table.type, src, out + i * table.n_in, table.n_in);
  }
}

void BatchLayout::build(const TokenBatch& batch, const KvCache& kv) {
  slot.resize(batch.size());
  seq_rows.assign(kv.n_seq(), {});
  for (int32_t r = 0; r < batch.size(); ++r) {
    auto& rows = seq_rows[batch.seq_ids[r]];
    slot[r] = kv.committed(batch.seq_ids[r]) + static_cast<int32_t>(rows.size());
    rows.push_back(r);
  }
}

void attention(ThreadPool& pool, const AttentionArgs& a) {
  const TokenBatch& batch = *a.batch;
  const int n_rows = batch.size();
  const int group = a.n_head / a.n_head_kv;
  const int q_stride = a.n_head * a.head_dim;
  const int out_stride = a.n_head * a.head_dim_v;
  pool.parallel_for(static_cast<int64_t>(n_rows) * a.n_head, [&](int, int64_t begin, int64_t end) {
    std::vector<float> scores;
    // Visible slots: the committed range [first, committed) (slot i = position i), then this
    // row's visible suffix slots. Only the few suffix slots are listed, so the per-head work
    // does not grow a list with the context length.
    std::vector<int32_t> suffix;
    for (int64_t job = begin; job < end; ++job) {
      const int row = static_cast<int>(job / a.n_head);
      const int head = static_cast<int>(job % a.n_head);
      const int kv_head = head / group;
      const int seq = batch.seq_ids[row];
      const int32_t pos = batch.positions[row];
      const int committed = a.kv->committed(seq);

      suffix.clear();
      // Committed slot i holds position i.
      const int first_committed = a.window > 0 ? std::max(0, pos - a.window + 1) : 0;
      const int n_committed = std::max(0, committed - first_committed);
      for (int32_t k : a.layout->seq_rows[seq]) {
        if (k > row) break;
        if (row > batch.subtree_end[k]) continue;  // not an ancestor
        if (a.window > 0 && pos - batch.positions[k] >= a.window) continue;
        suffix.push_back(a.layout->slot[k]);
      }

      const float* q = a.q + static_cast<int64_t>(row) * q_stride + head * a.head_dim;
      const size_t n_keys = n_committed + suffix.size();
      auto slot_of = [&](size_t j) {
        return j < static_cast<size_t>(n_committed) ? first_committed + static_cast<int>(j)
                                                    : suffix[j - n_committed];
      };
      scores.resize(n_keys);
      float max_score = -std::numeric_limits<float>::infinity();
      for (size_t j = 0; j < n_keys; ++j) {
        const KvCache::Elem* k = a.kv->key(a.layer, seq, slot_of(j)) + kv_head * a.head_dim;
        scores[j] = vec::dot_f16(q, k, a.head_dim) * a.scale;
        max_score = std::max(max_score, scores[j]);
      }
      float sum = 0.0f;
      for (float& s : scores) {
        s = std::exp(s - max_score);
        sum += s;
      }
      float* out = a.out + static_cast<int64_t>(row) * out_stride + head * a.head_dim_v;
      std::fill(out, out + a.head_dim_v, 0.0f);
      for (size_t j = 0; j < n_keys; ++j) {
        const KvCache::Elem* v = a.kv->value(a.layer, seq, slot_of(j)) + kv_head * a.head_dim_v;
        vec::axpy_f16(scores[j], v, out, a.head_dim_v);
      }
      vec::scale(1.0f / sum, out, a.head_dim_v);
    }
  });
}

}  // namespace salvo::ops
