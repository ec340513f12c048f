// Entry points of the CUDA backend. The stub build returns an error from each.
#pragma once

#include <memory>
#include <string>

#include "models/model.h"
#include "speculative/dflash_runner.h"
#include "util/status.h"

namespace salvo::cuda {

// Checks that a CUDA device can be used; the stub says the build has no CUDA.
Status check_available();

// Uploads a loaded model's weights to the GPU once and returns a Model whose forward passes run
// there (llama, qwen2 and gemma3). Its KV rows live on the device: the first forward pass with a
// KvCache attaches a device mirror to it (KvCacheMirror), so commit() moves device rows.
Expected<std::unique_ptr<Model>> to_device(std::unique_ptr<Model> cpu_model);

// Uploads a DFlash drafter's weights (matrices as F16) for a target that to_device placed; its
// runners keep each sequence's context K/V on the device, run the draft pass as one CUDA graph
// with the target's own device embedding and LM head, and return per depth only the top
// candidates, their log-probabilities and the adapter's scores (dflash_runner.h).
Expected<std::shared_ptr<const DflashDevice>> dflash_to_device(const DflashModel& drafter,
                                                               const Model& target);

// Whether a drafter's layer matrices go to the fp16 tensor-core kernels as Q6_K (the default;
// SALVO_DFLASH_CUDA_HALF=0 keeps them on the int8 kernel as Q8_0). For a CPU drafter to read the
// device's weights, both drafters load with SALVO_DFLASH_Q6K=1 (kHalf's packing rounds the
// scales again: cuda_dflash_test).
bool dflash_half_layers();

}  // namespace salvo::cuda
