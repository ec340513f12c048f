#include "backends/cpu/quantize_acts.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/fp16.h"
#include "util/check.h"

namespace salvo::cpu {
namespace {

// ggml's nearest_int: adding 1.5 * 2^23 leaves round-to-nearest-even of v in the low mantissa
// bits. Valid for |v| < 2^22, far beyond the +-127 range used here.
inline int nearest_int(float v) {
  const float shifted = v + 12582912.f;
  int32_t bits;
  std::memcpy(&bits, &shifted, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

inline float block_amax(const float* x, int n) {
  float amax = 0.0f;
  for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

}  // namespace

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n) {
  SALVO_CHECK(n % kQK == 0);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float amax = block_amax(x, kQK);
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    y[b].d = fp32_to_fp16(amax / 127.f);
    for (int j = 0; j < kQK; ++j) y[b].qs[j] = static_cast<int8_t>(nearest_int(x[j] * id));
  }
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  SALVO_CHECK(n % kQK == 0);
  for (int64_t b = 0; b < n / kQK; ++b, x += kQK) {
    const float amax = block_amax(x, kQK);
    const float d = amax / 127.f;
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      const int q = nearest_int(x[j] * id);
      y[b].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    y[b].d = fp32_to_fp16(d);
    // The Q4_1 minimum multiplies the activation sum; keeping it in fp16 is ggml's choice.
    y[b].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

void quantize_row_q8_k(const float* x, BlockQ8_K* y, int64_t n) {
  SALVO_CHECK(n % kQKK == 0);
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    float amax = 0.0f;
    float max = 0.0f;  // the signed value of largest magnitude (first one on ties)
    for (int j = 0; j < kQKK; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    BlockQ8_K& out = y[b];
    if (amax == 0.0f) {
      std::memset(&out, 0, sizeof(out));
      continue;
    }
    const float iscale = -127.f / max;
    for (int j = 0; j < kQKK; ++j) {
      out.qs[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * x[j])));
    }
    for (int g = 0; g < kQKK / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += out.qs[g * 16 + j];
      out.bsums[g] = static_cast<int16_t>(sum);
    }
    out.d = 1.0f / iscale;
  }
}

DType activation_type(DType weight_type) {
  switch (weight_type) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return DType::kF32;
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0:
      return DType::kQ8_0;
    case DType::kQ4_1:
      return DType::kQ8_1;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return DType::kQ8_K;
    default:
      SALVO_CHECK_MSG(false, "weight type has no CPU matmul kernel");
  }
}

size_t activation_row_bytes(DType weight_type, int64_t n_in) {
  return row_bytes(activation_type(weight_type), n_in);
}

void quantize_activation_row(DType weight_type, const float* x, void* out, int64_t n_in) {
  switch (activation_type(weight_type)) {
    case DType::kQ8_0:
      quantize_row_q8_0(x, static_cast<BlockQ8_0*>(out), n_in);
      break;
    case DType::kQ8_1:
      quantize_row_q8_1(x, static_cast<BlockQ8_1*>(out), n_in);
      break;
    case DType::kQ8_K:
      quantize_row_q8_k(x, static_cast<BlockQ8_K*>(out), n_in);
      break;
    default:
      std::memcpy(out, x, static_cast<size_t>(n_in) * sizeof(float));
      break;
  }
}

}  // namespace salvo::cpu
