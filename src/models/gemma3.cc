// gemma3 (Gemma 3): pre- and post-norms around attention and the feed-forward block, RMSNorm on
// each head of Q and K, GELU(tanh)-gated feed-forward, embeddings scaled by sqrt(n_embd), and
// five sliding-window layers (local RoPE base 10000) for every global one. GGUF norm weights
// already include Gemma's "+1".
#include "models/gemma3.h"

#include <cmath>
#include <string>

#include "models/architectures.h"

namespace salvo {
namespace {

constexpr int kSlidingPattern = 6;          // every 6th layer is global
constexpr float kLocalRopeBase = 10000.0f;  // fixed for the sliding-window layers

}  // namespace

Expected<std::unique_ptr<Model>> Gemma3Model::load(std::unique_ptr<GgufFile> gguf) {
  std::unique_ptr<Gemma3Model> m(new Gemma3Model());
  ModelConfig& c = m->config_;
  c.arch = "gemma3";
  SALVO_RETURN_IF_ERROR(read_common_config(*gguf, c));
  c.rope_mode = RopeMode::kRopeNeox;
  c.rope_base_local = kLocalRopeBase;
  c.sliding_window = static_cast<int>(gguf->get_int_or("gemma3.attention.sliding_window", 0));
  for (int i = 0; i < c.n_layer; ++i) {
    c.layer_sliding[i] = c.sliding_window > 0 && (i + 1) % kSlidingPattern != 0;
  }

  TensorBinder bind(*gguf, &m->packed_);
  m->token_embd_ = bind.packed_copy(bind.table("token_embd.weight", c.n_embd, c.n_vocab));
  m->output_norm_ = bind.vector("output_norm.weight", c.n_embd);
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    Gemma3Layer& l = m->layers_.emplace_back();
    l.attn_norm = bind.vector(p + "attn_norm.weight", c.n_embd);
    l.wq = bind.linear(p + "attn_q", c.n_embd, c.q_width());
    l.wk = bind.linear(p + "attn_k", c.n_embd, c.kv_width());
    l.wv = bind.linear(p + "attn_v", c.n_embd, c.v_width());
    l.q_norm = bind.vector(p + "attn_q_norm.weight", c.head_dim);
    l.k_norm = bind.vector(p + "attn_k_norm.weight", c.head_dim);
    l.wo = bind.linear(p + "attn_output", c.n_head * c.head_dim_v, c.n_embd);
    l.post_attn_norm = bind.vector(p + "post_attention_norm.weight", c.n_embd);
    l.ffn_norm = bind.vector(p + "ffn_norm.weight", c.n_embd);
    l.ffn_gate = bind.linear(p + "ffn_gate", c.n_embd, c.n_ff);
    l.ffn_up = bind.linear(p + "ffn_up", c.n_embd, c.n_ff);
    l.ffn_down = bind.linear(p + "ffn_down", c.n_ff, c.n_embd);
    l.post_ffn_norm = bind.vector(p + "post_ffw_norm.weight", c.n_embd);
  }
  SALVO_RETURN_IF_ERROR(bind.status());
  m->weight_bytes_per_pass_ = bind.bytes_bound();  // the tied embedding is the LM head
  m->gguf_ = std::move(gguf);
  return std::unique_ptr<Model>(std::move(m));
}

void Gemma3Model::forward_layers(ThreadPool& pool, const TokenBatch& batch, KvCache& kv,
                                 std::vector<float>& logits, float* hidden) {
  const ModelConfig& c = config_;
  const int64_t n = batch.size();
  Scratch& s = s_;
  s.prepare(c, batch, kv);

  ops::embed(token_embd_, batch.tokens.data(), n, s.x.data());  // x: [n, n_embd]
  ops::scale(s.x.data(), std::sqrt(static_cast<float>(c.n_embd)), n * c.n_embd);
  for (int il = 0; il < c.n_layer; ++il) {
    const Gemma3Layer& l = layers_[il];
    const bool sliding = c.layer_sliding[il];
    const float rope_base = sliding ? c.rope_base_local : c.rope_base;
    // Attention block.
    ops::rms_norm(s.x.data(), l.attn_norm, s.h.data(), n, c.n_embd, c.rms_eps);
    // q: [n, n_head * head_dim], k and v: [n, n_head_kv * head_dim].
    linear_forward3(pool, l.wq, s.q.data(), l.wk, s.k.data(), l.wv, s.v.data(), s.h.data(), n,
                    s.matmul);
    ops::rms_norm_heads(s.q.data(), l.q_norm, n, c.n_head, c.head_dim, c.rms_eps);
    ops::rms_norm_heads(s.k.data(), l.k_norm, n, c.n_head_kv, c.head_dim, c.rms_eps);
    rope_and_attend(pool, c, il, batch, kv, s, rope_base, sliding ? c.sliding_window : 0);
    linear_forward(pool, l.wo, s.attn.data(), n, s.h.data(), s.matmul);
    ops::rms_norm(s.h.data(), l.post_attn_norm, s.h.data(), n, c.n_embd, c.rms_eps);
    ops::add(s.x.data(), s.h.data(), n * c.n_embd);
    // Feed-forward block (GELU-gated).
    ops::rms_norm(s.x.data(), l.ffn_norm, s.h.data(), n, c.n_embd, c.rms_eps);
    gated_ffn(pool, l.ffn_gate, l.ffn_up, l.ffn_down, GatedAct::kGeluTanh, n, s);
    ops::rms_norm(s.h.data(), l.post_ffn_norm, s.h.data(), n, c.n_embd, c.rms_eps);
    ops::add(s.x.data(), s.h.data(), n * c.n_embd);
    capture_hidden(batch, il, s.x.data(), c.n_embd, hidden);
  }
  output_logits(pool, batch, s.x.data(), c.n_embd, output_norm_, c.rms_eps, token_embd_, s, logits);
}

Expected<std::unique_ptr<Model>> load_gemma3(std::unique_ptr<GgufFile> gguf) {
  return Gemma3Model::load(std::move(gguf));
}

}  // namespace salvo
