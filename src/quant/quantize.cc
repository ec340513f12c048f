#include "quant/quantize.h"

#include <algorithm>
#include <cmath>

#include "quant/fp16.h"
#include "util/check.h"

namespace salvo {
namespace {

constexpr int kGroup = 16, kGroups = kQKK / kGroup;

int clamp_quant(float v) { return std::clamp(static_cast<int>(std::nearbyint(v)), -32, 31); }

// The scale of one group: the quants of the scale that maps its largest magnitude to -32 (the
// wider end of [-32, 31]), then two least-squares refits of the scale to those quants.
float group_scale(const float* x) {
  float m = 0.0f;
  for (int j = 0; j < kGroup; ++j) {
    if (std::fabs(x[j]) > std::fabs(m)) m = x[j];
  }
  if (m == 0.0f) return 0.0f;
  float s = -m / 32.0f;
  for (int iter = 0; iter < 2; ++iter) {
    double xq = 0.0, qq = 0.0;
    for (int j = 0; j < kGroup; ++j) {
      const int q = clamp_quant(x[j] / s);
      xq += static_cast<double>(x[j]) * q;
      qq += static_cast<double>(q) * q;
    }
    if (qq == 0.0 || xq == 0.0) break;
    s = static_cast<float>(xq / qq);
  }
  return s;
}

}  // namespace

void quantize_row_q6_k(const float* x, BlockQ6_K* y, int64_t n) {
  SALVO_CHECK(n % kQKK == 0);
  for (int64_t b = 0; b < n / kQKK; ++b, x += kQKK) {
    BlockQ6_K& out = y[b];
    float scales[kGroups];
    float amax = 0.0f;
    for (int g = 0; g < kGroups; ++g) {
      scales[g] = group_scale(x + g * kGroup);
      amax = std::max(amax, std::fabs(scales[g]));
    }
    const float d = amax / 127.0f;
    out.d = fp32_to_fp16(d);
    const float dd = fp16_to_fp32(out.d);  // what the dequantizer multiplies by
    std::fill(std::begin(out.ql), std::end(out.ql), 0);
    std::fill(std::begin(out.qh), std::end(out.qh), 0);
    for (int g = 0; g < kGroups; ++g) {
      const int sc =
          dd != 0.0f ? std::clamp(static_cast<int>(std::nearbyint(scales[g] / dd)), -127, 127) : 0;
      out.scales[g] = static_cast<int8_t>(sc);
      const float step = dd * static_cast<float>(sc);
      for (int j = 0; j < kGroup; ++j) {
        const int e = g * kGroup + j;
        const int q = (step != 0.0f ? clamp_quant(x[e] / step) : 0) + 32;  // 0..63
        // Element e of the block: half e / 128; within it, quarter r / 32 and lane l = r % 32
        // (dequant_q6_k's order): the low nibble in ql[l (+ 32 for odd quarters)], low or high
        // half by quarter < 2, the high 2 bits in qh[l] at bit 2 * quarter.
        const int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
        uint8_t& ql = out.ql[h * 64 + l + (quarter & 1) * 32];
        ql |= static_cast<uint8_t>((q & 0xF) << (quarter < 2 ? 0 : 4));
        out.qh[h * 32 + l] |= static_cast<uint8_t>((q >> 4) << (2 * quarter));
      }
    }
  }
}

}  // namespace salvo
