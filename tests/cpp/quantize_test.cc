// quantize_row_q6_k against the reference dequantizer (which test_dequant.py holds to gguf's):
// every element comes back within half a step of its group's grid, the rounding error is what
// 6 bits give, and zeros and lone outliers stay where they are.
#include "quant/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/matmul.h"
#include "quant/fp16.h"

namespace salvo {
namespace {

std::vector<float> round_trip(const std::vector<float>& x) {
  std::vector<BlockQ6_K> blocks(x.size() / kQKK);
  quantize_row_q6_k(x.data(), blocks.data(), static_cast<int64_t>(x.size()));
  std::vector<float> back(x.size());
  dequantize_row(DType::kQ6_K, blocks.data(), back.data(), static_cast<int64_t>(x.size()));
  return back;
}

TEST(QuantizeQ6K, GaussianRowsComeBackWithinSixBitsError) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x(4096);
  for (float& v : x) v = normal(rng);
  const std::vector<float> back = round_trip(x);
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    // A group's step is about its largest magnitude / 32; the least-squares scale may clip the
    // largest element a little, but no element is off by a whole step.
    const size_t g = i / 16 * 16;
    float gmax = 0.0f;
    for (size_t j = g; j < g + 16; ++j) gmax = std::max(gmax, std::fabs(x[j]));
    EXPECT_LE(std::fabs(back[i] - x[i]), gmax / 31.0f) << "element " << i;
    err += (back[i] - x[i]) * (back[i] - x[i]);
    ref += x[i] * x[i];
  }
  EXPECT_LT(std::sqrt(err / ref), 0.02);  // ~1.6% for Gaussian data
}

TEST(QuantizeQ6K, ZerosAndOutliersStayInTheirGroups) {
  std::vector<float> x(512, 0.0f);
  for (int i = 256; i < 512; ++i) x[i] = 0.001f * static_cast<float>(i % 7 - 3);
  // One outlier: its group's step grows, the others' keep their own steps as long as their
  // scales stay above 1/127 of the outlier group's (the int8 group scales share one d).
  x[300] = 0.1f;
  const std::vector<float> back = round_trip(x);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(back[i], 0.0f) << "element " << i;
  EXPECT_NEAR(back[300], 0.1f, 0.1f / 62.0f);
  for (int i = 320; i < 512; ++i) EXPECT_NEAR(back[i], x[i], 0.003f / 31.0f) << i;
}

}  // namespace
}  // namespace salvo
