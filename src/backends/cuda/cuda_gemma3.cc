// The gemma3 forward pass on the GPU (the CPU one is models/gemma3.cc): embeddings scaled by
// sqrt(n_embd), RMSNorm on each head of Q and K, post-norms on the attention and feed-forward
// outputs, GELU(tanh)-gated feed-forward, and sliding-window layers with their own RoPE base.
// K/V rows of the sliding layers stay in the same cache as the global ones; the window is a mask
// of the attention kernel, so commits and rollbacks need nothing special.
#include <cmath>

#include "backends/cuda/device_pass.h"
#include "models/gemma3.h"

namespace salvo::cuda {
namespace {

struct Gemma3DeviceLayer {
  const float* attn_norm = nullptr;
  DeviceLinear wq, wk, wv, wo;
  const float* q_norm = nullptr;  // [head_dim]
  const float* k_norm = nullptr;
  const float* post_attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  DeviceGatedFfn ffn;
  DeviceLinear ffn_down;
  const float* post_ffn_norm = nullptr;
};

class Gemma3Pass : public DevicePass {
 public:
  explicit Gemma3Pass(const ModelConfig& config) : c_(config) {}

  Status upload(const Gemma3Model& cpu, DeviceWeights& w) {
    const int hd = c_.head_dim;
    SALVO_RETURN_IF_ERROR(w.upload_matrix(cpu.token_embd(), nullptr, &token_embd_));
    SALVO_RETURN_IF_ERROR(w.upload_vector(cpu.output_norm(), c_.n_embd, &output_norm_));
    for (const Gemma3Layer& l : cpu.layers()) {
      Gemma3DeviceLayer& d = layers_.emplace_back();
      SALVO_RETURN_IF_ERROR(w.upload_vector(l.attn_norm, c_.n_embd, &d.attn_norm));
      SALVO_RETURN_IF_ERROR(w.upload_matrix(l.wq.weight, l.wq.bias, &d.wq, true));
      SALVO_RETURN_IF_ERROR(w.upload_matrix(l.wk.weight, l.wk.bias, &d.wk, true));
      SALVO_RETURN_IF_ERROR(w.upload_matrix(l.wv.weight, l.wv.bias, &d.wv, true));
      SALVO_RETURN_IF_ERROR(w.upload_vector(l.q_norm, hd, &d.q_norm));
      SALVO_RETURN_IF_ERROR(w.upload_vector(l.k_norm, hd, &d.k_norm));
      SALVO_RETURN_IF_ERROR(w.upload_matrix(l.wo.weight, l.wo.bias, &d.wo, true));
      SALVO_RETURN_IF_ERROR(w.upload_vector(l.post_attn_norm, c_.n_embd, &d.post_attn_norm));
      SALVO_RETURN_IF_ERROR(w.upload_vector(l.ffn_norm, c_.n_embd, &d.ffn_norm));
      SALVO_RETURN_IF_ERROR(w.upload_matrix(l.ffn_down.weight, nullptr, &d.ffn_down, true));
      SALVO_RETURN_IF_ERROR(w.upload_gated(l.ffn_gate.weight, l.ffn_up.weight,
                                           variant_of(d.ffn_down.shape) == MatmulVariant::kHalf,
                                           &d.ffn));
      SALVO_RETURN_IF_ERROR(w.upload_vector(l.post_ffn_norm, c_.n_embd, &d.post_ffn_norm));
    }
    return Status();
  }

  void enqueue(const PassBuffers& b, cudaStream_t stream) const override {
    const int n = b.n;
    const float eps = c_.rms_eps;
    embed(token_embd_.shape.type, token_embd_.shape.w, c_.n_embd, b.tokens, n, b.x, stream);
    scale(b.x, std::sqrt(static_cast<float>(c_.n_embd)), static_cast<int64_t>(n) * c_.n_embd,
          stream);
    for (int il = 0; il < c_.n_layer; ++il) {
      const Gemma3DeviceLayer& l = layers_[il];
      const bool sliding = c_.layer_sliding[il] != 0;
      // Attention block. h holds the previous block's post-normed output: its residual add is
      // fused into this norm.
      const Q8Out hq = q8_for(b.xq, n, {&l.wq, &l.wk, &l.wv});
      rms_norm_q8(b.x, il == 0 ? nullptr : b.h, l.attn_norm, b.h, n, c_.n_embd, eps, hq, stream);
      linears({{&l.wq, b.q}, {&l.wk, b.k}, {&l.wv, b.v}}, b.h, as_rows(hq), n, stream);
      // Heads are contiguous, so a per-head norm is a norm over [n * heads, head_dim] rows.
      rms_norm(b.q, l.q_norm, b.q, static_cast<int64_t>(n) * c_.n_head, c_.head_dim, eps, stream);
      rms_norm(b.k, l.k_norm, b.k, static_cast<int64_t>(n) * c_.n_head_kv, c_.head_dim, eps,
               stream);
      rope_store_kv({.batch = b.batch,
                     .kv = b.kv[il],
                     .q = b.q,
                     .k = b.k,
                     .v = b.v,
                     .n_head = c_.n_head,
                     .n_head_kv = c_.n_head_kv,
                     .head_dim = c_.head_dim,
                     .n_rot = c_.n_rot,
                     .base = sliding ? c_.rope_base_local : c_.rope_base,
                     .mode = c_.rope_mode},
                    stream);
      const Q8Out aq = c_.head_dim_v % 32 == 0 ? q8_for(b.xq, n, {&l.wo}) : Q8Out{};
      attention({.batch = b.batch,
                 .kv = b.kv[il],
                 .q = b.q,
                 .out = b.attn,
                 .n_head = c_.n_head,
                 .n_head_kv = c_.n_head_kv,
                 .head_dim = c_.head_dim,
                 .head_dim_v = c_.head_dim_v,
                 .scale = c_.attn_scale,
                 .window = sliding ? c_.sliding_window : 0,
                 .partial = b.attn_partial,
                 .split_counts = b.attn_counts,
                 .out_q8 = aq},
                stream);
      if (aq.q != nullptr || aq.h != nullptr) {
        linears({{&l.wo, b.h}}, b.attn, as_rows(aq), n, stream);
      } else {
        linear(l.wo, b.attn, n, b.h, b.xq, stream);
      }
      rms_norm(b.h, l.post_attn_norm, b.h, n, c_.n_embd, eps, stream);
      // Feed-forward block (GELU-gated), after x += h.
      const Q8Out fq = q8_for_ffn(b.xq, n, l.ffn);
      rms_norm_q8(b.x, b.h, l.ffn_norm, b.h, n, c_.n_embd, eps, fq, stream);
      const Q8Out gq = q8_out_for(b.xq, n, {&l.ffn_down});
      gated_ffn(GatedAct::kGeluTanh, l.ffn, b.gate, b.up, b.h, as_rows(fq), n, c_.n_ff, gq, stream);
      linears({{&l.ffn_down, b.h}}, b.gate, as_rows(gq), n, stream);
      rms_norm(b.h, l.post_ffn_norm, b.h, n, c_.n_embd, eps, stream);
    }
    add(b.x, b.h, static_cast<int64_t>(n) * c_.n_embd, stream);  // the last block's residual
    // Only the rows whose logits are read go through the LM head (the embedding table, tied).
    gather_rows(b.x, b.logit_rows, b.n_logits, c_.n_embd, b.logit_x, stream);
    rms_norm(b.logit_x, output_norm_, b.logit_x, b.n_logits, c_.n_embd, eps, stream);
    linear(token_embd_, b.logit_x, b.n_logits, b.logits, b.xq, stream);
  }

 private:
  const ModelConfig c_;
  DeviceLinear token_embd_;
  const float* output_norm_ = nullptr;
  std::vector<Gemma3DeviceLayer> layers_;
};

}  // namespace

Expected<std::unique_ptr<DevicePass>> upload_gemma3(const Gemma3Model& cpu,
                                                    DeviceWeights& weights) {
  auto pass = std::make_unique<Gemma3Pass>(cpu.config());
  SALVO_RETURN_IF_ERROR(pass->upload(cpu, weights));
  return std::unique_ptr<DevicePass>(std::move(pass));
}

}  // namespace salvo::cuda
