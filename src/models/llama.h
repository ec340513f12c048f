// The llama decoder (pre-norm, RoPE, grouped-query attention, SwiGLU). qwen2 is the same
// network with biases on Q/K/V and NEOX-style RoPE, so qwen2.cc configures this class.
#pragma once

#include <memory>
#include <vector>

#include "models/layers.h"
#include "models/model.h"

namespace salvo {

struct LlamaLayer {
  const float* attn_norm = nullptr;
  Linear wq, wk, wv, wo;
  const float* ffn_norm = nullptr;
  Linear ffn_gate, ffn_up, ffn_down;
};

class LlamaModel : public Model {
 public:
  // qkv_bias: qwen2's Q/K/V biases.
  static Expected<std::unique_ptr<Model>> load(std::unique_ptr<GgufFile> gguf, bool qkv_bias,
                                               RopeMode rope_mode);

  // The bound weights, for backends that upload them (views into the memory map).
  const WeightView& token_embd() const { return token_embd_; }
  const WeightView& output() const { return output_; }
  const float* output_norm() const { return output_norm_; }
  const std::vector<LlamaLayer>& layers() const { return layers_; }
  const WeightView* embedding_table() const override { return &token_embd_; }
  const WeightView* lm_head() const override { return &output_; }

 protected:
  void forward_layers(ThreadPool& pool, const TokenBatch& batch, KvCache& kv,
                      std::vector<float>& logits, float* hidden) override;

 private:
  WeightView token_embd_;
  WeightView output_;
  const float* output_norm_ = nullptr;
  std::vector<LlamaLayer> layers_;
  Scratch s_;
};

}  // namespace salvo
