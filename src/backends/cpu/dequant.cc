// Reference dequantization, written to perform ggml's (and gguf-py's) float operations in the
// same order so results match them exactly.
#include <cstring>

#include "backends/cpu/matmul.h"
#include "quant/fp16.h"
#include "util/check.h"

namespace salvo {
namespace {

void dequant_q4_0(const BlockQ4_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + kQK / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const BlockQ4_1* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    const float m = fp16_to_fp32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0F) * d + m;
      y[j + kQK / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequant_q5_0(const BlockQ5_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    uint32_t qh;
    std::memcpy(&qh, x[i].qh, 4);
    for (int j = 0; j < kQK / 2; ++j) {
      const int h0 = ((qh >> j) << 4) & 0x10;
      const int h1 = (qh >> (j + 12)) & 0x10;
      y[j] = static_cast<float>(((x[i].qs[j] & 0x0F) | h0) - 16) * d;
      y[j + kQK / 2] = static_cast<float>(((x[i].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void dequant_q8_0(const BlockQ8_0* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK) {
    const float d = fp16_to_fp32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequant_q4_k(const BlockQ4_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0, is = 0; j < kQKK; j += 64, is += 2, q += 32) {
      uint8_t sc, m;
      scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0xF) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequant_q5_k(const BlockQ5_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const float dmin = fp16_to_fp32(x[i].dmin);
    const uint8_t* ql = x[i].qs;
    const uint8_t* qh = x[i].qh;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0, is = 0; j < kQKK; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      uint8_t sc, m;
      scale_min_k4(is, x[i].scales, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      scale_min_k4(is + 1, x[i].scales, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) {
        *y++ = d1 * static_cast<float>((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        *y++ = d2 * static_cast<float>((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
      }
    }
  }
}

void dequant_q6_k(const BlockQ6_K* x, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < kQKK; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = d * sc[is + 0] * static_cast<float>(q1);
        y[l + 32] = d * sc[is + 2] * static_cast<float>(q2);
        y[l + 64] = d * sc[is + 4] * static_cast<float>(q3);
        y[l + 96] = d * sc[is + 6] * static_cast<float>(q4);
      }
    }
  }
}

}  // namespace

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const int64_t bs = traits(type).block_size;
  SALVO_CHECK(n % bs == 0);
  const int64_t nb = n / bs;
  switch (type) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      break;
    case DType::kF16: {
      const auto* h = static_cast<const fp16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      break;
    }
    case DType::kBF16: {
      const auto* h = static_cast<const bf16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      break;
    }
    case DType::kQ4_0:
      dequant_q4_0(static_cast<const BlockQ4_0*>(src), dst, nb);
      break;
    case DType::kQ4_1:
      dequant_q4_1(static_cast<const BlockQ4_1*>(src), dst, nb);
      break;
    case DType::kQ5_0:
      dequant_q5_0(static_cast<const BlockQ5_0*>(src), dst, nb);
      break;
    case DType::kQ8_0:
      dequant_q8_0(static_cast<const BlockQ8_0*>(src), dst, nb);
      break;
    case DType::kQ4_K:
      dequant_q4_k(static_cast<const BlockQ4_K*>(src), dst, nb);
      break;
    case DType::kQ5_K:
      dequant_q5_k(static_cast<const BlockQ5_K*>(src), dst, nb);
      break;
    case DType::kQ6_K:
      dequant_q6_k(static_cast<const BlockQ6_K*>(src), dst, nb);
      break;
    case DType::kQ8_1: {
      const auto* x = static_cast<const BlockQ8_1*>(src);
      for (int64_t i = 0; i < nb; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < kQK; ++j) dst[i * kQK + j] = static_cast<float>(x[i].qs[j]) * d;
      }
      break;
    }
    case DType::kQ8_K: {
      const auto* x = static_cast<const BlockQ8_K*>(src);
      for (int64_t i = 0; i < nb; ++i) {
        for (int j = 0; j < kQKK; ++j) dst[i * kQKK + j] = x[i].d * static_cast<float>(x[i].qs[j]);
      }
      break;
    }
  }
}

}  // namespace salvo
