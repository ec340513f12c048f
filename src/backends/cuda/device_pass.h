// What CudaModel shares with the forward pass of each architecture: the device copies of the
// weights, the activation buffers of one pass, and the interface a pass implements. CudaModel
// (cuda_model.cc) owns the stream, the buffers, the KV mirror and the graphs; an architecture
// (cuda_gemma3.cc) uploads its weights and enqueues its kernels.
#pragma once

#include <cuda_runtime.h>

#include <initializer_list>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "backends/cuda/device_memory.h"
#include "backends/cuda/kernels.h"
#include "models/model.h"
#include "quant/types.h"
#include "util/check.h"

namespace salvo {
class Gemma3Model;
}

namespace salvo::cuda {

struct DeviceLinear {
  MatmulParams shape;  // type, w, n_out, n_in, bias (x, y, n_rows are set per call)
};

// The gate and up projections of a gated feed-forward: one kHalf matrix that applies the
// activation in its own launch (fused.shape.w set; DeviceWeights::upload_gated), else the two.
struct DeviceGatedFfn {
  DeviceLinear gate, up, fused;
};

// Room for the converted forms of a pass's matmul inputs ([n, width] int8 values and their
// Q8Meta; kHalf's fp16 fragments of n rounded up to 8 rows, where a matrix takes kHalf).
struct Q8Buffer {
  int8_t* q = nullptr;
  Q8Meta* meta = nullptr;
  uint16_t* h = nullptr;
  // A second fp16 fragment buffer for the output of an op that still reads h (gate/up with the
  // activation: its blocks read the input's fragments while others write the product's).
  uint16_t* h_out = nullptr;
};

// y = x W^T (+ bias) for n rows on `stream`. When the weight's kernel reads int8 activations,
// x is quantized into `xq` first (the pass's own buffer: a captured graph must not point at
// memory that another caller may move).
inline void linear(const DeviceLinear& l, const float* x, int n, float* y, const Q8Buffer& xq,
                   cudaStream_t stream) {
  MatmulParams p = l.shape;
  p.x = x;
  p.n_rows = n;
  p.y = y;
  const MatmulVariant v = variant_of(p);
  if (variant_takes_q8(v)) {
    quantize_rows(x, n, p.n_in, xq.q, xq.meta, n, stream);
    p.xq = {xq.q, xq.meta, n};
  } else if (v == MatmulVariant::kHalf && xq.h != nullptr) {  // else matmul() converts x
    half_frags(x, n, p.n_in, xq.h, stream);
    p.xq.h = xq.h;
  }
  matmul(p, stream);
}

// Where the op producing the input of `users` writes its converted forms: the int8 form into
// `xq` (room for n rows) when any of them takes int8 activations, the fp16 fragments when any
// takes kHalf; else nowhere.
inline Q8Out q8_for(const Q8Buffer& xq, int n, std::initializer_list<const DeviceLinear*> users) {
  Q8Out out;
  for (const DeviceLinear* l : users) {
    const MatmulVariant v = variant_of(l->shape);
    if (variant_takes_q8(v)) out = {xq.q, xq.meta, n, out.h};
    if (v == MatmulVariant::kHalf) {
      SALVO_CHECK_MSG(xq.h != nullptr, "q8_for: a kHalf matrix without room for fp16 activations");
      out.h = xq.h;
    }
  }
  return out;
}
// q8_for's output with its fp16 fragments in xq.h_out (when it has one).
inline Q8Out q8_out_for(const Q8Buffer& xq, int n,
                        std::initializer_list<const DeviceLinear*> users) {
  Q8Out out = q8_for(xq, n, users);
  if (out.h != nullptr && xq.h_out != nullptr) out.h = xq.h_out;
  return out;
}
// q8_for the gate/up matrices of a feed-forward.
inline Q8Out q8_for_ffn(const Q8Buffer& xq, int n, const DeviceGatedFfn& f) {
  return f.fused.shape.w != nullptr ? q8_for(xq, n, {&f.fused}) : q8_for(xq, n, {&f.gate, &f.up});
}
inline Q8Rows as_rows(const Q8Out& q) { return {q.q, q.meta, q.meta_stride, q.h}; }

// Whether a and b can share a launch: one type, or kHalf matrices of any of its types over the
// same fp16 input (matmul_half_group).
inline bool one_launch(const MatmulParams& a, const MatmulParams& b) {
  return a.type == b.type || (half_shares_launch(a, b) && a.xq.h == b.xq.h);
}
// Matmuls over one input in as few launches as their types allow: consecutive ones that
// one_launch allows share a launch (Q/K/V, gate/up).
inline void matmul_runs(MatmulParams* parts, int n, cudaStream_t stream) {
  int start = 0;
  for (int i = 1; i <= n; ++i) {
    if (i == n || !one_launch(parts[i], parts[start])) {
      matmul_group(parts + start, i - start, stream);
      start = i;
    }
  }
}
inline MatmulParams linear_call(const DeviceLinear& l, const float* x, const Q8Rows& xq, int n,
                                float* y) {
  MatmulParams p = l.shape;
  p.x = x;
  p.xq = xq;
  p.n_rows = n;
  p.y = y;
  return p;
}

// Linears over one input x [n, n_in] whose int8 form (where their kernels read one) a fused op
// already wrote to xq (at most three), in as few launches as their types allow.
inline void linears(std::initializer_list<std::pair<const DeviceLinear*, float*>> outs,
                    const float* x, const Q8Rows& xq, int n, cudaStream_t stream) {
  SALVO_CHECK(outs.size() <= 3);
  MatmulParams parts[3];
  int count = 0;
  for (const auto& [l, y] : outs) parts[count++] = linear_call(*l, x, xq, n, y);
  matmul_runs(parts, count, stream);
}

// gate = act(x gate^T) * (x up^T) [n, n_ff] with its int8 / fp16 form (out) for the down
// projection: in the gate/up launch itself where f is fused, else the two matrices' launch and
// gated_act_q8. u is scratch.
inline void gated_ffn(GatedAct act, const DeviceGatedFfn& f, float* g, float* u, const float* x,
                      const Q8Rows& xq, int n, int n_ff, const Q8Out& out, cudaStream_t stream) {
  if (f.fused.shape.w != nullptr) {
    // The down projection reads only the fp16 fragments (upload_gated checked its type), which
    // must not be the buffer this launch reads.
    SALVO_CHECK(out.q == nullptr && out.h != nullptr && out.h != xq.h);
    MatmulParams p = f.fused.shape;
    p.x = x;
    p.xq = xq;
    p.n_rows = n;
    p.y = g;
    p.gated_act = act;
    p.gated_h = out.h;
    matmul(p, stream);
    return;
  }
  linears({{&f.gate, g}, {&f.up, u}}, x, xq, n, stream);
  gated_act_q8(act, g, u, n, n_ff, out, stream);
}

// Q/K/V whose kHalf epilogues apply RoPE and store K/V (HalfRole; Q's and K's rows in
// rope_row_order), in as few launches as their types allow, like linears.
struct RopeLinear {
  const DeviceLinear* l;
  float* y;
  HalfRole role;
};
inline void rope_linears(std::initializer_list<RopeLinear> outs, const float* x, const Q8Rows& xq,
                         int n, const RopeEpilogue& re, cudaStream_t stream) {
  SALVO_CHECK(outs.size() <= 3);
  MatmulParams parts[3];
  int count = 0;
  for (const RopeLinear& o : outs) {
    MatmulParams& p = parts[count++];
    p = linear_call(*o.l, x, xq, n, o.y);
    p.role = o.role;
    p.rope = re;
  }
  matmul_runs(parts, count, stream);
}

// The device copies of one model's weights, uploaded once in their GGUF formats.
class DeviceWeights {
 public:
  Status upload_tensor(const void* host, size_t bytes, const void** device);
  Status upload_vector(const float* host, int64_t n, const float** device);
  // Fails for a type or width the matmul kernels do not read. repack: in the layout the type's
  // kernel reads (kHalf's packing, or tile_weights()'), so only the matmuls may read the matrix.
  Status upload_matrix(const WeightView& w, const float* bias, DeviceLinear* out,
                       bool repack = false);
  // gate and up as one gated kHalf matrix where both take kHalf with one type and shape and the
  // down projection reads only fp16 (down_half), unless SALVO_CUDA_FUSED_ACT=0; else each as
  // upload_matrix(repack) does.
  Status upload_gated(const WeightView& gate, const WeightView& up, bool down_half,
                      DeviceGatedFfn* out);

 private:
  std::vector<DeviceBuffer> buffers_;
};

// The device arrays of one pass of n rows (n_logits of them want logits), sized by CudaModel
// from the config: activations are row-major float32.
struct PassBuffers {
  int n = 0, n_logits = 0;
  const int32_t* tokens = nullptr;      // [n]
  const int32_t* positions = nullptr;   // [n]
  const int32_t* logit_rows = nullptr;  // [n_logits] batch rows that want logits
  BatchView batch;
  std::span<const KvLayerView> kv;                 // [n_layer] the device cache of each layer
  float *x = nullptr, *h = nullptr;                // [n, n_embd]
  float *q = nullptr, *k = nullptr, *v = nullptr;  // [n, q_width], [n, kv_width], [n, v_width]
  float* attn = nullptr;                           // [n, n_head * head_dim_v]
  float *gate = nullptr, *up = nullptr;            // [n, n_ff]
  float* attn_partial = nullptr;                   // AttentionParams::partial
  int* attn_counts = nullptr;                      // AttentionParams::split_counts
  float* logit_x = nullptr;                        // [n_logits, n_embd]
  float* logits = nullptr;                         // [n_logits, n_vocab]
  Q8Buffer xq;  // [n, max(n_embd, n_head * head_dim_v, n_ff)] int8 matmul inputs
};

// The forward pass of one architecture: kernels only, on `stream`, no host synchronisation
// (CudaModel captures them into a CUDA graph per batch shape). It reads b.tokens and writes
// b.logits; the other buffers are its scratch.
class DevicePass {
 public:
  virtual ~DevicePass() = default;
  virtual void enqueue(const PassBuffers& b, cudaStream_t stream) const = 0;
};

// The gemma3 pass (cuda_gemma3.cc), its weights uploaded into `weights`.
Expected<std::unique_ptr<DevicePass>> upload_gemma3(const Gemma3Model& cpu, DeviceWeights& weights);

}  // namespace salvo::cuda
