// The shared vocabulary the architectures are written in: tensor binding, linear layers,
// attention and feed-forward blocks over [n_rows, width] float32 activations.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "io/gguf.h"
#include "models/config.h"
#include "models/kv_cache.h"
#include "models/token_batch.h"
#include "ops/ops.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace salvo {

// Owner of the repacked copies of a model's matrices (and of its copied F32 vectors).
using PackedWeights = std::vector<std::unique_ptr<uint8_t[]>>;

struct Linear {
  WeightView weight;
  const float* bias = nullptr;  // [n_out] or null
};

// Finds tensors by name and checks their shapes; collects the first error.
// Matrices whose type has a packed layout (backends/cpu/packed.h) are repacked as they are
// bound, into buffers the model keeps (`packed_store`), and their mapped pages are released.
class TensorBinder {
 public:
  explicit TensorBinder(const GgufFile& gguf, PackedWeights* packed_store = nullptr)
      : gguf_(gguf), packed_store_(packed_store) {}
  // A matrix [n_out, n_in] (GGUF dims {n_in, n_out}), used by matmul.
  WeightView matrix(const std::string& name, int64_t n_in, int64_t n_out);
  // A matrix read by rows (an embedding table): never packed, pages stay mapped.
  WeightView table(const std::string& name, int64_t n_in, int64_t n_out);
  // `view` (a table) also used by matmul (a tied LM head): packed, its pages released (row
  // lookups fault back the pages they touch).
  WeightView packed_copy(const WeightView& view);
  // An F32 vector of n elements (copied into packed_store when there is one).
  const float* vector(const std::string& name, int64_t n);
  Linear linear(const std::string& name, int64_t n_in, int64_t n_out, bool with_bias = false);
  bool has(const std::string& name) const { return gguf_.find_tensor(name) != nullptr; }
  const Status& status() const { return status_; }
  size_t bytes_bound() const { return bytes_bound_; }

 private:
  const GgufTensorInfo* find(const std::string& name);
  WeightView bind_matrix(const std::string& name, int64_t n_in, int64_t n_out);
  const GgufFile& gguf_;
  PackedWeights* packed_store_;
  Status status_;
  size_t bytes_bound_ = 0;
};

// Reusable activation buffers of one forward pass.
struct Scratch {
  std::vector<float> x, h, q, k, v, attn, gate, up, logit_rows;
  ops::BatchLayout layout;
  MatmulScratch matmul;
  // Sizes the buffers for this batch and places its rows in the cache.
  void prepare(const ModelConfig& c, const TokenBatch& batch, const KvCache& kv);
};

// Two or three linears over the same x (gate/up, Q/K/V) through one matmul_multi: the same
// bits as separate linear_forward calls, one activation quantization and one pool pass.
void linear_forward2(ThreadPool& pool, const Linear& l0, float* y0, const Linear& l1, float* y1,
                     const float* x, int64_t n_rows, MatmulScratch& scratch);
void linear_forward3(ThreadPool& pool, const Linear& l0, float* y0, const Linear& l1, float* y1,
                     const Linear& l2, float* y2, const float* x, int64_t n_rows,
                     MatmulScratch& scratch);
// y = x W^T (+ b): [n_rows, n_out]
void linear_forward(ThreadPool& pool, const Linear& l, const float* x, int64_t n_rows, float* y,
                    MatmulScratch& scratch);

// Stores this layer's K/V rows ([n_rows, kv_width] / [n_rows, v_width]) into their suffix slots.
void store_kv(KvCache& kv, int layer, const TokenBatch& batch, const ops::BatchLayout& layout,
              const float* k, const float* v);

// RoPE on the layer's q and k (s.q, s.k), their K/V into the cache, and attention under the
// batch's tree mask into s.attn. window: sliding window in positions, 0 = none.
// Rows of the feed-forward block per pass: it is position-wise, so splitting a prefill chunk
// changes no bits, keeps the gate/up buffers (n_ff wide, the largest of a pass) a quarter of a
// 512-row chunk's, and one layer's FFN weights stay in cache across the passes.
inline constexpr int64_t kFfnRows = 128;

enum class GatedAct { kSilu, kGeluTanh };

// h = down(act(gate(h)) * up(h)) over n rows of s.h, kFfnRows rows at a time.
void gated_ffn(ThreadPool& pool, const Linear& gate, const Linear& up, const Linear& down,
               GatedAct act, int64_t n, Scratch& s);

void rope_and_attend(ThreadPool& pool, const ModelConfig& c, int layer, const TokenBatch& batch,
                     KvCache& kv, Scratch& s, float rope_base, int window);

// Copies x ([n_rows, n_embd], the output of block `layer`) into the columns of `hidden`
// ([n_rows, hidden_layers.size() * n_embd]) of every position where `layer` is listed.
void capture_hidden(const TokenBatch& batch, int layer, const float* x, int n_embd, float* hidden);

// The final norm and LM head on the rows that want logits.
void output_logits(ThreadPool& pool, const TokenBatch& batch, const float* x, int n_embd,
                   const float* norm, float eps, const WeightView& head, Scratch& s,
                   std::vector<float>& logits);

// Common metadata of `<arch>.*` keys.
Status read_common_config(const GgufFile& gguf, ModelConfig& config);

}  // namespace salvo
