// The Gemma 3 decoder (gemma3.cc): pre- and post-norms around attention and the feed-forward
// block, RMSNorm on each head of Q and K, GELU(tanh)-gated feed-forward, embeddings scaled by
// sqrt(n_embd), sliding-window layers interleaved with global ones (config.layer_sliding).
#pragma once

#include <memory>
#include <vector>

#include "models/layers.h"
#include "models/model.h"

namespace salvo {

struct Gemma3Layer {
  const float* attn_norm = nullptr;
  Linear wq, wk, wv, wo;
  const float* q_norm = nullptr;  // [head_dim], shared by every head
  const float* k_norm = nullptr;
  const float* post_attn_norm = nullptr;
  const float* ffn_norm = nullptr;
  Linear ffn_gate, ffn_up, ffn_down;
  const float* post_ffn_norm = nullptr;
};

class Gemma3Model : public Model {
 public:
  static Expected<std::unique_ptr<Model>> load(std::unique_ptr<GgufFile> gguf);

  // The bound weights, for backends that upload them (views into the memory map). The LM head
  // is the embedding table (tied).
  const WeightView& token_embd() const { return token_embd_; }
  const float* output_norm() const { return output_norm_; }
  const std::vector<Gemma3Layer>& layers() const { return layers_; }

 protected:
  void forward_layers(ThreadPool& pool, const TokenBatch& batch, KvCache& kv,
                      std::vector<float>& logits, float* hidden) override;

 private:
  WeightView token_embd_;
  const float* output_norm_ = nullptr;
  std::vector<Gemma3Layer> layers_;
  Scratch s_;
};

}  // namespace salvo
