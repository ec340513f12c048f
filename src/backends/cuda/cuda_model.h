// What the CUDA backend's other parts (the DFlash drafter's device runner) read of a CudaModel.
#pragma once

#include "backends/cuda/kernels.h"
#include "models/model.h"

namespace salvo::cuda {

// The target's device token embedding and LM head ([n_vocab, n_embd] each, GGUF types; the
// same tensor when tied), and the LM head's kHalf copy (w null: none). x, y and n_rows are unset.
struct DeviceHeads {
  MatmulParams token_embd, output, output_half;
};

// The heads of a model that to_device placed; null for any other model.
const DeviceHeads* device_heads(const Model& model);

}  // namespace salvo::cuda
