#include "ops/vec.h"

#include <immintrin.h>

#include "quant/fp16.h"

namespace salvo::vec {
namespace {

float dot_portable(const float* a, const float* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

__attribute__((target("avx2,fma"))) float dot_avx2(const float* a, const float* b, int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  }
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float sum = _mm_cvtss_f32(s);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void axpy_portable(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

__attribute__((target("avx2,fma"))) void axpy_avx2(float a, const float* x, float* y, int n) {
  const __m256 va = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

// The f16 kernels keep dot()'s reduction shape (two 8-lane accumulators, the same final
// tree), so a half row gives the same score on either path up to the converted inputs.
float dot_f16_portable(const float* a, const uint16_t* b, int n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * fp16_to_fp32(b[i + j]);
  }
  float sum = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) sum += a[i] * fp16_to_fp32(b[i]);
  return sum;
}

__attribute__((target("avx2,fma,f16c"))) __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

__attribute__((target("avx2,fma,f16c"))) float dot_f16_avx2(const float* a, const uint16_t* b,
                                                            int n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_f16(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), load_f16(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_f16(b + i), acc0);
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  float sum = _mm_cvtss_f32(s);
  for (; i < n; ++i) sum += a[i] * fp16_to_fp32(b[i]);
  return sum;
}

__attribute__((target("avx2,fma,f16c"))) void axpy_f16_avx2(float a, const uint16_t* x, float* y,
                                                            int n) {
  const __m256 va = _mm256_set1_ps(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load_f16(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * fp16_to_fp32(x[i]);
}

__attribute__((target("avx2,fma,f16c"))) void to_f16_avx2(const float* x, uint16_t* y, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), h);
  }
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

bool have_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
}

}  // namespace

float dot(const float* a, const float* b, int n) {
  return have_avx2() ? dot_avx2(a, b, n) : dot_portable(a, b, n);
}

void axpy(float a, const float* x, float* y, int n) {
  if (have_avx2()) {
    axpy_avx2(a, x, y, n);
  } else {
    axpy_portable(a, x, y, n);
  }
}

void to_f16(const float* x, uint16_t* y, int n) {
  if (have_avx2()) {
    to_f16_avx2(x, y, n);
  } else {
    for (int i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
  }
}

float dot_f16(const float* a, const uint16_t* b, int n) {
  return have_avx2() ? dot_f16_avx2(a, b, n) : dot_f16_portable(a, b, n);
}

void axpy_f16(float a, const uint16_t* x, float* y, int n) {
  if (have_avx2()) {
    axpy_f16_avx2(a, x, y, n);
  } else {
    for (int i = 0; i < n; ++i) y[i] += a * fp16_to_fp32(x[i]);
  }
}

void scale(float a, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] *= a;
}

}  // namespace salvo::vec
