// Weight quantization on the host, for matrices salvo converts itself (a drafter's F16 matrices
// into a layout a device kernel reads). GGUF files come quantized; this is not a GGUF writer.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace salvo {

// x [n] (n a multiple of 256) as Q6_K blocks: per 16-element group a scale fitted by least
// squares to its 6-bit quants, the group scales as int8 times the block's fp16 d.
void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n);

}  // namespace salvo
