// Small float vector kernels used by attention and the element-wise ops, dispatched once to
// AVX-512 / AVX2 / portable code. Each is a fixed-order reduction, so results depend only on
// the inputs, never on the batch they came in.
#pragma once

#include <cstdint>

namespace salvo::vec {

float dot(const float* a, const float* b, int n);
// y += a * x
void axpy(float a, const float* x, float* y, int n);
// y *= a
void scale(float a, float* y, int n);

// The KV cache's f16 rows (IEEE half as uint16_t): conversion with round-to-nearest-even
// (F16C's rounding, so every path stores the same bits), and the two attention kernels.
void to_f16(const float* x, uint16_t* y, int n);
float dot_f16(const float* a, const uint16_t* b, int n);
void axpy_f16(float a, const uint16_t* x, float* y, int n);

}  // namespace salvo::vec
