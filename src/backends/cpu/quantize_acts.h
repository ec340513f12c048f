// Activation quantization for the integer dot products, bit-compatible with what ggml runs on
// x86: Q8_0/Q8_1 use d = amax / 127 and multiply by 127 / amax; Q8_K uses ggml's reference
// rule (-127 / signed max, clamp to 127) and keeps per-16 sums for the k-quant minimums. All
// rounding is to nearest, ties to even (ggml's nearest_int and _mm256_round_ps).
// One implementation for every SIMD path, so all paths see the same quantized activations.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/types.h"

namespace salvo::cpu {

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);
void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n);

// The activation format paired with a weight type: kQ8_0, kQ8_1, kQ8_K, or kF32 for float
// weights (activations are then used as they are).
DType activation_type(DType weight_type);

// Bytes of one activation row of n_in elements in activation_type(weight_type).
size_t activation_row_bytes(DType weight_type, int64_t n_in);

// Quantizes one row of n_in floats into the format activation_type(weight_type) names.
void quantize_activation_row(DType weight_type, const float* x, void* out, int64_t n_in);

}  // namespace salvo::cpu
