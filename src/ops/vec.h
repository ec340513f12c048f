// Small float vector kernels used by attention and the element-wise ops, dispatched once to
// AVX-512 / AVX2 / portable code. Each is a fixed-order reduction, so results depend only on
// the inputs, never on the batch they came in.
#pragma once

namespace salvo::vec {

float dot(const float* a, const float* b, int n);
// y += a * x
void axpy(float a, const float* x, float* y, int n);
// y *= a
void scale(float a, float* y, int n);

}  // namespace salvo::vec
