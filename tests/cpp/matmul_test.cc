// CPU matmul against double-precision references, on every SIMD path this machine runs, plus
// row invariance: a row's output must be bit-identical alone, in a 7-row or 64-row batch, and
// with 1 or 2 threads.
#include "backends/cpu/matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/dot.h"
#include "backends/cpu/packed.h"
#include "backends/cpu/quantize_acts.h"
#include "quant/fp16.h"

namespace salvo {
namespace {

constexpr const char* kPaths[] = {"portable", "avx2", "avx512"};

// Random blocks whose scale fields hold sane fp16 values; the quant bytes stay random, which
// exercises every bit pattern of the packed formats. With max_quants, every quant and 6-bit
// scale is at its largest magnitude instead (all bits set; Q8_0's -128).
std::vector<uint8_t> random_weights(DType type, int64_t n_out, int64_t n_in, std::mt19937& rng,
                                    bool max_quants = false) {
  std::vector<uint8_t> data(row_bytes(type, n_in) * n_out);
  std::uniform_int_distribution<int> byte(0, 255);
  const uint8_t max_byte = type == DType::kQ8_0 ? 0x80 : 0xFF;
  for (auto& b : data) b = max_quants ? max_byte : static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto scale = [&](float mag) { return fp32_to_fp16(mag * (0.25f + std::fabs(unit(rng)))); };
  const int64_t n_elems = n_out * n_in;
  const int64_t nb = n_elems / traits(type).block_size;
  switch (type) {
    case DType::kF32: {
      auto* p = reinterpret_cast<float*>(data.data());
      for (int64_t i = 0; i < n_elems; ++i) p[i] = unit(rng);
      break;
    }
    case DType::kF16: {
      auto* p = reinterpret_cast<fp16_t*>(data.data());
      for (int64_t i = 0; i < n_elems; ++i) p[i] = fp32_to_fp16(unit(rng));
      break;
    }
    case DType::kBF16: {
      auto* p = reinterpret_cast<bf16_t*>(data.data());
      for (int64_t i = 0; i < n_elems; ++i)
        p[i] = static_cast<bf16_t>(fp32_to_bits(unit(rng)) >> 16);
      break;
    }
    case DType::kQ4_0:
      for (int64_t i = 0; i < nb; ++i)
        reinterpret_cast<BlockQ4_0*>(data.data())[i].d = scale(0.02f);
      break;
    case DType::kQ4_1:
      for (int64_t i = 0; i < nb; ++i) {
        auto& b = reinterpret_cast<BlockQ4_1*>(data.data())[i];
        b.d = scale(0.02f);
        b.m = fp32_to_fp16(-8.0f * fp16_to_fp32(b.d) * (1.0f + 0.2f * unit(rng)));
      }
      break;
    case DType::kQ5_0:
      for (int64_t i = 0; i < nb; ++i)
        reinterpret_cast<BlockQ5_0*>(data.data())[i].d = scale(0.01f);
      break;
    case DType::kQ8_0:
      for (int64_t i = 0; i < nb; ++i)
        reinterpret_cast<BlockQ8_0*>(data.data())[i].d = scale(0.001f);
      break;
    case DType::kQ4_K:
      for (int64_t i = 0; i < nb; ++i) {
        auto& b = reinterpret_cast<BlockQ4_K*>(data.data())[i];
        b.d = scale(0.001f);
        b.dmin = scale(0.001f);
      }
      break;
    case DType::kQ5_K:
      for (int64_t i = 0; i < nb; ++i) {
        auto& b = reinterpret_cast<BlockQ5_K*>(data.data())[i];
        b.d = scale(0.001f);
        b.dmin = scale(0.001f);
      }
      break;
    case DType::kQ6_K:
      for (int64_t i = 0; i < nb; ++i)
        reinterpret_cast<BlockQ6_K*>(data.data())[i].d = scale(0.0005f);
      break;
    default:
      ADD_FAILURE() << "no generator for type";
  }
  return data;
}

std::vector<float> random_acts(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng);
  // A few outliers, as real hidden states have, stress the per-block activation scales.
  for (int64_t i = 0; i < n; i += 97) x[i] *= 8.0f;
  return x;
}

struct Case {
  DType type;
  int64_t n_in;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return std::string(traits(info.param.type).name) + "_" + std::to_string(info.param.n_in);
}

class MatmulTest : public testing::TestWithParam<Case> {};

TEST_P(MatmulTest, MatchesReferencesOnEveryPath) {
  const auto [type, n_in] = GetParam();
  const int64_t n_out = 37, n_rows = 9;
  std::mt19937 rng(1234 + static_cast<int>(type));
  const auto w = random_weights(type, n_out, n_in, rng);
  const auto x = random_acts(n_rows * n_in, rng);
  const size_t w_stride = row_bytes(type, n_in);

  // Weights and activations as the kernels see them, dequantized.
  std::vector<float> wf(n_out * n_in), xq(n_rows * n_in);
  for (int64_t o = 0; o < n_out; ++o)
    dequantize_row(type, w.data() + o * w_stride, &wf[o * n_in], n_in);
  const DType act_type = cpu::activation_type(type);
  std::vector<uint8_t> qrow(cpu::activation_row_bytes(type, n_in));
  for (int64_t r = 0; r < n_rows; ++r) {
    cpu::quantize_activation_row(type, &x[r * n_in], qrow.data(), n_in);
    dequantize_row(act_type, qrow.data(), &xq[r * n_in], n_in);
  }

  const WeightView view{type, w.data(), n_out, n_in};
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (const char* path : kPaths) {
    const cpu::CpuKernels* kernels = cpu::cpu_kernels_for(path);
    if (!kernels) continue;
    SCOPED_TRACE(path);
    std::vector<float> y(n_rows * n_out);
    cpu::matmul_with(*kernels, pool, view, x.data(), n_rows, y.data(), scratch);
    for (int64_t r = 0; r < n_rows; ++r) {
      for (int64_t o = 0; o < n_out; ++o) {
        double ref_q = 0, ref_f = 0, mag = 0, quant_err_bound = 0;
        for (int64_t i = 0; i < n_in; i += 1) {
          const double wi = wf[o * n_in + i];
          ref_q += wi * xq[r * n_in + i];
          ref_f += wi * x[r * n_in + i];
          mag += std::fabs(wi * xq[r * n_in + i]);
        }
        // Activation quantization moves each element by at most half a step (plus the fp16
        // rounding of the block scale), one step being the block's amax / 127.
        const int bs = traits(act_type).block_size;
        for (int64_t i = 0; i < n_in; ++i) {
          const int64_t b0 = r * n_in + i / bs * bs;
          float amax = 0;
          for (int j = 0; j < bs && act_type != DType::kF32; ++j)
            amax = std::max(amax, std::fabs(x[b0 + j]));
          quant_err_bound += std::fabs(wf[o * n_in + i]) * amax / 127.0 * 0.57;
        }
        const float got = y[r * n_out + o];
        // Float accumulation over blocks; Q4_1 also rounds the activation block sum to fp16.
        const double tol_q = (type == DType::kQ4_1 ? 2e-3 : 2e-5) * mag + 1e-6;
        EXPECT_NEAR(got, ref_q, tol_q) << "row " << r << " out " << o;
        EXPECT_NEAR(got, ref_f, quant_err_bound + 2 * tol_q) << "row " << r << " out " << o;
      }
    }
  }
}

TEST_P(MatmulTest, RowInvariantAcrossBatchAndThreads) {
  const auto [type, n_in] = GetParam();
  const int64_t n_out = 29, n_rows = 64;
  std::mt19937 rng(99 + static_cast<int>(type));
  const auto w = random_weights(type, n_out, n_in, rng);
  const auto x = random_acts(n_rows * n_in, rng);
  const WeightView view{type, w.data(), n_out, n_in};
  MatmulScratch scratch;
  for (const char* path : kPaths) {
    const cpu::CpuKernels* kernels = cpu::cpu_kernels_for(path);
    if (!kernels) continue;
    SCOPED_TRACE(path);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      std::vector<float> y64(n_rows * n_out), y7(7 * n_out), y1(n_out);
      cpu::matmul_with(*kernels, pool, view, x.data(), n_rows, y64.data(), scratch);
      cpu::matmul_with(*kernels, pool, view, x.data(), 7, y7.data(), scratch);
      EXPECT_EQ(0, std::memcmp(y7.data(), y64.data(), y7.size() * sizeof(float))) << threads;
      for (int64_t r : {0, 1, 3, 4, 5, 6, 33, 63}) {
        cpu::matmul_with(*kernels, pool, view, &x[r * n_in], 1, y1.data(), scratch);
        EXPECT_EQ(0, std::memcmp(y1.data(), &y64[r * n_out], n_out * sizeof(float)))
            << "row " << r << " threads " << threads;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllWeightTypes, MatmulTest,
    testing::Values(Case{DType::kF32, 103}, Case{DType::kF32, 768}, Case{DType::kF16, 103},
                    Case{DType::kF16, 768}, Case{DType::kBF16, 103}, Case{DType::kBF16, 768},
                    Case{DType::kQ4_0, 160}, Case{DType::kQ4_0, 768}, Case{DType::kQ4_1, 160},
                    Case{DType::kQ4_1, 768}, Case{DType::kQ5_0, 160}, Case{DType::kQ5_0, 768},
                    Case{DType::kQ8_0, 160}, Case{DType::kQ8_0, 768}, Case{DType::kQ4_K, 768},
                    Case{DType::kQ4_K, 1536}, Case{DType::kQ5_K, 768}, Case{DType::kQ6_K, 768},
                    Case{DType::kQ6_K, 1536}),
    case_name);

// Repacked matrices (backends/cpu/packed.h): every path gives the same bits, the
// result agrees with the unpacked kernels up to float accumulation order, and rows are
// invariant to the batch and the thread count.
class PackedMatmulTest : public testing::TestWithParam<Case> {};

TEST_P(PackedMatmulTest, SameBitsOnEveryPathAndCloseToUnpacked) {
  const auto [type, n_in] = GetParam();
  const int64_t n_out = 40, n_rows = 11;
  std::mt19937 rng(77 + static_cast<int>(type));
  const auto w = random_weights(type, n_out, n_in, rng);
  const auto x = random_acts(n_rows * n_in, rng);
  const WeightView plain{type, w.data(), n_out, n_in};
  ASSERT_TRUE(cpu::packable(type, n_out, n_in));
  const auto packed_buf = cpu::pack_matrix(plain, nullptr);
  WeightView packed = plain;
  packed.packed = packed_buf.get();

  ThreadPool pool(2);
  MatmulScratch scratch;
  std::vector<float> first;
  for (const char* path : kPaths) {
    const cpu::CpuKernels* kernels = cpu::cpu_kernels_for(path);
    if (!kernels) continue;
    SCOPED_TRACE(path);
    std::vector<float> yp(n_rows * n_out), yu(n_rows * n_out);
    cpu::matmul_with(*kernels, pool, packed, x.data(), n_rows, yp.data(), scratch);
    cpu::matmul_with(*kernels, pool, plain, x.data(), n_rows, yu.data(), scratch);
    if (first.empty()) {
      first = yp;
    } else {
      EXPECT_EQ(0, std::memcmp(first.data(), yp.data(), yp.size() * sizeof(float)));
    }
    for (size_t i = 0; i < yp.size(); ++i) {
      EXPECT_NEAR(yp[i], yu[i], 1e-4 * (std::fabs(yu[i]) + 1.0)) << i;
    }
  }
}

// pack_rows packs rows picked anywhere in a matrix, in the order given: the same bytes as
// packing the matrix of those rows copied out, and `done` called as slices finish.
TEST_P(PackedMatmulTest, PackedRowsAreThePackedCopyOfThoseRows) {
  const auto [type, n_in] = GetParam();
  const int64_t n_out = 40;
  std::mt19937 rng(9 + static_cast<int>(type));
  const auto w = random_weights(type, n_out, n_in, rng);
  const WeightView view{type, w.data(), n_out, n_in};
  const std::vector<int32_t> ids = {39, 3, 17, 0, 22, 5, 8, 31, 12, 38, 1, 2, 30, 29, 7, 14};
  const size_t stride = row_bytes(type, n_in);
  std::vector<uint8_t> copied(stride * ids.size());
  const auto* src = reinterpret_cast<const uint8_t*>(w.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(copied.data() + i * stride, src + ids[i] * stride, stride);
  }
  const WeightView copy{type, copied.data(), static_cast<int64_t>(ids.size()), n_in};
  const auto expected = cpu::pack_matrix(copy, nullptr);
  int done = 0;
  const auto got = cpu::pack_rows(view, ids, [&] { ++done; });
  EXPECT_EQ(0, std::memcmp(expected.get(), got.get(),
                           cpu::packed_bytes(type, static_cast<int64_t>(ids.size()), n_in)));
  EXPECT_GE(done, 1);
}

TEST_P(PackedMatmulTest, RowInvariantAcrossBatchAndThreads) {
  const auto [type, n_in] = GetParam();
  const int64_t n_out = 24, n_rows = 23;
  std::mt19937 rng(5 + static_cast<int>(type));
  const auto w = random_weights(type, n_out, n_in, rng);
  const auto x = random_acts(n_rows * n_in, rng);
  WeightView view{type, w.data(), n_out, n_in};
  const auto packed_buf = cpu::pack_matrix(view, nullptr);
  view.packed = packed_buf.get();
  MatmulScratch scratch;
  for (const char* path : kPaths) {
    const cpu::CpuKernels* kernels = cpu::cpu_kernels_for(path);
    if (!kernels) continue;
    SCOPED_TRACE(path);
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      std::vector<float> y_all(n_rows * n_out), y1(n_out);
      cpu::matmul_with(*kernels, pool, view, x.data(), n_rows, y_all.data(), scratch);
      for (int64_t r = 0; r < n_rows; ++r) {
        cpu::matmul_with(*kernels, pool, view, &x[r * n_in], 1, y1.data(), scratch);
        EXPECT_EQ(0, std::memcmp(y1.data(), &y_all[r * n_out], n_out * sizeof(float)))
            << "row " << r << " threads " << threads;
      }
    }
  }
}

// Every batch size (one kernel call of 1-4 rows, or 8 for the k-quants on AVX2; 5, 9 and 16
// split over calls) gives every path the portable bits, with random quants and with every
// quant at its largest against activations all at full scale, where the int16 sums of the
// AVX2 kernels come closest to overflowing.
TEST_P(PackedMatmulTest, SameBitsOnEveryPathForEveryBatchAndExtremeQuants) {
  const auto [type, n_in] = GetParam();
  const int64_t n_out = 16;
  std::mt19937 rng(13 + static_cast<int>(type));
  ThreadPool pool(1);
  MatmulScratch scratch;
  const cpu::CpuKernels* portable = cpu::cpu_kernels_for("portable");
  for (bool extreme : {false, true}) {
    const auto w = random_weights(type, n_out, n_in, rng, extreme);
    WeightView view{type, w.data(), n_out, n_in};
    const auto packed_buf = cpu::pack_matrix(view, nullptr);
    view.packed = packed_buf.get();
    for (int64_t n_rows : {1, 2, 3, 4, 5, 8, 9, 16}) {
      // Extreme: every activation row constant (alternating sign), so every quant is +-127.
      std::vector<float> x = random_acts(n_rows * n_in, rng);
      for (int64_t i = 0; extreme && i < n_rows * n_in; ++i) x[i] = (i / n_in) % 2 ? 1.0f : -1.0f;
      std::vector<float> want(n_rows * n_out);
      cpu::matmul_with(*portable, pool, view, x.data(), n_rows, want.data(), scratch);
      for (const char* path : kPaths) {
        const cpu::CpuKernels* kernels = cpu::cpu_kernels_for(path);
        if (!kernels) continue;
        std::vector<float> y(n_rows * n_out);
        cpu::matmul_with(*kernels, pool, view, x.data(), n_rows, y.data(), scratch);
        EXPECT_EQ(0, std::memcmp(want.data(), y.data(), y.size() * sizeof(float)))
            << path << " rows " << n_rows << (extreme ? " extreme" : " random");
      }
    }
  }
}

// A tied embedding table reads its rows back from the packed copy: every row must come back as
// the GGUF bytes it was packed from (the k-quant layouts do not undo, and say so).
TEST_P(PackedMatmulTest, UnpackRowGivesTheGgufRow) {
  const auto [type, n_in] = GetParam();
  const int64_t n_out = 24;
  std::mt19937 rng(9 + static_cast<int>(type));
  const auto w = random_weights(type, n_out, n_in, rng);
  WeightView view{type, w.data(), n_out, n_in};
  const auto packed_buf = cpu::pack_matrix(view, nullptr);
  view.packed = packed_buf.get();
  const size_t bytes = row_bytes(type, n_in);
  std::vector<uint8_t> row(bytes);
  const bool undoable = type != DType::kQ4_K && type != DType::kQ6_K;
  for (int64_t r = 0; r < n_out; ++r) {
    ASSERT_EQ(undoable, cpu::unpack_row(view, r, row.data()));
    if (undoable) {
      EXPECT_EQ(0, std::memcmp(row.data(), &w[r * bytes], bytes)) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KQuants, PackedMatmulTest,
                         testing::Values(Case{DType::kQ4_K, 768}, Case{DType::kQ4_K, 1536},
                                         Case{DType::kQ6_K, 768}, Case{DType::kQ6_K, 1536}),
                         case_name);

// The legacy 32-quant formats: random quant bytes cover every nibble, fifth bit and sign
// (Q8_0 quants include -128, the one value whose magnitude the SIMD sign trick must carry).
INSTANTIATE_TEST_SUITE_P(Legacy, PackedMatmulTest,
                         testing::Values(Case{DType::kQ4_0, 160}, Case{DType::kQ4_0, 768},
                                         Case{DType::kQ4_1, 160}, Case{DType::kQ4_1, 576},
                                         Case{DType::kQ5_0, 160}, Case{DType::kQ5_0, 896},
                                         Case{DType::kQ8_0, 160}, Case{DType::kQ8_0, 576}),
                         case_name);

// matmul_multi (Q/K/V, gate/up in one pass) gives the bits of separate matmul calls, whether
// the matrices share an activation format (Q4_K with Q6_K) or not (then it falls back).
TEST(MatmulMulti, SameBitsAsSeparateCalls) {
  const int64_t n_in = 768, n_rows = 6;
  const DType sets[][3] = {{DType::kQ4_K, DType::kQ6_K, DType::kQ4_K},
                           {DType::kQ4_1, DType::kQ4_1, DType::kQ4_1},
                           {DType::kQ8_0, DType::kQ4_0, DType::kQ5_0},
                           {DType::kQ4_1, DType::kQ8_0, DType::kF16}};
  const int64_t n_outs[3] = {48, 16, 24};
  std::mt19937 rng(11);
  const auto x = random_acts(n_rows * n_in, rng);
  ThreadPool pool(2);
  MatmulScratch scratch;
  for (const auto& types : sets) {
    std::vector<uint8_t> w[3];
    std::unique_ptr<uint8_t[]> packed[3];
    WeightView views[3];
    const WeightView* ptrs[3];
    std::vector<float> y_multi[3], y_one[3];
    float* outs[3];
    for (int i = 0; i < 3; ++i) {
      w[i] = random_weights(types[i], n_outs[i], n_in, rng);
      views[i] = WeightView{types[i], w[i].data(), n_outs[i], n_in};
      if (cpu::packable(types[i], n_outs[i], n_in)) {
        packed[i] = cpu::pack_matrix(views[i], nullptr);
        views[i].packed = packed[i].get();
      }
      ptrs[i] = &views[i];
      y_multi[i].resize(n_rows * n_outs[i]);
      y_one[i].resize(n_rows * n_outs[i]);
      outs[i] = y_multi[i].data();
    }
    matmul_multi(pool, ptrs, outs, 3, x.data(), n_rows, scratch);
    for (int i = 0; i < 3; ++i) {
      matmul(pool, views[i], x.data(), n_rows, y_one[i].data(), scratch);
      EXPECT_EQ(0, std::memcmp(y_one[i].data(), y_multi[i].data(), y_one[i].size() * 4))
          << traits(types[i]).name << " matrix " << i;
    }
  }
}

TEST(QuantizeActs, Q8KMatchesGgmlRules) {
  std::mt19937 rng(5);
  auto x = random_acts(512, rng);
  x[300] = -50.0f;  // the signed max of the second block is negative
  std::vector<BlockQ8_K> q(2);
  cpu::quantize_row_q8_k(x.data(), q.data(), 512);
  EXPECT_EQ(q[1].qs[300 - 256], -127);
  EXPECT_FLOAT_EQ(q[1].d, 50.0f / 127.0f);
  for (const auto& b : q) {
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += b.qs[g * 16 + j];
      EXPECT_EQ(sum, b.bsums[g]);
    }
  }
  std::vector<float> zeros(256, 0.0f);
  cpu::quantize_row_q8_k(zeros.data(), q.data(), 256);
  EXPECT_EQ(q[0].d, 0.0f);
}

TEST(QuantizeActs, Q8_0RoundsHalfToEven) {
  std::vector<float> x(32, 0.0f);
  x[0] = 127.0f;  // scale 1: every other value is quantized to its nearest integer
  x[1] = 2.5f;
  x[2] = -3.5f;
  x[3] = 1.49f;
  std::vector<BlockQ8_0> q(1);
  cpu::quantize_row_q8_0(x.data(), q.data(), 32);
  EXPECT_EQ(q[0].qs[0], 127);
  EXPECT_EQ(q[0].qs[1], 2);
  EXPECT_EQ(q[0].qs[2], -4);
  EXPECT_EQ(q[0].qs[3], 1);
  EXPECT_EQ(fp16_to_fp32(q[0].d), 1.0f);
}

TEST(CpuKernelPath, NamesAnAvailablePath) {
  const std::string path = cpu_kernel_path();
  EXPECT_TRUE(path == "portable" || path == "avx2" || path == "avx512") << path;
  EXPECT_NE(cpu::cpu_kernels_for(path.c_str()), nullptr);
}

}  // namespace
}  // namespace salvo
