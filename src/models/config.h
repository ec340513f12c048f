// Hyper-parameters shared by the decoder-only architectures, read from GGUF metadata.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace salvo {

enum class RopeMode {
  kRopeNorm,  // rotates adjacent pairs (x[2i], x[2i+1]): GGUF llama (weights permuted at
              // conversion)
  kRopeNeox,  // rotates halves (x[i], x[i + d/2]): qwen2, gemma3
};

struct ModelConfig {
  std::string arch;
  std::string name;
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;    // key/query width per head
  int head_dim_v = 0;  // value width per head
  int n_ff = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-6f;
  float rope_base = 10000.0f;
  float rope_base_local = 10000.0f;  // sliding-window layers (gemma3)
  int n_rot = 0;
  RopeMode rope_mode = RopeMode::kRopeNorm;
  float attn_scale = 0.0f;             // softmax scale on q·k
  int sliding_window = 0;              // 0 = none
  std::vector<uint8_t> layer_sliding;  // per layer: uses the sliding window

  int q_width() const { return n_head * head_dim; }
  int kv_width() const { return n_head_kv * head_dim; }
  int v_width() const { return n_head_kv * head_dim_v; }
};

}  // namespace salvo
