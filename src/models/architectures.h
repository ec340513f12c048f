// Loaders of the supported architectures, one file each.
#pragma once

#include <memory>

#include "io/gguf.h"
#include "models/model.h"

namespace salvo {

Expected<std::unique_ptr<Model>> load_llama(std::unique_ptr<GgufFile> gguf);
Expected<std::unique_ptr<Model>> load_qwen2(std::unique_ptr<GgufFile> gguf);
Expected<std::unique_ptr<Model>> load_gemma3(std::unique_ptr<GgufFile> gguf);

}  // namespace salvo
