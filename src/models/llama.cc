#include "models/llama.h"

#include <string>

#include "models/architectures.h"

namespace salvo {

Expected<std::unique_ptr<Model>> LlamaModel::load(std::unique_ptr<GgufFile> gguf, bool qkv_bias,
                                                  RopeMode rope_mode) {
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  ModelConfig& c = m->config_;
  c.arch = gguf->get_string_or("general.architecture", "llama");
  SALVO_RETURN_IF_ERROR(read_common_config(*gguf, c));
  c.rope_mode = rope_mode;

  TensorBinder bind(*gguf, &m->packed_);
  m->token_embd_ = bind.table("token_embd.weight", c.n_embd, c.n_vocab);
  m->output_norm_ = bind.vector("output_norm.weight", c.n_embd);
  // Small models tie the LM head to the embedding table.
  m->output_ = bind.has("output.weight") ? bind.matrix("output.weight", c.n_embd, c.n_vocab)
                                         : bind.packed_copy(m->token_embd_);
  // Tied: embedding rows come from the packed copy too (ops::embed), so the mapped table,
  // released after packing, is not faulted back in.
  if (m->output_.data == m->token_embd_.data) m->token_embd_.packed = m->output_.packed;
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LlamaLayer& l = m->layers_.emplace_back();
    l.attn_norm = bind.vector(p + "attn_norm.weight", c.n_embd);
    l.wq = bind.linear(p + "attn_q", c.n_embd, c.q_width(), qkv_bias);
    l.wk = bind.linear(p + "attn_k", c.n_embd, c.kv_width(), qkv_bias);
    l.wv = bind.linear(p + "attn_v", c.n_embd, c.v_width(), qkv_bias);
    l.wo = bind.linear(p + "attn_output", c.n_head * c.head_dim_v, c.n_embd);
    l.ffn_norm = bind.vector(p + "ffn_norm.weight", c.n_embd);
    l.ffn_gate = bind.linear(p + "ffn_gate", c.n_embd, c.n_ff);
    l.ffn_up = bind.linear(p + "ffn_up", c.n_embd, c.n_ff);
    l.ffn_down = bind.linear(p + "ffn_down", c.n_ff, c.n_embd);
  }
  SALVO_RETURN_IF_ERROR(bind.status());
  m->weight_bytes_per_pass_ = bind.bytes_bound();
  if (m->output_.data != m->token_embd_.data) {
    m->weight_bytes_per_pass_ -= row_bytes(m->token_embd_.type, c.n_embd) * c.n_vocab;
  }
  m->gguf_ = std::move(gguf);
  return std::unique_ptr<Model>(std::move(m));
}

void LlamaModel::forward_layers(ThreadPool& pool, const TokenBatch& batch, KvCache& kv,
                                std::vector<float>& logits, float* hidden) {
  const ModelConfig& c = config_;
  const int64_t n = batch.size();
  Scratch& s = s_;
  s.prepare(c, batch, kv);

  ops::embed(token_embd_, batch.tokens.data(), n, s.x.data());  // x: [n, n_embd]
  for (int il = 0; il < c.n_layer; ++il) {
    const LlamaLayer& l = layers_[il];
    // Attention block.
    ops::rms_norm(s.x.data(), l.attn_norm, s.h.data(), n, c.n_embd, c.rms_eps);
    // q: [n, n_head * head_dim], k and v: [n, n_head_kv * head_dim].
    linear_forward3(pool, l.wq, s.q.data(), l.wk, s.k.data(), l.wv, s.v.data(), s.h.data(), n,
                    s.matmul);
    rope_and_attend(pool, c, il, batch, kv, s, c.rope_base, 0);
    linear_forward(pool, l.wo, s.attn.data(), n, s.h.data(), s.matmul);
    ops::add(s.x.data(), s.h.data(), n * c.n_embd);
    // Feed-forward block (SwiGLU).
    ops::rms_norm(s.x.data(), l.ffn_norm, s.h.data(), n, c.n_embd, c.rms_eps);
    gated_ffn(pool, l.ffn_gate, l.ffn_up, l.ffn_down, GatedAct::kSilu, n, s);
    ops::add(s.x.data(), s.h.data(), n * c.n_embd);
    capture_hidden(batch, il, s.x.data(), c.n_embd, hidden);
  }
  output_logits(pool, batch, s.x.data(), c.n_embd, output_norm_, c.rms_eps, output_, s, logits);
}

Expected<std::unique_ptr<Model>> load_llama(std::unique_ptr<GgufFile> gguf) {
  return LlamaModel::load(std::move(gguf), /*qkv_bias=*/false, RopeMode::kRopeNorm);
}

}  // namespace salvo
