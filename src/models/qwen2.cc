// qwen2 (Qwen2 / Qwen2.5): the llama network with biases on Q, K and V and NEOX-style RoPE
// (rotating the two halves of each head rather than adjacent pairs).
#include "models/architectures.h"
#include "models/llama.h"

namespace salvo {

Expected<std::unique_ptr<Model>> load_qwen2(std::unique_ptr<GgufFile> gguf) {
  return LlamaModel::load(std::move(gguf), /*qkv_bias=*/true, RopeMode::kRopeNeox);
}

}  // namespace salvo
