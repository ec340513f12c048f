// The operations the architectures are written in. Activations are row-major float32
// [n_rows, width]; weights stay in their GGUF formats (see backends/cpu/matmul.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cpu/matmul.h"
#include "models/config.h"
#include "models/kv_cache.h"
#include "models/token_batch.h"
#include "util/thread_pool.h"

namespace salvo::ops {

// out[r] = x[r] / rms(x[r]) * w; out may alias x.
void rms_norm(const float* x, const float* w, float* out, int64_t n_rows, int dim, float eps);
// RMSNorm of each head_dim-wide slice of each row, in place (Gemma 3's q/k norms).
void rms_norm_heads(float* x, const float* w, int64_t n_rows, int n_heads, int head_dim, float eps);
// Rotary embedding in place on [n_rows, n_heads * head_dim]; the first n_rot dims of each head.
void rope(float* x, const int32_t* positions, int64_t n_rows, int n_heads, int head_dim, int n_rot,
          float base, RopeMode mode);
void add_bias(float* x, const float* bias, int64_t n_rows, int dim);
void add(float* x, const float* y, size_t n);  // x += y
void scale(float* x, float s, size_t n);
void silu_mul(float* gate, const float* up, size_t n);       // gate = silu(gate) * up
void gelu_tanh_mul(float* gate, const float* up, size_t n);  // gate = gelu_tanh(gate) * up
// out[i] = table row tokens[i], dequantized: [n, table.n_in].
void embed(const WeightView& table, const int32_t* tokens, int64_t n, float* out);
// Index of the largest of x[0..n) with ties to the lowest index, the greedy rule every backend
// follows (NaNs are skipped); -1 when every element is -inf or NaN.
int32_t argmax(const float* x, int64_t n);
// The k largest of x[0..n) (0 < k <= n) in rank order: larger first, the lower index first among
// equal values (-0 equals +0), NaN below everything. Their indices go to ids[k] and values to
// values[k]. Model::forward_top's rule; a device backend selects the same set (in any order).
void top_logits(const float* x, int64_t n, int k, int32_t* ids, float* values);

// Where each batch row's K/V sit: the slot behind the committed rows of its sequence, in batch
// order, and the batch rows of each sequence (for the tree mask).
struct BatchLayout {
  std::vector<int32_t> slot;                   // [n_rows]
  std::vector<std::vector<int32_t>> seq_rows;  // [n_seq] batch rows of that sequence, increasing
  void build(const TokenBatch& batch, const KvCache& kv);
};

struct AttentionArgs {
  const TokenBatch* batch = nullptr;
  const BatchLayout* layout = nullptr;
  const KvCache* kv = nullptr;
  int layer = 0;
  const float* q = nullptr;  // [n_rows, n_head * head_dim], RoPE applied
  float* out = nullptr;      // [n_rows, n_head * head_dim_v]
  int n_head = 0, n_head_kv = 0, head_dim = 0, head_dim_v = 0;
  float scale = 1.0f;
  int window = 0;  // sliding window in positions; 0 = unlimited
};

// Softmax attention of every row over the committed rows of its sequence plus its ancestors in
// the batch (TokenBatch's tree mask). K/V of the batch rows must already be in the cache.
void attention(ThreadPool& pool, const AttentionArgs& args);

}  // namespace salvo::ops
