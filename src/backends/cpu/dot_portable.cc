// Scalar block dot products: the reference every SIMD path is tested against, and the path for
// machines without AVX2. Integer sums per block are exact; the float sum runs over blocks in
// order, one activation row at a time, so rows are trivially independent.
#include <cstring>

#include "backends/cpu/dot.h"
#include "quant/fp16.h"
#include "util/check.h"

namespace salvo::cpu {
namespace {

inline void scale_min_k4(int j, const uint8_t* q, int* d, int* m) {
  if (j < 4) {
    *d = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

float dot_row_f32(int64_t n, const void* wv, const float* x) {
  const float* w = static_cast<const float*>(wv);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += w[i] * x[i];
  return sum;
}

float dot_row_f16(int64_t n, const void* wv, const float* x) {
  const fp16_t* w = static_cast<const fp16_t*>(wv);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += fp16_to_fp32(w[i]) * x[i];
  return sum;
}

float dot_row_bf16(int64_t n, const void* wv, const float* x) {
  const bf16_t* w = static_cast<const bf16_t*>(wv);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += bf16_to_fp32(w[i]) * x[i];
  return sum;
}

float dot_row_q4_0(int64_t n, const void* wv, const BlockQ8_0* a) {
  const auto* w = static_cast<const BlockQ4_0*>(wv);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += ((w[b].qs[j] & 0xF) - 8) * a[b].qs[j];
      isum += ((w[b].qs[j] >> 4) - 8) * a[b].qs[j + kQK / 2];
    }
    sum += fp16_to_fp32(w[b].d) * fp16_to_fp32(a[b].d) * static_cast<float>(isum);
  }
  return sum;
}

float dot_row_q4_1(int64_t n, const void* wv, const BlockQ8_1* a) {
  const auto* w = static_cast<const BlockQ4_1*>(wv);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      isum += (w[b].qs[j] & 0xF) * a[b].qs[j];
      isum += (w[b].qs[j] >> 4) * a[b].qs[j + kQK / 2];
    }
    sum += fp16_to_fp32(w[b].d) * fp16_to_fp32(a[b].d) * static_cast<float>(isum) +
           fp16_to_fp32(w[b].m) * fp16_to_fp32(a[b].s);
  }
  return sum;
}

float dot_row_q5_0(int64_t n, const void* wv, const BlockQ8_0* a) {
  const auto* w = static_cast<const BlockQ5_0*>(wv);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    uint32_t qh;
    std::memcpy(&qh, w[b].qh, 4);
    int isum = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10;
      const int h1 = (qh >> (j + 12)) & 0x10;
      isum += (((w[b].qs[j] & 0xF) | h0) - 16) * a[b].qs[j];
      isum += (((w[b].qs[j] >> 4) | h1) - 16) * a[b].qs[j + kQK / 2];
    }
    sum += fp16_to_fp32(w[b].d) * fp16_to_fp32(a[b].d) * static_cast<float>(isum);
  }
  return sum;
}

float dot_row_q8_0(int64_t n, const void* wv, const BlockQ8_0* a) {
  const auto* w = static_cast<const BlockQ8_0*>(wv);
  float sum = 0.0f;
  for (int64_t b = 0; b < n / kQK; ++b) {
    int isum = 0;
    for (int j = 0; j < kQK; ++j) isum += w[b].qs[j] * a[b].qs[j];
    sum += fp16_to_fp32(w[b].d) * fp16_to_fp32(a[b].d) * static_cast<float>(isum);
  }
  return sum;
}

// Shared by Q4_K and Q5_K once the quants are unpacked to 0..31: per 32-element group, scale
// times the integer dot, and the minimum times the activation group sum from bsums.
float finish_k_block(float wd, float wdmin, const uint8_t* scales, const int8_t* q,
                     const BlockQ8_K& a) {
  int sumi = 0, summ = 0;
  for (int g = 0; g < 8; ++g) {
    int sc, m;
    scale_min_k4(g, scales, &sc, &m);
    int dot = 0;
    for (int l = 0; l < 32; ++l) dot += q[g * 32 + l] * a.qs[g * 32 + l];
    sumi += sc * dot;
    summ += m * (a.bsums[2 * g] + a.bsums[2 * g + 1]);
  }
  return a.d * wd * static_cast<float>(sumi) - a.d * wdmin * static_cast<float>(summ);
}

float dot_row_q4_k(int64_t n, const void* wv, const BlockQ8_K* a) {
  const auto* w = static_cast<const BlockQ4_K*>(wv);
  float sum = 0.0f;
  int8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        q[j * 64 + l] = static_cast<int8_t>(w[b].qs[j * 32 + l] & 0xF);
        q[j * 64 + 32 + l] = static_cast<int8_t>(w[b].qs[j * 32 + l] >> 4);
      }
    }
    sum += finish_k_block(fp16_to_fp32(w[b].d), fp16_to_fp32(w[b].dmin), w[b].scales, q, a[b]);
  }
  return sum;
}

float dot_row_q5_k(int64_t n, const void* wv, const BlockQ8_K* a) {
  const auto* w = static_cast<const BlockQ5_K*>(wv);
  float sum = 0.0f;
  int8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const int h = w[b].qh[l] >> (2 * j);
        q[j * 64 + l] = static_cast<int8_t>((w[b].qs[j * 32 + l] & 0xF) | ((h & 1) << 4));
        q[j * 64 + 32 + l] = static_cast<int8_t>((w[b].qs[j * 32 + l] >> 4) | ((h & 2) << 3));
      }
    }
    sum += finish_k_block(fp16_to_fp32(w[b].d), fp16_to_fp32(w[b].dmin), w[b].scales, q, a[b]);
  }
  return sum;
}

float dot_row_q6_k(int64_t n, const void* wv, const BlockQ8_K* a) {
  const auto* w = static_cast<const BlockQ6_K*>(wv);
  float sum = 0.0f;
  int8_t q[kQKK];
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const uint8_t* ql = w[b].ql;
    const uint8_t* qh = w[b].qh;
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32) {
      int8_t* out = q + half * 128;
      for (int l = 0; l < 32; ++l) {
        out[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
        out[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        out[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        out[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
    int sumi = 0;
    for (int g = 0; g < 16; ++g) {
      int dot = 0;
      for (int l = 0; l < 16; ++l) dot += q[g * 16 + l] * a[b].qs[g * 16 + l];
      sumi += w[b].scales[g] * dot;
    }
    sum += fp16_to_fp32(w[b].d) * a[b].d * static_cast<float>(sumi);
  }
  return sum;
}

// Adapts a one-row dot to the DotFn signature: rows are independent by construction.
template <typename Act, float (*kRowDot)(int64_t, const void*, const Act*)>
void dot_rows(int64_t n, const void* w, const void* acts, size_t act_stride, int n_acts,
              float* out) {
  const auto* base = static_cast<const uint8_t*>(acts);
  for (int r = 0; r < n_acts; ++r) {
    out[r] = kRowDot(n, w, reinterpret_cast<const Act*>(base + r * act_stride));
  }
}

}  // namespace

void fill_portable_kernels(CpuKernels& k) {
  k.name = "portable";
  auto set = [&](WeightKind kind, DotFn fn) { k.dot[static_cast<int>(kind)] = fn; };
  set(WeightKind::kF32, dot_rows<float, dot_row_f32>);
  set(WeightKind::kF16, dot_rows<float, dot_row_f16>);
  set(WeightKind::kBF16, dot_rows<float, dot_row_bf16>);
  set(WeightKind::kQ4_0, dot_rows<BlockQ8_0, dot_row_q4_0>);
  set(WeightKind::kQ4_1, dot_rows<BlockQ8_1, dot_row_q4_1>);
  set(WeightKind::kQ5_0, dot_rows<BlockQ8_0, dot_row_q5_0>);
  set(WeightKind::kQ8_0, dot_rows<BlockQ8_0, dot_row_q8_0>);
  set(WeightKind::kQ4_K, dot_rows<BlockQ8_K, dot_row_q4_k>);
  set(WeightKind::kQ5_K, dot_rows<BlockQ8_K, dot_row_q5_k>);
  set(WeightKind::kQ6_K, dot_rows<BlockQ8_K, dot_row_q6_k>);
}

}  // namespace salvo::cpu
