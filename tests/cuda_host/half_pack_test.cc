// kHalf's weight packing and activation layout (matmul_half.cu, kernels.h), checked on the host:
// no GPU needed, so it runs wherever the CUDA backend is compiled (CI too). The kernel's
// decoding is emulated from the PTX fragment layouts of mma.m16n8k16 (A row-major 16x16: lane
// l holds rows l/4 and l/4 + 8, columns 2(l%4) + {0,1} and + 8; B 16x8: rows 2(l%4) + {0,1}
// and + 8, column l/4) with the kernel's bit operations, and the product compared with the
// reference dequantization (dequantize_row) of the GGUF blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/kernels.h"
#include "models/layers.h"
#include "quant/fp16.h"
#include "quant/types.h"

namespace salvo {
namespace {

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

// v rounded to fp16 (exact products of an fp16 and a small integer: the kernel's one rounding).
float rounded(float v) { return fp16_to_fp32(fp32_to_fp16(v)); }

// Random GGUF blocks with O(0.01-0.1) scales, times `scale`.
std::vector<uint8_t> random_blocks(DType type, int64_t n_out, int64_t n_in, uint32_t seed,
                                   float scale) {
  std::mt19937 rng(seed);
  const DTypeTraits& t = traits(type);
  const size_t n_blocks = n_out * n_in / t.block_size;
  std::vector<uint8_t> bytes(n_blocks * t.block_bytes);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> d(0.01f * scale, 0.1f * scale);
  auto put = [&](size_t at, float v) {
    const uint16_t h = fp32_to_fp16(v);
    std::memcpy(&bytes[at], &h, 2);
  };
  for (size_t i = 0; i < n_blocks; ++i) {
    const size_t at = i * t.block_bytes;
    if (type == DType::kQ6_K) {
      put(at + 208, d(rng) * 0.01f);
    } else {
      put(at, d(rng));
      put(at + 2, d(rng));
    }
  }
  return bytes;
}

// The scale (and, for Q4_K, the negated min) of row rt, k16 step s as the compact layout's kernel
// makes them: Q6_K's byte sc + 128 and the row's d (HMUL2: one rounding); Q4_K's bytes 4 sc, 4 m
// and the row's half2 (256 d, -256 dmin), whose HFMA2 (1 + 4 sc / 1024) 256 d - 256 d is d sc,
// rounded once. Rows g and g + 8 share 32 bytes of scale bytes and a pair of d.
void scales_of(DType type, const uint8_t* c, int rt, int s, float* scale, float* neg_min) {
  const int g = rt % 8, h = rt / 8;
  if (type == DType::kQ6_K) {
    const int sc = c[3072 + 32 * g + 2 * s + h] - 128;
    *scale = rounded(static_cast<float>(sc) * half_at(c + 3328 + 4 * g + 2 * h));
    *neg_min = 0.0f;
    return;
  }
  const uint8_t* b = c + 2048 + 32 * g + 4 * (s / 2) + 2 * h;
  const uint8_t* dm = c + 2304 + 8 * g + 4 * h;
  *scale = rounded(b[0] / 1024.0f * half_at(dm));
  *neg_min = rounded(b[1] / 1024.0f * half_at(dm + 2));
}

// Weight (row rt of the tile, column k of the super-block) as the kernel's registers hold it,
// with the kernel's bit operations: even registers j take bits 4 j' .. of w >> 8 (j / 2) as
// 1024 + q, odd ones bits 4-7 of it as 1024 + 16 q (x / 16 - 64, or - 96 for Q6_K's q - 32).
float decoded(DType type, const uint8_t* c, int rt, int k, bool compact) {
  const int s = k / 16, kk = k % 16, t = (kk % 8) / 2, e = kk % 2, jj = kk / 8;
  const int g = rt % 8, j = rt / 8 + 2 * jj, lane = 4 * g + t;
  const bool odd = j % 2 == 1;
  uint32_t w;
  std::memcpy(&w, c + 16 * (32 * (s / 4) + lane) + 4 * (s % 4), 4);
  w >>= 8 * (j / 2);
  uint32_t raw = (w & (odd ? 0x00F000F0u : 0x000F000Fu)) | 0x64006400u;
  float q = 0.0f;
  if (type == DType::kQ6_K) {
    uint32_t hw;
    std::memcpy(&hw, c + 2048 + 16 * (32 * (s / 8) + lane) + 4 * ((s / 2) % 4), 4);
    const int from = 2 * j + 8 * (s % 2), to = odd ? 8 : 4;
    raw |= (from >= to ? hw >> (from - to) : hw << (to - from)) & (odd ? 0x03000300u : 0x00300030u);
    const float x = fp16_to_fp32(static_cast<uint16_t>(raw >> (16 * e)));
    q = odd ? x / 16.0f - 96.0f : x - 1056.0f;
    if (!compact) return q * half_at(c + 3072 + 32 * rt + 2 * s);  // the row's own slot
  } else {
    const float x = fp16_to_fp32(static_cast<uint16_t>(raw >> (16 * e)));
    q = odd ? x / 16.0f - 64.0f : x - 1024.0f;
    if (!compact) {
      const uint8_t* sm = c + 2048 + 4 * (8 * rt + s / 2);  // half2 (d sc, dmin m)
      return q * half_at(sm) - half_at(sm + 2);
    }
  }
  float scale = 0.0f, neg_min = 0.0f;  // Q6_K's neg_min is 0
  scales_of(type, c, rt, s, &scale, &neg_min);
  return q * scale + neg_min;
}

// Also with scales near 1e-5 (d x 1e-3), where fp16 scales without the packing's power of two
// would be subnormal.
TEST(HalfPack, DecodesToTheReferenceWeights) {
  for (bool compact : {false, true})
    for (DType type : {DType::kQ4_K, DType::kQ6_K})
      for (float d_scale : {1.0f, 1e-3f}) {
        SCOPED_TRACE(std::string(traits(type).name) + " " + std::to_string(d_scale) +
                     (compact ? " compact" : " wide"));
        const int64_t n_out = 40, n_in = 512;  // a partial 16-row tile
        const auto w = random_blocks(type, n_out, n_in, 5, d_scale);
        float scale = 0.0f;
        const auto packed = cuda::pack_half_weights(type, w.data(), n_out, n_in, &scale, compact);
        const int chunk =
            compact ? (type == DType::kQ4_K ? 2368 : 3360) : (type == DType::kQ4_K ? 2560 : 3584);
        const int64_t n_sb = n_in / 256;
        ASSERT_EQ(packed.size(), static_cast<size_t>((n_out + 15) / 16 * n_sb * chunk));
        EXPECT_EQ(std::log2(scale), std::round(std::log2(scale)));  // a power of two
        double err = 0, ref = 0;
        std::vector<float> row(n_in);
        for (int64_t o = 0; o < n_out; ++o) {
          dequantize_row(type, w.data() + o * row_bytes(type, n_in), row.data(), n_in);
          for (int64_t k = 0; k < n_in; ++k) {
            const uint8_t* c = packed.data() + ((o / 16) * n_sb + k / 256) * chunk;
            const float got =
                decoded(type, c, static_cast<int>(o % 16), static_cast<int>(k % 256), compact);
            // The kernel rounds the dequantized weight to fp16 (hfma2 / hmul2).
            const float as_half = fp16_to_fp32(fp32_to_fp16(got)) * scale;
            err += (as_half - row[k]) * static_cast<double>(as_half - row[k]);
            ref += static_cast<double>(row[k]) * row[k];
          }
        }
        EXPECT_LT(err / ref, 2e-7);
      }
}

// The compact layout's scales are the wide layout's fp16 products, rounded once from the same
// exact values, so both decode every weight to the same bits.
TEST(HalfPack, CompactDecodesToTheWideBits) {
  for (DType type : {DType::kQ4_K, DType::kQ6_K})
    for (float d_scale : {1.0f, 1e-3f}) {
      SCOPED_TRACE(std::string(traits(type).name) + " " + std::to_string(d_scale));
      const int64_t n_out = 32, n_in = 512;
      const auto w = random_blocks(type, n_out, n_in, 9, d_scale);
      float s_wide = 0.0f, s_compact = 0.0f;
      const auto wide = cuda::pack_half_weights(type, w.data(), n_out, n_in, &s_wide, false);
      const auto compact = cuda::pack_half_weights(type, w.data(), n_out, n_in, &s_compact, true);
      ASSERT_EQ(s_wide, s_compact);
      const int64_t n_sb = n_in / 256;
      const int64_t cw = wide.size() / (n_out / 16 * n_sb),
                    cc = compact.size() / (n_out / 16 * n_sb);
      for (int64_t o = 0; o < n_out; ++o) {
        for (int64_t k = 0; k < n_in; ++k) {
          const int64_t chunk = (o / 16) * n_sb + k / 256;
          const int rt = static_cast<int>(o % 16), kk = static_cast<int>(k % 256);
          const float a = decoded(type, wide.data() + chunk * cw, rt, kk, false);
          const float b = decoded(type, compact.data() + chunk * cc, rt, kk, true);
          ASSERT_EQ(a, b) << "row " << o << " column " << k;
        }
      }
    }
}

// Super-block b's scale i (and min, Q4_K) of a GGUF row, read here from the block's bytes (the
// 6-bit pairs of Q4_K's 12 bytes; Q6_K's int8 sc at 192 and fp16 d at 208).
void gguf_scale(DType type, const uint8_t* blk, int i, float* scale, float* min) {
  if (type == DType::kQ6_K) {
    *scale = half_at(blk + 208) * static_cast<float>(static_cast<int8_t>(blk[192 + i]));
    *min = 0.0f;
    return;
  }
  const uint8_t* q = blk + 4;
  const int sc = i < 4 ? q[i] & 63 : (q[i + 4] & 0xF) | ((q[i - 4] >> 6) << 4);
  const int m = i < 4 ? q[i + 4] & 63 : (q[i + 4] >> 4) | ((q[i] >> 6) << 4);
  *scale = half_at(blk) * static_cast<float>(sc);
  *min = half_at(blk + 2) * static_cast<float>(m);
}

// Each scale the compact layout's kernel makes is the GGUF's exact product d sc (and dmin m)
// times the matrix's power of two, rounded to fp16 once, from the GGUF block's own bytes.
TEST(HalfPack, ScalesAreTheGgufProductsRoundedOnce) {
  for (DType type : {DType::kQ4_K, DType::kQ6_K})
    for (float d_scale : {1.0f, 1e-3f}) {
      SCOPED_TRACE(std::string(traits(type).name) + " " + std::to_string(d_scale));
      const int64_t n_out = 32, n_in = 512;
      const auto w = random_blocks(type, n_out, n_in, 9, d_scale);
      float scale = 0.0f;
      const auto packed = cuda::pack_half_weights(type, w.data(), n_out, n_in, &scale, true);
      const int64_t n_sb = n_in / 256, bb = traits(type).block_bytes;
      const int chunk = type == DType::kQ4_K ? 2368 : 3360;
      for (int64_t o = 0; o < n_out; ++o) {
        for (int64_t b = 0; b < n_sb; ++b) {
          const uint8_t* c = packed.data() + ((o / 16) * n_sb + b) * chunk;
          for (int s = 0; s < 16; ++s) {  // k16 steps: Q4_K's sub-block s / 2, Q6_K's group s
            const int i = type == DType::kQ4_K ? s / 2 : s;
            float want = 0.0f, want_min = 0.0f, got = 0.0f, got_neg_min = 0.0f;
            gguf_scale(type, w.data() + (o * n_sb + b) * bb, i, &want, &want_min);
            scales_of(type, c, static_cast<int>(o % 16), s, &got, &got_neg_min);
            ASSERT_EQ(got, rounded(want / scale)) << "row " << o << " block " << b << " " << i;
            ASSERT_EQ(got_neg_min, rounded(-want_min / scale)) << "row " << o << " min " << i;
          }
        }
      }
    }
}

// A super-block whose scales are all 0 decodes to zeros, whatever its d: the packing stores its
// d as 0, where 256 d times the matrix's power of two would overflow fp16 (inf - inf in the
// kernel's HFMA2).
TEST(HalfPack, ZeroScalesDecodeToZeroWhateverTheirD) {
  for (DType type : {DType::kQ4_K, DType::kQ6_K}) {
    SCOPED_TRACE(traits(type).name);
    const int64_t n_out = 16, n_in = 256;
    auto w = random_blocks(type, n_out, n_in, 7, 1.0f);
    const size_t bb = traits(type).block_bytes;
    const uint16_t big = fp32_to_fp16(60000.0f);
    if (type == DType::kQ4_K) {
      std::memset(&w[4 * bb], 0, 16);  // row 4: d, dmin and the 12 scale bytes
      std::memcpy(&w[4 * bb], &big, 2);
      std::memcpy(&w[4 * bb + 2], &big, 2);
    } else {
      std::memset(&w[4 * bb + 192], 0, 16);
      std::memcpy(&w[4 * bb + 208], &big, 2);
    }
    float scale = 0.0f;
    const auto packed = cuda::pack_half_weights(type, w.data(), n_out, n_in, &scale, true);
    double err = 0, ref = 0;
    std::vector<float> row(n_in);
    for (int64_t o = 0; o < n_out; ++o) {
      dequantize_row(type, w.data() + o * row_bytes(type, n_in), row.data(), n_in);
      for (int64_t k = 0; k < n_in; ++k) {
        const float got =
            decoded(type, packed.data(), static_cast<int>(o), static_cast<int>(k), true);
        ASSERT_TRUE(std::isfinite(got)) << "row " << o << " column " << k;
        if (o == 4) {
          EXPECT_EQ(got, 0.0f);
        }
        const double diff = rounded(got) * scale - row[k];
        err += diff * diff;
        ref += static_cast<double>(row[k]) * row[k];
      }
    }
    EXPECT_LT(err / ref, 2e-7);
  }
}

// half_frag_index puts element (r, k) where lane 4 (r % 8) + (k % 8) / 2 finds B row k % 16,
// column r % 8 of its k16 step: b0 = halves 0-1 (rows 2t, 2t+1), b1 = halves 2-3 (2t+8, 2t+9),
// the step's second k16 half in halves 4-7.
TEST(HalfPack, FragmentIndexIsTheMmaBLayout) {
  const int64_t n_in = 96;
  std::vector<int> seen(2 * 8 * n_in, 0);
  for (int64_t r = 0; r < 16; ++r) {
    for (int64_t k = 0; k < n_in; ++k) {
      const int64_t i = cuda::half_frag_index(r, k, n_in);
      ASSERT_LT(i, static_cast<int64_t>(seen.size()));
      ++seen[i];
      const int64_t lane = (i / 8) % 32, half = i % 8, chunk = (i / 256) % (n_in / 32);
      const int64_t tile = i / 256 / (n_in / 32);
      EXPECT_EQ(tile, r / 8);
      EXPECT_EQ(chunk, k / 32);
      EXPECT_EQ(lane / 4, r % 8);
      const int64_t step_k = 16 * (half / 4) + 2 * (lane % 4) + 8 * ((half % 4) / 2) + half % 2;
      EXPECT_EQ(step_k, k % 32);
    }
  }
  for (int v : seen) EXPECT_EQ(v, 1);  // a bijection
}

}  // namespace
}  // namespace salvo
