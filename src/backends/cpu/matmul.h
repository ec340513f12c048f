// Quantized matrix products on the CPU. Weights stay in their GGUF block format; activations
// are quantized once per call into the int8 block format that pairs with the weight type
// (Q8_0 for Q4_0/Q8_0, Q8_1 for Q4_1, Q8_K for the k-quants) and every output is an integer
// dot product over blocks. F32/F16/BF16 weights use float dot products.
//
// Row invariance: the value of y[r, o] depends only on x[r, :] and W[o, :], never on how many
// rows are in the batch or how work is split over threads.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/types.h"
#include "util/thread_pool.h"

namespace salvo {

// A weight matrix in place: [n_out rows, n_in columns], each row row_bytes(type, n_in) long.
struct WeightView {
  DType type = DType::kF32;
  const void* data = nullptr;
  int64_t n_out = 0;
  int64_t n_in = 0;
  // The same matrix repacked at load (backends/cpu/packed.h), or null. Matmul uses it for
  // every batch size when set; `data` stays valid for row lookups (embeddings) and other
  // backends, or is null where nothing looks rows up (a DFlash drafter's ranked head).
  const void* packed = nullptr;
};

// Reusable per-thread scratch for quantized activations, so decode does not allocate.
struct MatmulScratch {
  std::vector<uint8_t> acts;
};

// y[r, o] = sum_i W[o, i] * x[r, i] for r < n_rows. x: [n_rows, n_in], y: [n_rows, n_out].
void matmul(ThreadPool& pool, const WeightView& w, const float* x, int64_t n_rows, float* y,
            MatmulScratch& scratch);

// y[i] = W[i] x for n_w matrices over the same x (Q/K/V, gate/up): packed matrices of one
// activation format share one quantization of x and one pass of the thread pool (decode runs
// hundreds of matmuls per token, so each pass saved matters). Bit-identical to n_w matmul calls.
void matmul_multi(ThreadPool& pool, const WeightView* const* w, float* const* y, int n_w,
                  const float* x, int64_t n_rows, MatmulScratch& scratch);

// Reference dequantization of one row of n elements (n a multiple of the block size).
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// Which SIMD path the dot products use on this machine: "avx512", "avx2" or "portable".
const char* cpu_kernel_path();

}  // namespace salvo
