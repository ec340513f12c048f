// Every CUDA op against the CPU reference (tier 2 of the house test plan): quantized matmul for
// each weight type against the reference dequantization and a double-precision dot product,
// the element-wise and per-row ops against src/ops, attention with the tree mask against
// ops::attention over the same cache, KV commit against KvCache::commit. Needs a GPU: registered
// only with -DSALVO_CUDA_TESTS=ON (label cuda).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels.h"
#include "models/layers.h"
#include "ops/ops.h"
#include "quant/fp16.h"
#include "util/thread_pool.h"

namespace salvo {
namespace {

// Normalised mean squared error of `got` against `want`.
double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    ref += static_cast<double>(want[i]) * want[i];
  }
  return ref > 0 ? err / ref : err;
}

// A device copy of a host vector, freed at scope end.
template <typename T>
struct Dev {
  T* ptr = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<T>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  explicit Dev(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(1, n) * sizeof(T)), cudaSuccess);
  }
  ~Dev() { cudaFree(ptr); }
  std::vector<T> host() const {
    std::vector<T> out(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
};

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// The values a half-precision cache slot holds for x (KvCache stores IEEE halves).
std::vector<float> half_rounded(std::vector<float> x) {
  for (float& v : x) v = fp16_to_fp32(fp32_to_fp16(v));
  return x;
}

// The fp16 bits of each value (the device KV cache's form).
std::vector<uint16_t> halves(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = fp32_to_fp16(x[i]);
  return h;
}

void put_f16(std::vector<uint8_t>& bytes, size_t at, float value) {
  const uint16_t h = fp32_to_fp16(value);
  std::memcpy(&bytes[at], &h, 2);
}

// Random blocks of `type` for [n_out, n_in] with scales that keep the values O(1).
std::vector<uint8_t> random_weights(DType type, int64_t n_out, int64_t n_in, uint32_t seed) {
  std::mt19937 rng(seed);
  if (type == DType::kF32) {
    auto f = random_floats(n_out * n_in, seed);
    std::vector<uint8_t> bytes(f.size() * 4);
    std::memcpy(bytes.data(), f.data(), bytes.size());
    return bytes;
  }
  if (type == DType::kF16 || type == DType::kBF16) {
    auto f = random_floats(n_out * n_in, seed);
    std::vector<uint8_t> bytes(f.size() * 2);
    for (size_t i = 0; i < f.size(); ++i) {
      const uint16_t h = type == DType::kF16 ? fp32_to_fp16(f[i]) : fp32_to_bits(f[i]) >> 16;
      std::memcpy(&bytes[2 * i], &h, 2);
    }
    return bytes;
  }
  const DTypeTraits& t = traits(type);
  const size_t n_blocks = n_out * n_in / t.block_size;
  std::vector<uint8_t> bytes(n_blocks * t.block_bytes);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> d(0.01f, 0.1f);
  for (size_t i = 0; i < n_blocks; ++i) {
    const size_t at = i * t.block_bytes;
    if (type == DType::kQ6_K) {
      put_f16(bytes, at + 208, d(rng) * 0.01f);
    } else {
      put_f16(bytes, at, d(rng));  // d of every other format is the first field
      if (type == DType::kQ4_1 || type == DType::kQ4_K || type == DType::kQ5_K) {
        put_f16(bytes, at + 2, d(rng));  // m / dmin
      }
    }
  }
  return bytes;
}

// y = x W^T + bias in double precision, W given dequantized ([n_out, n_in]).
std::vector<float> reference_matmul(const std::vector<float>& wf, const std::vector<float>& x,
                                    const std::vector<float>& bias, int n_rows, int64_t n_out,
                                    int64_t n_in) {
  std::vector<float> want(n_rows * n_out);
  for (int r = 0; r < n_rows; ++r) {
    for (int64_t o = 0; o < n_out; ++o) {
      double s = bias[o];
      for (int64_t i = 0; i < n_in; ++i)
        s += static_cast<double>(wf[o * n_in + i]) * x[r * n_in + i];
      want[r * n_out + o] = static_cast<float>(s);
    }
  }
  return want;
}

// Row invariance: each row of y (from the launch p of p.n_rows rows) bit-identical to that row
// launched alone (p.x's row, converted by matmul() itself).
void expect_rows_alone_equal(const cuda::MatmulParams& p, const std::vector<float>& y) {
  std::vector<float> y1(p.n_out);
  float* dy1 = nullptr;
  ASSERT_EQ(cudaMalloc(&dy1, p.n_out * sizeof(float)), cudaSuccess);
  for (int r = 0; r < p.n_rows; ++r) {
    cuda::MatmulParams one = p;
    one.x = p.x + r * p.n_in;
    one.n_rows = 1;
    one.y = dy1;
    one.xq = {};
    cuda::matmul(one, nullptr);
    ASSERT_EQ(cudaMemcpy(y1.data(), dy1, p.n_out * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    if (std::memcmp(y1.data(), &y[r * p.n_out], p.n_out * sizeof(float)) != 0) {
      ADD_FAILURE() << "row " << r << " differs from its launch alone";
      break;
    }
  }
  cudaFree(dy1);
}

constexpr DType kWeightTypes[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0,
                                  DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K,
                                  DType::kQ5_K, DType::kQ6_K};

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status st = cuda::check_available();
    ASSERT_TRUE(st.ok()) << st.message();
  }
};

// Every matmul variant on every weight type it supports: against the reference, and row
// invariant (each row bit-identical to a launch holding that row alone, 64-row pieces included).
// Shapes: 512 -> 96 (whole 32-row tiles), and a wider, shorter one (a partial 32-row tile, more k
// slices; for the 32-element formats 43 blocks: a partial last unit of 4 blocks and rows that
// start at 2-byte offsets; for the k-quants 7 blocks, Q6_K rows likewise misaligned), and a
// narrow, long one whose tiles split k across blocks (4 blocks a tile for the k-quants, 8 for
// the 32-element formats; 300 rows pass the split scratch's 256 and run as two launches).
TEST_F(CudaOps, MatmulEveryTypeMatchesReferenceAndIsRowInvariant) {
  struct Shape {
    int64_t n_in_k, n_in_32, n_out;  // n_in for the 256- and the 32-element formats
    std::vector<int> rows;
  };
  const Shape shapes[] = {{512, 512, 96, {1, 2, 3, 5, 8, 16, 17, 24, 33, 64, 100, 200}},
                          {1792, 1376, 40, {1, 3, 8, 9}},
                          {8192, 8192, 40, {1, 5, 8, 9, 17, 300}}};
  for (const Shape& shape : shapes) {
    for (cuda::MatmulVariant variant :
         {cuda::MatmulVariant::kFloat, cuda::MatmulVariant::kMma, cuda::MatmulVariant::kQ8}) {
      // The q8 variants quantize the activations to int8 per 32-element block (relative error
      // ~3e-5). kQ8 runs dp4a up to 8 rows and mma beyond: the invariance check below compares
      // the two kernels bit for bit.
      const double bound = cuda::variant_takes_q8(variant) ? 5e-4 : 1e-10;
      for (DType type : kWeightTypes) {
        if (!cuda::variant_supports(variant, type)) continue;
        const int64_t n_out = shape.n_out;
        const int64_t n_in = traits(type).block_size == 256 ? shape.n_in_k : shape.n_in_32;
        SCOPED_TRACE(std::string(traits(type).name) + " " + cuda::variant_name(variant) + " " +
                     std::to_string(n_in) + "->" + std::to_string(n_out));
        const auto w = random_weights(type, n_out, n_in, 7);
        std::vector<float> wf(n_out * n_in);
        for (int64_t o = 0; o < n_out; ++o) {
          dequantize_row(type, w.data() + o * row_bytes(type, n_in), &wf[o * n_in], n_in);
        }
        const std::vector<float> bias = random_floats(n_out, 3);
        Dev<uint8_t> dw(w);
        Dev<float> dbias(bias);
        for (int n_rows : shape.rows) {
          SCOPED_TRACE(n_rows);
          const auto x = random_floats(n_rows * n_in, 11);
          Dev<float> dx(x), dy(n_rows * n_out);
          cuda::MatmulParams p{.type = type,
                               .w = dw.ptr,
                               .n_out = n_out,
                               .n_in = n_in,
                               .x = dx.ptr,
                               .n_rows = n_rows,
                               .y = dy.ptr,
                               .bias = dbias.ptr,
                               .variant = variant,
                               .xq = {}};
          cuda::matmul(p, nullptr);
          const auto y = dy.host();
          EXPECT_LT(nmse(y, reference_matmul(wf, x, bias, n_rows, n_out, n_in)), bound);
          expect_rows_alone_equal(p, y);
        }
      }
    }
  }
}

// The int8 activation blocks against a scalar reference of the same rounding.
TEST_F(CudaOps, QuantizeRowsMatchesReference) {
  const int rows = 3, n_in = 256, stride = 4;
  auto x = random_floats(rows * n_in, 21, 2.0f);
  for (int i = 0; i < 32; ++i) x[32 + i] = 0.0f;  // an all-zero block: d = 0, quants 0
  Dev<float> dx(x);
  Dev<int8_t> dq(rows * n_in);
  Dev<cuda::Q8Meta> dmeta((n_in / 32) * stride);
  cuda::quantize_rows(dx.ptr, rows, n_in, dq.ptr, dmeta.ptr, stride, nullptr);
  const auto q = dq.host();
  const auto meta = dmeta.host();
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < n_in / 32; ++b) {
      const float* xb = &x[r * n_in + 32 * b];
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float d = amax / 127.0f;
      int sums[2] = {0, 0};
      for (int i = 0; i < 32; ++i) {
        const int want = d > 0 ? static_cast<int>(std::nearbyint(xb[i] / d)) : 0;
        ASSERT_EQ(q[r * n_in + 32 * b + i], want) << r << " " << b << " " << i;
        sums[i / 16] += want;
      }
      const cuda::Q8Meta& m = meta[b * stride + r];
      EXPECT_EQ(m.d, d);
      EXPECT_EQ(m.sum_lo, sums[0]);
      EXPECT_EQ(m.sum_hi, sums[1]);
    }
  }
}

TEST_F(CudaOps, EmbedEveryType) {
  const int64_t dim = 512, n_vocab = 40;
  const std::vector<int32_t> tokens = {3, 0, 39, 17, 3};
  for (DType type : kWeightTypes) {
    SCOPED_TRACE(std::string(traits(type).name));
    const auto table = random_weights(type, n_vocab, dim, 5);
    WeightView view{.type = type, .data = table.data(), .n_out = n_vocab, .n_in = dim};
    std::vector<float> want(tokens.size() * dim);
    ops::embed(view, tokens.data(), tokens.size(), want.data());
    Dev<uint8_t> dt(table);
    Dev<int32_t> dtok(tokens);
    Dev<float> out(tokens.size() * dim);
    cuda::embed(type, dt.ptr, dim, dtok.ptr, tokens.size(), out.ptr, nullptr);
    EXPECT_EQ(out.host(), want);  // dequantization is exact float arithmetic on both sides
  }
}

TEST_F(CudaOps, RmsNormActivationsAddScaleGather) {
  const int rows = 7, dim = 896;
  const auto x = random_floats(rows * dim, 1, 3.0f), w = random_floats(dim, 2);
  std::vector<float> want(rows * dim);
  ops::rms_norm(x.data(), w.data(), want.data(), rows, dim, 1e-6f);
  Dev<float> dx(x), dw(w), dy(rows * dim);
  cuda::rms_norm(dx.ptr, dw.ptr, dy.ptr, rows, dim, 1e-6f, nullptr);
  EXPECT_LT(nmse(dy.host(), want), 1e-12);

  // The fused residual add + norm, with out aliasing h as the model uses it.
  const auto resid = random_floats(rows * dim, 6);
  std::vector<float> want_x = x, want_h(rows * dim);
  ops::add(want_x.data(), resid.data(), want_x.size());
  ops::rms_norm(want_x.data(), w.data(), want_h.data(), rows, dim, 1e-6f);
  Dev<float> fx(x), fh(resid);
  cuda::add_rms_norm(fx.ptr, fh.ptr, dw.ptr, fh.ptr, rows, dim, 1e-6f, nullptr);
  EXPECT_EQ(fx.host(), want_x);
  EXPECT_LT(nmse(fh.host(), want_h), 1e-12);

  const auto g = random_floats(rows * dim, 3, 2.0f), u = random_floats(rows * dim, 4);
  for (bool gelu : {false, true}) {
    std::vector<float> want_g = g;
    if (gelu) {
      ops::gelu_tanh_mul(want_g.data(), u.data(), want_g.size());
    } else {
      ops::silu_mul(want_g.data(), u.data(), want_g.size());
    }
    Dev<float> dg(g), du(u);
    if (gelu) {
      cuda::gelu_tanh_mul(dg.ptr, du.ptr, g.size(), nullptr);
    } else {
      cuda::silu_mul(dg.ptr, du.ptr, g.size(), nullptr);
    }
    EXPECT_LT(nmse(dg.host(), want_g), 1e-12) << (gelu ? "gelu" : "silu");
  }

  std::vector<float> sum = g;
  ops::add(sum.data(), u.data(), sum.size());
  ops::scale(sum.data(), 0.5f, sum.size());
  Dev<float> ds(g), du(u);
  cuda::add(ds.ptr, du.ptr, g.size(), nullptr);
  cuda::scale(ds.ptr, 0.5f, g.size(), nullptr);
  EXPECT_EQ(ds.host(), sum);

  const std::vector<int32_t> rows_wanted = {6, 0, 3};
  Dev<int32_t> drows(rows_wanted);
  Dev<float> gathered(rows_wanted.size() * dim);
  cuda::gather_rows(dx.ptr, drows.ptr, rows_wanted.size(), dim, gathered.ptr, nullptr);
  const auto got = gathered.host();
  for (size_t j = 0; j < rows_wanted.size(); ++j) {
    EXPECT_TRUE(std::equal(got.begin() + j * dim, got.begin() + (j + 1) * dim,
                           x.begin() + rows_wanted[j] * dim));
  }
}

// kHalf's fp16 fragments of n rows (rounded up to 8), and a zeroed host vector of that size
// (the fused kernels leave the padding rows as they find them; half_frags writes zeros).
size_t frag_halves(int64_t n, int64_t width) { return cuda::half_frag_rows(n) * width; }
std::vector<uint16_t> zeros_u16(size_t n) { return std::vector<uint16_t>(n, 0); }

bool same_meta(const std::vector<cuda::Q8Meta>& a, const std::vector<cuda::Q8Meta>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].d != b[i].d || a[i].sum_lo != b[i].sum_lo || a[i].sum_hi != b[i].sum_hi) return false;
  }
  return true;
}

// The fused kernels give the bits of the unfused sequence they replace: the norms and gated
// activations with the int8 copy of their output (quantize_rows), RoPE with the K/V stores.
TEST_F(CudaOps, FusedOpsGiveTheUnfusedBits) {
  const int rows = 5, dim = 896;
  const auto x = random_floats(rows * dim, 31, 3.0f), w = random_floats(dim, 32);
  const auto h = random_floats(rows * dim, 33);
  Dev<float> dw(w);
  for (bool residual : {false, true}) {
    SCOPED_TRACE(residual);
    Dev<float> x1(x), h1(h), x2(x), h2(h);
    Dev<int8_t> q1(rows * dim), q2(rows * dim);
    Dev<cuda::Q8Meta> m1(dim / 32 * rows), m2(dim / 32 * rows);
    if (residual) {
      cuda::add_rms_norm(x1.ptr, h1.ptr, dw.ptr, h1.ptr, rows, dim, 1e-6f, nullptr);
    } else {
      cuda::rms_norm(x1.ptr, dw.ptr, h1.ptr, rows, dim, 1e-6f, nullptr);
    }
    Dev<uint16_t> f1(frag_halves(rows, dim)), f2(zeros_u16(f1.n));
    cuda::quantize_rows(h1.ptr, rows, dim, q1.ptr, m1.ptr, rows, nullptr);
    cuda::half_frags(h1.ptr, rows, dim, f1.ptr, nullptr);
    cuda::rms_norm_q8(x2.ptr, residual ? h2.ptr : nullptr, dw.ptr, h2.ptr, rows, dim, 1e-6f,
                      {q2.ptr, m2.ptr, rows, f2.ptr}, nullptr);
    EXPECT_EQ(x2.host(), x1.host());
    EXPECT_EQ(h2.host(), h1.host());
    EXPECT_EQ(q2.host(), q1.host());
    EXPECT_TRUE(same_meta(m2.host(), m1.host()));
    EXPECT_EQ(f2.host(), f1.host());
  }
  for (cuda::GatedAct act : {cuda::GatedAct::kSilu, cuda::GatedAct::kGeluTanh}) {
    Dev<float> g1(x), g2(x), du(h);
    Dev<int8_t> q1(rows * dim), q2(rows * dim);
    Dev<cuda::Q8Meta> m1(dim / 32 * rows), m2(dim / 32 * rows);
    if (act == cuda::GatedAct::kSilu) {
      cuda::silu_mul(g1.ptr, du.ptr, rows * dim, nullptr);
    } else {
      cuda::gelu_tanh_mul(g1.ptr, du.ptr, rows * dim, nullptr);
    }
    Dev<uint16_t> f1(frag_halves(rows, dim)), f2(zeros_u16(f1.n));
    cuda::quantize_rows(g1.ptr, rows, dim, q1.ptr, m1.ptr, rows, nullptr);
    cuda::half_frags(g1.ptr, rows, dim, f1.ptr, nullptr);
    cuda::gated_act_q8(act, g2.ptr, du.ptr, rows, dim, {q2.ptr, m2.ptr, rows, f2.ptr}, nullptr);
    EXPECT_EQ(g2.host(), g1.host());
    EXPECT_EQ(q2.host(), q1.host());
    EXPECT_TRUE(same_meta(m2.host(), m1.host()));
    EXPECT_EQ(f2.host(), f1.host());
  }
  // RoPE + stores: 3 rows of two sequences into a 2-sequence, 16-slot cache.
  const int n_head = 6, n_head_kv = 2, head_dim = 64, capacity = 16;
  const std::vector<int32_t> seq = {0, 1, 1}, pos = {3, 7, 8}, slot = {3, 7, 8};
  Dev<int32_t> dseq(seq), dpos(pos), dslot(slot);
  const cuda::BatchView bv{.n_rows = 3, .seq = dseq.ptr, .pos = dpos.ptr, .slot = dslot.ptr};
  for (RopeMode mode : {RopeMode::kRopeNorm, RopeMode::kRopeNeox}) {
    const auto q = random_floats(3 * n_head * head_dim, 34),
               k = random_floats(3 * n_head_kv * head_dim, 35);
    const auto v = random_floats(3 * n_head_kv * head_dim, 36);
    Dev<float> q1(q), k1(k), q2(q), k2(k), dv(v);
    Dev<uint16_t> kc1(2 * capacity * n_head_kv * head_dim), vc1(kc1.n), kc2(kc1.n), vc2(kc1.n);
    cudaMemset(kc1.ptr, 0, kc1.n * 2), cudaMemset(vc1.ptr, 0, kc1.n * 2);
    cudaMemset(kc2.ptr, 0, kc1.n * 2), cudaMemset(vc2.ptr, 0, kc1.n * 2);
    const int width = n_head_kv * head_dim;
    cuda::rope(q1.ptr, dpos.ptr, 3, n_head, head_dim, 48, 1e4f, mode, nullptr);
    cuda::rope(k1.ptr, dpos.ptr, 3, n_head_kv, head_dim, 48, 1e4f, mode, nullptr);
    cuda::store_kv(bv, {kc1.ptr, vc1.ptr, capacity, width, width}, k1.ptr, dv.ptr, nullptr);
    cuda::rope_store_kv({.batch = bv,
                         .kv = {kc2.ptr, vc2.ptr, capacity, width, width},
                         .q = q2.ptr,
                         .k = k2.ptr,
                         .v = dv.ptr,
                         .n_head = n_head,
                         .n_head_kv = n_head_kv,
                         .head_dim = head_dim,
                         .n_rot = 48,
                         .base = 1e4f,
                         .mode = mode},
                        nullptr);
    EXPECT_EQ(q2.host(), q1.host());
    EXPECT_EQ(k2.host(), k1.host());
    EXPECT_EQ(kc2.host(), kc1.host());
    EXPECT_EQ(vc2.host(), vc1.host());
  }
  // With a drafter's q and k norms inside (rms_norm per head first; the same per-thread sums
  // and block sum, so the same bits), and the k-only form of its context rows (n_head 0).
  for (int dim : {64, 128}) {
    SCOPED_TRACE(dim);
    const auto q = random_floats(3 * n_head * dim, 37, 2.0f),
               k = random_floats(3 * n_head_kv * dim, 38, 2.0f);
    const auto v = random_floats(3 * n_head_kv * dim, 39);
    const auto qw = random_floats(dim, 40), kw = random_floats(dim, 41);
    Dev<float> q1(q), k1(k), q2(q), k2(k), k3(k), dv(v), dqw(qw), dkw(kw);
    const int width = n_head_kv * dim;
    Dev<uint16_t> kc1(2 * capacity * width), vc1(kc1.n), kc2(kc1.n), vc2(kc1.n), kc3(kc1.n),
        vc3(kc1.n);
    for (Dev<uint16_t>* c : {&kc1, &vc1, &kc2, &vc2, &kc3, &vc3}) cudaMemset(c->ptr, 0, c->n * 2);
    cuda::rms_norm(q1.ptr, dqw.ptr, q1.ptr, 3 * n_head, dim, 1e-6f, nullptr);
    cuda::rms_norm(k1.ptr, dkw.ptr, k1.ptr, 3 * n_head_kv, dim, 1e-6f, nullptr);
    cuda::rope(q1.ptr, dpos.ptr, 3, n_head, dim, dim, 1e6f, RopeMode::kRopeNeox, nullptr);
    cuda::rope(k1.ptr, dpos.ptr, 3, n_head_kv, dim, dim, 1e6f, RopeMode::kRopeNeox, nullptr);
    cuda::store_kv(bv, {kc1.ptr, vc1.ptr, capacity, width, width}, k1.ptr, dv.ptr, nullptr);
    const cuda::RopeStoreParams fused{.batch = bv,
                                      .kv = {kc2.ptr, vc2.ptr, capacity, width, width},
                                      .q = q2.ptr,
                                      .k = k2.ptr,
                                      .v = dv.ptr,
                                      .n_head = n_head,
                                      .n_head_kv = n_head_kv,
                                      .head_dim = dim,
                                      .n_rot = dim,
                                      .base = 1e6f,
                                      .mode = RopeMode::kRopeNeox,
                                      .q_norm = dqw.ptr,
                                      .k_norm = dkw.ptr,
                                      .norm_eps = 1e-6f};
    cuda::rope_store_kv(fused, nullptr);
    cuda::RopeStoreParams k_only = fused;
    k_only.kv = {kc3.ptr, vc3.ptr, capacity, width, width};
    k_only.q = nullptr;
    k_only.k = k3.ptr;
    k_only.n_head = 0;
    cuda::rope_store_kv(k_only, nullptr);
    EXPECT_EQ(q2.host(), q1.host());
    EXPECT_EQ(k2.host(), k1.host());
    EXPECT_EQ(kc2.host(), kc1.host());
    EXPECT_EQ(vc2.host(), vc1.host());
    EXPECT_EQ(k3.host(), k1.host());
    EXPECT_EQ(kc3.host(), kc1.host());
    EXPECT_EQ(vc3.host(), vc1.host());
  }
}

// Q/K/V-like groups in one launch: each matrix close to its own launch, and every row of a
// group bit-identical to the group launched for that row alone (row invariance).
TEST_F(CudaOps, MatmulGroupMatchesSingleLaunchesAndIsRowInvariant) {
  const int64_t n_in = 512;
  const int64_t n_outs[3] = {96, 32, 48};
  // kQ8: the 19-row launches run mma, the one-row launch dp4a (a bitwise check across kernels);
  // 150 rows run as three 64-row pieces of one launch.
  for (int rows : {19, 150}) {
    for (cuda::MatmulVariant variant : {cuda::MatmulVariant::kMma, cuda::MatmulVariant::kQ8}) {
      for (DType type : {DType::kQ4_K, DType::kQ4_0, DType::kQ6_K, DType::kQ8_0}) {
        SCOPED_TRACE(std::string(traits(type).name) + " " + cuda::variant_name(variant) + " " +
                     std::to_string(rows) + " rows");
        const auto x = random_floats(rows * n_in, 41);
        Dev<float> dx(x);
        Dev<int8_t> dq(rows * n_in);
        Dev<cuda::Q8Meta> dm(n_in / 32 * rows);
        cuda::quantize_rows(dx.ptr, rows, n_in, dq.ptr, dm.ptr, rows, nullptr);
        std::vector<std::vector<uint8_t>> weights;
        std::vector<Dev<uint8_t>*> dws;
        std::vector<Dev<float>*> ys, singles;
        cuda::MatmulParams parts[3];
        for (int i = 0; i < 3; ++i) {
          weights.push_back(random_weights(type, n_outs[i], n_in, 50 + i));
          dws.push_back(new Dev<uint8_t>(weights.back()));
          ys.push_back(new Dev<float>(rows * n_outs[i]));
          singles.push_back(new Dev<float>(rows * n_outs[i]));
          parts[i] = {.type = type,
                      .w = dws[i]->ptr,
                      .n_out = n_outs[i],
                      .n_in = n_in,
                      .x = dx.ptr,
                      .n_rows = rows,
                      .y = ys[i]->ptr,
                      .variant = variant,
                      .xq = {dq.ptr, dm.ptr, rows}};
          cuda::MatmulParams single = parts[i];
          single.y = singles[i]->ptr;
          cuda::matmul(single, nullptr);
        }
        cuda::matmul_group(parts, 3, nullptr);
        for (int i = 0; i < 3; ++i) EXPECT_LT(nmse(ys[i]->host(), singles[i]->host()), 1e-10) << i;
        // Row 7 alone.
        Dev<int8_t> dq1(n_in);
        Dev<cuda::Q8Meta> dm1(n_in / 32);
        Dev<float> dx1(std::vector<float>(x.begin() + 7 * n_in, x.begin() + 8 * n_in));
        cuda::quantize_rows(dx1.ptr, 1, n_in, dq1.ptr, dm1.ptr, 1, nullptr);
        cuda::MatmulParams one[3];
        std::vector<Dev<float>*> y1;
        for (int i = 0; i < 3; ++i) {
          y1.push_back(new Dev<float>(n_outs[i]));
          one[i] = parts[i];
          one[i].x = dx1.ptr;
          one[i].n_rows = 1;
          one[i].y = y1[i]->ptr;
          one[i].xq = {dq1.ptr, dm1.ptr, 1};
        }
        cuda::matmul_group(one, 3, nullptr);
        for (int i = 0; i < 3; ++i) {
          const auto all = ys[i]->host(), alone = y1[i]->host();
          EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + 7 * n_outs[i])) << i;
          delete dws[i], delete ys[i], delete singles[i], delete y1[i];
        }
      }
    }
  }
}

// kHalf: Q4_K and Q6_K packed by pack_half_weights against the reference dequantization and a
// double-precision dot product of the fp16-rounded activations (the weights' fp16 scales and
// fp16 dequantization add ~1e-7), and row invariance: every row bit-identical to a launch of
// that row alone, at every n tile count (1-8 rows to 33-64), across 64-row pieces and with k
// split across blocks (the 8192-wide shape), the splits added through global memory or in a
// cluster. A partial 16-row tile at 40 outputs; the largest scales near 1e-5 (the packing's
// power of two keeps them clear of fp16's subnormals). Groups of three match their single
// launches and are row invariant too.
TEST_F(CudaOps, HalfMatmulMatchesReferenceAndIsRowInvariant) {
  struct Shape {
    int64_t n_in, n_out;
    std::vector<int> rows;
    float scale;  // of the blocks' d (random_weights' ~0.01-0.1)
  };
  const Shape shapes[] = {{512, 96, {1, 2, 5, 8, 9, 16, 17, 33, 64, 100}, 1.0f},
                          {1792, 40, {1, 3, 8, 9}, 1.0f},
                          {8192, 40, {1, 8, 16, 17, 70}, 1.0f},
                          {512, 3000, {1, 12}, 1.0f},
                          {512, 48, {1, 3}, 1e-4f}};
  for (const Shape& shape : shapes) {
    for (DType type : {DType::kQ4_K, DType::kQ6_K}) {
      const int64_t n_out = shape.n_out, n_in = shape.n_in;
      SCOPED_TRACE(std::string(traits(type).name) + " " + std::to_string(n_in) + "->" +
                   std::to_string(n_out) + " scale " + std::to_string(shape.scale));
      auto w = random_weights(type, n_out, n_in, 9);
      if (shape.scale != 1.0f) {  // every block's d (and dmin) times scale
        const DTypeTraits& t = traits(type);
        for (size_t at = 0; at < w.size(); at += t.block_bytes) {
          for (size_t f :
               type == DType::kQ6_K ? std::vector<size_t>{208} : std::vector<size_t>{0, 2}) {
            uint16_t hv;
            std::memcpy(&hv, &w[at + f], 2);
            put_f16(w, at + f, fp16_to_fp32(hv) * shape.scale);
          }
        }
      }
      std::vector<float> wf(n_out * n_in);
      for (int64_t o = 0; o < n_out; ++o) {
        dequantize_row(type, w.data() + o * row_bytes(type, n_in), &wf[o * n_in], n_in);
      }
      float half_scale = 0.0f;
      Dev<uint8_t> dw(cuda::pack_half_weights(type, w.data(), n_out, n_in, &half_scale));
      const std::vector<float> bias = random_floats(n_out, 3, shape.scale);
      Dev<float> dbias(bias);
      for (int n_rows : shape.rows) {
        SCOPED_TRACE(n_rows);
        const auto x = half_rounded(random_floats(n_rows * n_in, 11));
        Dev<float> dx(x), dy(n_rows * n_out);
        cuda::MatmulParams p{.type = type,
                             .w = dw.ptr,
                             .n_out = n_out,
                             .n_in = n_in,
                             .x = dx.ptr,
                             .n_rows = n_rows,
                             .y = dy.ptr,
                             .bias = dbias.ptr,
                             .variant = cuda::MatmulVariant::kHalf,
                             .xq = {},
                             .half_scale = half_scale};
        cuda::matmul(p, nullptr);
        const auto y = dy.host();
        EXPECT_LT(nmse(y, reference_matmul(wf, x, bias, n_rows, n_out, n_in)), 2e-6);
        expect_rows_alone_equal(p, y);
        // The k splits added up through global memory instead of in a thread-block cluster
        // (the default; the 8192-wide shape's 8 splits at 1-8 and 16 rows): the same bits.
        Dev<float> dy_global(n_rows * n_out);
        cuda::MatmulParams global = p;
        global.y = dy_global.ptr;
        setenv("SALVO_HALF_CLUSTER", "0", 1);
        cuda::matmul(global, nullptr);
        unsetenv("SALVO_HALF_CLUSTER");
        EXPECT_EQ(dy_global.host(), y);
      }
    }
  }
  // Groups (Q/K/V-like) with fused-op style fragments; the last two mix the formats in one
  // launch (a Q6_K V beside Q4_K Q and K), which must give each part's own launch's bits.
  const int64_t n_in = 1024, n_outs[3] = {96, 32, 48};
  const DType q4 = DType::kQ4_K, q6 = DType::kQ6_K;
  const std::array<DType, 3> type_sets[] = {{q4, q4, q4}, {q6, q6, q6}, {q4, q4, q6}, {q6, q4, q6}};
  for (const auto& types : type_sets) {
    for (int rows : {1, 5, 19, 70}) {
      SCOPED_TRACE(std::string(traits(types[0]).name) + " " + std::string(traits(types[1]).name) +
                   " " + std::string(traits(types[2]).name) + " group " + std::to_string(rows));
      const auto x = random_floats(rows * n_in, 41);
      Dev<float> dx(x);
      Dev<uint16_t> dh(frag_halves(rows, n_in));
      cuda::half_frags(dx.ptr, rows, n_in, dh.ptr, nullptr);
      std::vector<Dev<uint8_t>*> dws;
      std::vector<Dev<float>*> ys, singles, y1;
      cuda::MatmulParams parts[3], one[3];
      Dev<uint16_t> dh1(frag_halves(1, n_in));
      Dev<float> dx1(std::vector<float>(x.begin(), x.begin() + n_in));
      cuda::half_frags(dx1.ptr, 1, n_in, dh1.ptr, nullptr);
      for (int i = 0; i < 3; ++i) {
        const DType type = types[i];
        const auto w = random_weights(type, n_outs[i], n_in, 60 + i);
        float scale = 0.0f;
        dws.push_back(
            new Dev<uint8_t>(cuda::pack_half_weights(type, w.data(), n_outs[i], n_in, &scale)));
        ys.push_back(new Dev<float>(rows * n_outs[i]));
        singles.push_back(new Dev<float>(rows * n_outs[i]));
        y1.push_back(new Dev<float>(n_outs[i]));
        parts[i] = {.type = type,
                    .w = dws[i]->ptr,
                    .n_out = n_outs[i],
                    .n_in = n_in,
                    .x = dx.ptr,
                    .n_rows = rows,
                    .y = ys[i]->ptr,
                    .variant = cuda::MatmulVariant::kHalf,
                    .xq = {.h = dh.ptr},
                    .half_scale = scale};
        cuda::MatmulParams single = parts[i];
        single.y = singles[i]->ptr;
        cuda::matmul(single, nullptr);
        one[i] = parts[i];
        one[i].x = dx1.ptr;
        one[i].n_rows = 1;
        one[i].y = y1[i]->ptr;
        one[i].xq = {.h = dh1.ptr};
      }
      cuda::matmul_group(parts, 3, nullptr);
      cuda::matmul_group(one, 3, nullptr);
      for (int i = 0; i < 3; ++i) {
        const auto all = ys[i]->host(), alone = y1[i]->host();
        EXPECT_EQ(all, singles[i]->host()) << i;  // one shape (8 warps, no split) either way
        EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin())) << i;
        delete dws[i], delete ys[i], delete singles[i], delete y1[i];
      }
    }
  }
}

// gate and up packed as one gated matrix (pack_half_gated), the activation in its launch,
// against the two matrices' group launch and gated_act_q8: the same bits and fp16 fragments at
// every n tile count, across 64-row pieces (70 rows), with 8 warps a block (512 -> 1024) and
// with k split (4096 -> 256), for both activations.
TEST_F(CudaOps, GatedMatmulGivesTheUnfusedBits) {
  const std::pair<int64_t, int64_t> shapes[] = {
      {1536, 8960}, {512, 4608}, {512, 1024}, {4096, 256}};
  for (const auto& [n_in, n_ff] : shapes) {
    for (DType type : {DType::kQ4_K, DType::kQ6_K}) {
      SCOPED_TRACE(std::string(traits(type).name) + " " + std::to_string(n_in) + "->" +
                   std::to_string(n_ff));
      ASSERT_TRUE(cuda::half_gated_supported(type, n_ff, n_in));
      float sg = 0.0f, su = 0.0f, sf = 0.0f;
      const auto wg = random_weights(type, n_ff, n_in, 70),
                 wu = random_weights(type, n_ff, n_in, 71);
      Dev<uint8_t> dg(cuda::pack_half_weights(type, wg.data(), n_ff, n_in, &sg));
      Dev<uint8_t> du(cuda::pack_half_weights(type, wu.data(), n_ff, n_in, &su));
      Dev<uint8_t> df(cuda::pack_half_gated(type, wg.data(), wu.data(), n_ff, n_in, &sf));
      for (int rows : {1, 9, 16, 33, 70}) {
        for (cuda::GatedAct act : {cuda::GatedAct::kSilu, cuda::GatedAct::kGeluTanh}) {
          SCOPED_TRACE(std::to_string(rows) + (act == cuda::GatedAct::kSilu ? " silu" : " gelu"));
          Dev<float> dx(random_floats(rows * n_in, 74, 2.0f));
          Dev<uint16_t> dh(frag_halves(rows, n_in));
          cuda::half_frags(dx.ptr, rows, n_in, dh.ptr, nullptr);
          Dev<float> g1(rows * n_ff), u1(rows * n_ff), g2(rows * n_ff);
          Dev<uint16_t> f1(zeros_u16(frag_halves(rows, n_ff))), f2(zeros_u16(f1.n));
          cuda::MatmulParams parts[2];
          const Dev<uint8_t>* ws[2] = {&dg, &du};
          const float scales[2] = {sg, su};
          float* ys[2] = {g1.ptr, u1.ptr};
          for (int i = 0; i < 2; ++i) {
            parts[i] = {.type = type,
                        .w = ws[i]->ptr,
                        .n_out = n_ff,
                        .n_in = n_in,
                        .x = dx.ptr,
                        .n_rows = rows,
                        .y = ys[i],
                        .variant = cuda::MatmulVariant::kHalf,
                        .xq = {.h = dh.ptr},
                        .half_scale = scales[i]};
          }
          cuda::matmul_group(parts, 2, nullptr);
          cuda::gated_act_q8(act, g1.ptr, u1.ptr, rows, static_cast<int>(n_ff), {.h = f1.ptr},
                             nullptr);
          cuda::MatmulParams fused = parts[0];
          fused.w = df.ptr;
          fused.n_out = 2 * n_ff;
          fused.y = g2.ptr;
          fused.half_scale = sf;
          fused.gated = true;
          fused.gated_act = act;
          fused.gated_h = f2.ptr;
          cuda::matmul(fused, nullptr);
          EXPECT_EQ(g2.host(), g1.host());
          EXPECT_EQ(f2.host(), f1.host());
        }
      }
    }
  }
}

// Q/K/V whose kHalf epilogues apply RoPE and store K/V (HalfRole, Q's and K's rows in
// rope_row_order) against the plain launches followed by rope_store_kv: the same q and cache
// bits, both RoPE modes, full and partial rotation, two head sizes, Q/K and V of one type or
// two (two launches), rows of two sequences; 9 and 70 rows (64-row pieces) take the deferred
// form (RopeEpilogue::rotate false, then rope_store_kv).
TEST_F(CudaOps, RopeEpilogueGivesTheUnfusedBits) {
  const int64_t n_in = 512;
  const int n_head = 4, n_head_kv = 2, capacity = 64;
  for (int head_dim : {64, 128}) {
    for (int n_rot : {head_dim, 48}) {
      for (RopeMode mode : {RopeMode::kRopeNorm, RopeMode::kRopeNeox}) {
        for (DType vtype : {DType::kQ6_K, DType::kQ4_K}) {
          for (const auto& [rows, rotate] : {std::pair{1, true},
                                             {8, true},
                                             {9, true},
                                             {16, true},
                                             {70, true},
                                             {1, false},
                                             {9, false},
                                             {70, false}}) {
            SCOPED_TRACE("head " + std::to_string(head_dim) + " rot " + std::to_string(n_rot) +
                         (mode == RopeMode::kRopeNeox ? " neox " : " norm ") +
                         std::string(traits(vtype).name) + " " + std::to_string(rows) +
                         (rotate ? " rotated" : " deferred"));
            const bool neox = mode == RopeMode::kRopeNeox;
            const int qw = n_head * head_dim, kw = n_head_kv * head_dim;
            const DType types[3] = {DType::kQ4_K, DType::kQ4_K, vtype};
            const int64_t outs[3] = {qw, kw, kw};
            std::vector<int32_t> seq(rows), pos(rows);
            for (int r = 0; r < rows; ++r) seq[r] = r % 2, pos[r] = 5 + r / 2;
            Dev<int32_t> dseq(seq), dpos(pos), dslot(pos);
            const cuda::BatchView bv{
                .n_rows = rows, .seq = dseq.ptr, .pos = dpos.ptr, .slot = dslot.ptr};
            Dev<float> dx(random_floats(rows * n_in, 80, 2.0f));
            Dev<uint16_t> dh(frag_halves(rows, n_in));
            cuda::half_frags(dx.ptr, rows, n_in, dh.ptr, nullptr);
            const std::vector<uint16_t> zero_cache(2 * capacity * kw, 0);
            Dev<uint16_t> kc1(zero_cache), vc1(zero_cache), kc2(zero_cache), vc2(zero_cache);
            const cuda::KvLayerView kv1{kc1.ptr, vc1.ptr, capacity, kw, kw};
            const cuda::KvLayerView kv2{kc2.ptr, vc2.ptr, capacity, kw, kw};
            std::vector<Dev<uint8_t>*> plain_w, rope_w;
            std::vector<Dev<float>*> ys, biases, rope_biases;
            Dev<float> q2(rows * qw), k2(rows * kw), v2(rows * kw);
            cuda::MatmulParams plain[3], fused[3];
            const cuda::HalfRole roles[3] = {cuda::HalfRole::kRopeQ, cuda::HalfRole::kRopeK,
                                             cuda::HalfRole::kStoreV};
            float* fused_y[3] = {q2.ptr, k2.ptr, v2.ptr};
            const cuda::RopeEpilogue re{.batch = bv,
                                        .kv = kv2,
                                        .head_dim = head_dim,
                                        .n_rot = n_rot,
                                        .theta_scale = cuda::rope_theta_scale(1e4f, n_rot),
                                        .neox = neox,
                                        .rotate = rotate};
            for (int i = 0; i < 3; ++i) {
              const auto w = random_weights(types[i], outs[i], n_in, 81 + i);
              const auto bias = random_floats(outs[i], 84 + i, 0.5f);
              std::vector<uint8_t> wp = w;
              std::vector<float> bp = bias;
              if (i < 2) {
                const auto order =
                    cuda::rope_row_order(i == 0 ? n_head : n_head_kv, head_dim, n_rot, neox);
                const size_t rb = row_bytes(types[i], n_in);
                for (size_t r = 0; r < order.size(); ++r) {
                  std::memcpy(&wp[r * rb], &w[order[r] * rb], rb);
                  bp[r] = bias[order[r]];
                }
              }
              float s1 = 0.0f, s2 = 0.0f;
              plain_w.push_back(new Dev<uint8_t>(
                  cuda::pack_half_weights(types[i], w.data(), outs[i], n_in, &s1)));
              rope_w.push_back(new Dev<uint8_t>(
                  cuda::pack_half_weights(types[i], wp.data(), outs[i], n_in, &s2)));
              ys.push_back(new Dev<float>(rows * outs[i]));
              biases.push_back(new Dev<float>(bias));
              rope_biases.push_back(new Dev<float>(bp));
              plain[i] = {.type = types[i],
                          .w = plain_w[i]->ptr,
                          .n_out = outs[i],
                          .n_in = n_in,
                          .x = dx.ptr,
                          .n_rows = rows,
                          .y = ys[i]->ptr,
                          .bias = biases[i]->ptr,
                          .variant = cuda::MatmulVariant::kHalf,
                          .xq = {.h = dh.ptr},
                          .half_scale = s1};
              fused[i] = plain[i];
              fused[i].w = rope_w[i]->ptr;
              fused[i].bias = rope_biases[i]->ptr;
              fused[i].half_scale = s2;
              fused[i].y = fused_y[i];
              fused[i].role = roles[i];
              fused[i].rope = re;
            }
            // The plain launches take Q6_K's V on its own; the fused ones mix it in (one launch).
            const int n_first = vtype == DType::kQ4_K ? 3 : 2;
            auto rope_store = [&](const cuda::KvLayerView& kv, float* q, float* k, float* v) {
              cuda::rope_store_kv({.batch = bv,
                                   .kv = kv,
                                   .q = q,
                                   .k = k,
                                   .v = v,
                                   .n_head = n_head,
                                   .n_head_kv = n_head_kv,
                                   .head_dim = head_dim,
                                   .n_rot = n_rot,
                                   .base = 1e4f,
                                   .mode = mode},
                                  nullptr);
            };
            cuda::matmul_group(plain, n_first, nullptr);
            if (n_first == 2) cuda::matmul(plain[2], nullptr);
            rope_store(kv1, ys[0]->ptr, ys[1]->ptr, ys[2]->ptr);
            cuda::matmul_group(fused, 3, nullptr);
            if (!re.rotate) rope_store(kv2, q2.ptr, k2.ptr, v2.ptr);
            EXPECT_EQ(q2.host(), ys[0]->host());
            EXPECT_EQ(kc2.host(), kc1.host());
            EXPECT_EQ(vc2.host(), vc1.host());
            for (int i = 0; i < 3; ++i) {
              delete plain_w[i], delete rope_w[i], delete ys[i], delete biases[i],
                  delete rope_biases[i];
            }
          }
        }
      }
    }
  }
}

// tile_weights()' layout gives the row-major layout's bits, for every kernel the integer
// variants pick (dp4a up to 8 rows for kQ8, mma beyond, split k on the long shape, a partial
// 32-row tile at 40 outputs, 64-row pieces at 100 rows) and in a group launch.
TEST_F(CudaOps, TiledWeightsGiveTheRowMajorBits) {
  struct Shape {
    int64_t n_in, n_out;
  };
  for (const Shape shape : {Shape{512, 96}, Shape{1792, 40}, Shape{8192, 40}}) {
    for (DType type : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
      ASSERT_TRUE(cuda::tiled_layout_supported(type));
      const auto w = random_weights(type, shape.n_out, shape.n_in, 9);
      const auto tiled = cuda::tile_weights(type, w.data(), shape.n_out, shape.n_in);
      ASSERT_EQ(tiled.size() % (32 * row_bytes(type, shape.n_in)), 0u);
      Dev<uint8_t> dw(w), dt(tiled);
      for (cuda::MatmulVariant variant : {cuda::MatmulVariant::kMma, cuda::MatmulVariant::kQ8}) {
        for (int n_rows : {1, 2, 4, 5, 8, 9, 16, 17, 33, 64, 100}) {
          SCOPED_TRACE(std::string(traits(type).name) + " " + cuda::variant_name(variant) + " " +
                       std::to_string(shape.n_in) + "->" + std::to_string(shape.n_out) + " rows " +
                       std::to_string(n_rows));
          const auto x = random_floats(n_rows * shape.n_in, 13);
          Dev<float> dx(x), dy(n_rows * shape.n_out), dyt(n_rows * shape.n_out);
          cuda::MatmulParams p{.type = type,
                               .w = dw.ptr,
                               .n_out = shape.n_out,
                               .n_in = shape.n_in,
                               .x = dx.ptr,
                               .n_rows = n_rows,
                               .y = dy.ptr,
                               .variant = variant,
                               .xq = {}};
          cuda::matmul(p, nullptr);
          p.w = dt.ptr;
          p.tiled = true;
          p.y = dyt.ptr;
          cuda::matmul(p, nullptr);
          const auto a = dy.host(), b = dyt.host();
          ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
        }
      }
    }
  }
  // Q/K/V-like group of three tiled matrices against their row-major group.
  const int64_t n_in = 512, n_outs[3] = {96, 32, 48};
  for (int rows : {1, 4, 19}) {
    const auto x = random_floats(rows * n_in, 43);
    Dev<float> dx(x);
    Dev<int8_t> dq(rows * n_in);
    Dev<cuda::Q8Meta> dm(n_in / 32 * rows);
    cuda::quantize_rows(dx.ptr, rows, n_in, dq.ptr, dm.ptr, rows, nullptr);
    std::vector<std::unique_ptr<Dev<uint8_t>>> dws;
    std::vector<std::unique_ptr<Dev<float>>> ys;
    cuda::MatmulParams plain[3], tiled[3];
    for (int i = 0; i < 3; ++i) {
      const auto w = random_weights(DType::kQ4_K, n_outs[i], n_in, 60 + i);
      dws.push_back(std::make_unique<Dev<uint8_t>>(w));
      dws.push_back(std::make_unique<Dev<uint8_t>>(
          cuda::tile_weights(DType::kQ4_K, w.data(), n_outs[i], n_in)));
      ys.push_back(std::make_unique<Dev<float>>(rows * n_outs[i]));
      ys.push_back(std::make_unique<Dev<float>>(rows * n_outs[i]));
      plain[i] = {.type = DType::kQ4_K,
                  .w = dws[2 * i]->ptr,
                  .n_out = n_outs[i],
                  .n_in = n_in,
                  .x = dx.ptr,
                  .n_rows = rows,
                  .y = ys[2 * i]->ptr,
                  .xq = {dq.ptr, dm.ptr, rows}};
      tiled[i] = plain[i];
      tiled[i].w = dws[2 * i + 1]->ptr;
      tiled[i].y = ys[2 * i + 1]->ptr;
      tiled[i].tiled = true;
    }
    cuda::matmul_group(plain, 3, nullptr);
    cuda::matmul_group(tiled, 3, nullptr);
    for (int i = 0; i < 3; ++i) {
      const auto a = ys[2 * i]->host(), b = ys[2 * i + 1]->host();
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << rows << " " << i;
    }
  }
}

TEST_F(CudaOps, RopeNormAndNeox) {
  const int rows = 5, heads = 4, head_dim = 128;
  const std::vector<int32_t> positions = {0, 1, 17, 4000, 31000};
  for (RopeMode mode : {RopeMode::kRopeNorm, RopeMode::kRopeNeox}) {
    for (int n_rot : {head_dim, 64}) {
      auto want = random_floats(rows * heads * head_dim, 9);
      Dev<float> dx(want);
      Dev<int32_t> dpos(positions);
      ops::rope(want.data(), positions.data(), rows, heads, head_dim, n_rot, 1e6f, mode);
      cuda::rope(dx.ptr, dpos.ptr, rows, heads, head_dim, n_rot, 1e6f, mode, nullptr);
      EXPECT_LT(nmse(dx.host(), want), 1e-10);
    }
  }
}

TEST_F(CudaOps, Argmax) {
  const int rows = 3, vocab = 151936;
  auto logits = random_floats(rows * vocab, 13);
  logits[vocab + 5] = 100.0f;
  logits[vocab + 9] = 100.0f;  // a tie: the lower index wins, as std::max_element picks
  logits[2 * vocab + 150000] = 50.0f;
  logits[2 * vocab + 7] = 50.0f;  // a tie across the kernel's chunks
  Dev<float> dl(logits);
  Dev<int32_t> out(rows);
  Dev<uint8_t> scratch(cuda::argmax_scratch_bytes(rows));
  ASSERT_EQ(cudaMemset(scratch.ptr, 0, scratch.n), cudaSuccess);
  for (int call = 0; call < 2; ++call) {  // the second call finds the counts reset
    cuda::argmax(dl.ptr, rows, vocab, out.ptr, scratch.ptr, scratch.n, nullptr);
    const auto got = out.host();
    for (int r = 0; r < rows; ++r) {
      const auto* row = logits.data() + static_cast<size_t>(r) * vocab;
      EXPECT_EQ(got[r], std::max_element(row, row + vocab) - row) << "call " << call;
    }
  }
}

// Each row's k largest logits on the device are the set ops::top_logits selects: rows with ties
// across the k-th place (the lower ids win), -0 and +0, NaN and -inf, a dominant token, and k
// from 1 to the 1024 a device pass may ask for.
TEST_F(CudaOps, TopLogitsAreTheSetTheHostSelects) {
  for (const int vocab : {151936, 262144, 300}) {
    const int rows = 4;
    auto logits = random_floats(static_cast<size_t>(rows) * vocab, 21, 3.0f);
    for (int i = 0; i < vocab; i += 5) logits[vocab + i] = std::round(logits[vocab + i]);
    for (int i = 0; i < vocab; i += 3) logits[2 * vocab + i] = 2.0f;  // a wide tie
    logits[2 * vocab + 1] = -0.0f;
    logits[2 * vocab + 4] = std::numeric_limits<float>::quiet_NaN();
    for (int i = 0; i < vocab; i += 11) logits[3 * vocab + i] = -INFINITY;
    logits[3 * vocab + vocab - 1] = 50.0f;
    Dev<float> dl(logits);
    for (const int k : {1, 40, 256, 1024}) {
      if (k > vocab) continue;
      Dev<int32_t> ids(static_cast<size_t>(rows) * k);
      Dev<float> values(static_cast<size_t>(rows) * k);
      Dev<uint8_t> scratch(cuda::top_logits_scratch_bytes(rows, vocab, k));
      cuda::top_logits(dl.ptr, rows, vocab, k, ids.ptr, values.ptr, scratch.ptr, scratch.n,
                       nullptr);
      const auto got_ids = ids.host();
      const auto got_values = values.host();
      for (int r = 0; r < rows; ++r) {
        std::vector<int32_t> want_ids(k);
        std::vector<float> want_values(k);
        ops::top_logits(logits.data() + static_cast<size_t>(r) * vocab, vocab, k, want_ids.data(),
                        want_values.data());
        std::vector<int32_t> got(got_ids.begin() + r * k, got_ids.begin() + (r + 1) * k);
        EXPECT_TRUE(std::is_sorted(got.begin(), got.end())) << "in id order";
        std::sort(want_ids.begin(), want_ids.end());
        EXPECT_EQ(got, want_ids) << "vocab " << vocab << " k " << k << " row " << r;
        for (int j = 0; j < k; ++j) {
          const int id = got_ids[r * k + j];
          const float want = logits[static_cast<size_t>(r) * vocab + id];
          EXPECT_TRUE(got_values[r * k + j] == want ||
                      (std::isnan(want) && std::isnan(got_values[r * k + j])))
              << "the value of id " << id;
        }
      }
    }
  }
}

// A two-sequence batch: sequence 0 verifies a tree (root, two children, a grandchild under the
// first child); sequence 1 decodes one row. Both have committed rows in the cache.
struct TreeFixture {
  ModelConfig config;
  TokenBatch batch;
  TreeFixture() {
    config.n_layer = 2;
    config.n_head = 8;
    config.n_head_kv = 2;
    config.head_dim = config.head_dim_v = 128;
    config.n_embd = 1024;
    // seq 0: committed 600 rows (three key splits); rows 0 (root) -> 1 -> 2, 0 -> 3.
    batch.tokens = {1, 2, 3, 4, 5};
    batch.positions = {600, 601, 602, 601, 12};
    batch.seq_ids = {0, 0, 0, 0, 1};
    batch.parents = {-1, 0, 1, 0, -1};
    batch.subtree_end = {3, 2, 2, 3, 4};
    batch.want_logits = {1, 1, 1, 1, 1};
  }
};

// The tree batch of TreeFixture against ops::attention, and the bits kept under every launch
// shape.
void tree_attention_matches_cpu(const TreeFixture& f) {
  const ModelConfig& c = f.config;
  const int capacity = 1024, layer = 1, n = f.batch.size();
  for (int window : {0, 8, 300}) {
    SCOPED_TRACE(window);
    KvCache kv(c, 2, capacity);
    kv.commit_prefix(0, 600);
    kv.commit_prefix(1, 12);
    // Fill every slot of both layers with known values: halves in both caches.
    const size_t layer_values = 2ull * capacity * c.kv_width();
    const std::vector<float> k_all = half_rounded(random_floats(2 * layer_values, 21));
    const std::vector<float> v_all = half_rounded(random_floats(2 * layer_values, 22));
    for (int l = 0; l < 2; ++l) {
      for (int s = 0; s < 2; ++s) {
        for (int slot = 0; slot < capacity; ++slot) {
          const size_t at = ((l * 2 + s) * capacity + slot) * c.kv_width();
          for (int i = 0; i < c.kv_width(); ++i) {
            kv.key(l, s, slot)[i] = fp32_to_fp16(k_all[at + i]);
            kv.value(l, s, slot)[i] = fp32_to_fp16(v_all[at + i]);
          }
        }
      }
    }
    const auto q = random_floats(n * c.q_width(), 23);
    const auto k_new = half_rounded(random_floats(n * c.kv_width(), 24));
    const auto v_new = half_rounded(random_floats(n * c.kv_width(), 25));
    ops::BatchLayout layout;
    layout.build(f.batch, kv);
    store_kv(kv, layer, f.batch, layout, k_new.data(), v_new.data());
    std::vector<float> want(n * c.n_head * c.head_dim_v);
    ThreadPool pool(2);
    const float scale = 1.0f / std::sqrt(128.0f);
    ops::attention(pool, {.batch = &f.batch,
                          .layout = &layout,
                          .kv = &kv,
                          .layer = layer,
                          .q = q.data(),
                          .out = want.data(),
                          .n_head = c.n_head,
                          .n_head_kv = c.n_head_kv,
                          .head_dim = c.head_dim,
                          .head_dim_v = c.head_dim_v,
                          .scale = scale,
                          .window = window});

    Dev<uint16_t> dk(halves(k_all)), dv(halves(v_all));
    Dev<float> dq(q), dkn(k_new), dvn(v_new), dout(want.size());
    Dev<float> partial(cuda::attention_scratch_bytes(n, c.n_head, capacity, c.head_dim_v) / 4);
    Dev<int> counts(static_cast<size_t>(n) * c.n_head);  // the split counts start at 0
    ASSERT_EQ(cudaMemset(counts.ptr, 0, counts.n * 4), cudaSuccess);
    Dev<int32_t> seq(f.batch.seq_ids), pos(f.batch.positions), slot(layout.slot),
        subtree_end(f.batch.subtree_end), committed(std::vector<int32_t>{600, 12});
    const cuda::BatchView bv{.n_rows = n,
                             .seq = seq.ptr,
                             .pos = pos.ptr,
                             .slot = slot.ptr,
                             .subtree_end = subtree_end.ptr,
                             .committed = committed.ptr};
    const cuda::KvLayerView kvl{.k = dk.ptr + layer * layer_values,
                                .v = dv.ptr + layer * layer_values,
                                .capacity = capacity,
                                .k_width = c.kv_width(),
                                .v_width = c.v_width()};
    cuda::store_kv(bv, kvl, dkn.ptr, dvn.ptr, nullptr);
    const cuda::AttentionParams params{.batch = bv,
                                       .kv = kvl,
                                       .q = dq.ptr,
                                       .out = dout.ptr,
                                       .n_head = c.n_head,
                                       .n_head_kv = c.n_head_kv,
                                       .head_dim = c.head_dim,
                                       .head_dim_v = c.head_dim_v,
                                       .scale = scale,
                                       .window = window,
                                       .partial = partial.ptr,
                                       .split_counts = counts.ptr,
                                       .out_q8 = {}};
    cuda::attention(params, nullptr);
    // Q, K, V and the probabilities go through fp16 on the device (the host cache holds K and V
    // as halves, so Q and the probabilities are what differs).
    const double attention_nmse = nmse(dout.host(), want);
    std::printf("window %d: attention NMSE against the CPU %.3g\n", window, attention_nmse);
    EXPECT_LT(attention_nmse, 1e-5);
    // Any number of query heads a block: the same bits (the mma's rows are independent).
    for (const char* group : {"1", "2", "4"}) {
      Dev<float> out_group(want.size());
      cuda::AttentionParams grouped = params;
      grouped.out = out_group.ptr;
      setenv("SALVO_CUDA_ATTENTION_GROUP", group, 1);
      setenv("SALVO_CUDA_ATTENTION_BLOCKS", "0", 1);
      cuda::attention(grouped, nullptr);
      unsetenv("SALVO_CUDA_ATTENTION_GROUP");
      unsetenv("SALVO_CUDA_ATTENTION_BLOCKS");
      EXPECT_EQ(out_group.host(), dout.host()) << group << " heads a block";
    }
    // Rows 0 and 3 (root -> b) as a batch of their own: the same bits as in the tree, where
    // their keys sit among other rows' (the invariance speculation rests on).
    {
      TokenBatch sub;
      sub.tokens = {1, 4};
      sub.positions = {600, 601};
      sub.seq_ids = {0, 0};
      sub.parents = {-1, 0};
      sub.subtree_end = {1, 1};
      sub.want_logits = {1, 1};
      ops::BatchLayout sub_layout;
      sub_layout.build(sub, kv);
      const std::vector<int> rows = {0, 3};
      std::vector<float> q_sub, k_sub, v_sub;
      for (int r : rows) {
        q_sub.insert(q_sub.end(), q.begin() + r * c.q_width(), q.begin() + (r + 1) * c.q_width());
        k_sub.insert(k_sub.end(), k_new.begin() + r * c.kv_width(),
                     k_new.begin() + (r + 1) * c.kv_width());
        v_sub.insert(v_sub.end(), v_new.begin() + r * c.kv_width(),
                     v_new.begin() + (r + 1) * c.kv_width());
      }
      Dev<uint16_t> dk2(halves(k_all)), dv2(halves(v_all));
      Dev<float> dq2(q_sub), dk2n(k_sub), dv2n(v_sub);
      Dev<float> out_sub(2 * c.n_head * c.head_dim_v);
      Dev<int32_t> seq2(sub.seq_ids), pos2(sub.positions), slot2(sub_layout.slot),
          end2(sub.subtree_end);
      cuda::AttentionParams sp = params;
      sp.batch = {.n_rows = 2,
                  .seq = seq2.ptr,
                  .pos = pos2.ptr,
                  .slot = slot2.ptr,
                  .subtree_end = end2.ptr,
                  .committed = committed.ptr};
      sp.kv.k = dk2.ptr + layer * layer_values;
      sp.kv.v = dv2.ptr + layer * layer_values;
      cuda::store_kv(sp.batch, sp.kv, dk2n.ptr, dv2n.ptr, nullptr);
      sp.q = dq2.ptr;
      sp.out = out_sub.ptr;
      cuda::attention(sp, nullptr);
      const std::vector<float> full = dout.host(), got = out_sub.host();
      const int width = c.n_head * c.head_dim_v;
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(0, std::memcmp(&got[i * width], &full[rows[i] * width], width * sizeof(float)))
            << "row " << rows[i] << " alone differs from its tree row";
      }
    }
    // The session-6 kernel (one value load per key in turn) gives the same bits.
    {
      Dev<float> out_serial(want.size());
      cuda::AttentionParams serial = params;
      serial.out = out_serial.ptr;
      setenv("SALVO_CUDA_ATTENTION", "serial", 1);
      cuda::attention(serial, nullptr);
      unsetenv("SALVO_CUDA_ATTENTION");
      EXPECT_EQ(out_serial.host(), dout.host());
    }
    // A row a block (the kernel of a decode) and two (tree rows 0 and 1 share their keys, 2 and 3
    // are cousins whose last keys differ, 4 is alone), in one launch and in launches of 1, 2 and 3
    // rows (a wide pass at a long context; with 3, rows 3 and 4 of the two sequences share a
    // block), with the metadata and the committed rows' prefetch before the PDL wait or not, and
    // another buffer asked into L2 (the feed-forward's weights in a model): the same bits.
    Dev<float> l2_src((1 << 18) + 12);  // past a whole number of the blocks' shares and pieces
    for (const char* pairs : {"0", "2"}) {
      for (int per_launch : {0, 1, 2, 3}) {
        for (const char* early : {"0", "2"}) {
          Dev<float> out_split(want.size());
          cuda::AttentionParams split = params;
          split.out = out_split.ptr;
          split.rows_per_launch = per_launch;
          split.l2_prefetch = l2_src.ptr;
          split.l2_prefetch_bytes = static_cast<int64_t>(l2_src.n * sizeof(float));
          setenv("SALVO_CUDA_ATTENTION_PAIRS", pairs, 1);
          setenv("SALVO_CUDA_ATTENTION_EARLY", early, 1);
          cuda::attention(split, nullptr);
          unsetenv("SALVO_CUDA_ATTENTION_PAIRS");
          unsetenv("SALVO_CUDA_ATTENTION_EARLY");
          EXPECT_EQ(out_split.host(), dout.host()) << per_launch << " rows a launch (0: all), "
                                                   << "pairs from " << pairs << ", early " << early;
        }
      }
    }
    // Splits merged in thread-block clusters of 3 (the grid's 8 splits padded to 9; the window of
    // 300's rows span 3 splits and merge in the cluster, sequence 0's rows without a window span
    // 5 and merge through the partials) and of 8 (all in the cluster): the same bits.
    for (const char* cluster : {"3", "8"}) {
      for (const char* pairs : {"0", "2"}) {
        Dev<float> out_cluster(want.size());
        cuda::AttentionParams clustered = params;
        clustered.out = out_cluster.ptr;
        setenv("SALVO_CUDA_ATTENTION_CLUSTER", cluster, 1);
        setenv("SALVO_CUDA_ATTENTION_PAIRS", pairs, 1);
        cuda::attention(clustered, nullptr);
        unsetenv("SALVO_CUDA_ATTENTION_CLUSTER");
        unsetenv("SALVO_CUDA_ATTENTION_PAIRS");
        EXPECT_EQ(out_cluster.host(), dout.host())
            << "clusters of " << cluster << ", pairs from " << pairs;
      }
    }
    // The same with the int8 copy of the output fused in: same floats, quantize_rows' bits
    // (heads whose size is a multiple of the quantization block's 32, as the models ask).
    if (c.head_dim_v % 32 == 0) {
      const int width = c.n_head * c.head_dim_v;
      Dev<float> out2(want.size());
      Dev<int8_t> q_fused(n * width), q_ref(n * width);
      Dev<cuda::Q8Meta> m_fused(width / 32 * n), m_ref(width / 32 * n);
      cuda::AttentionParams fused = params;
      fused.out = out2.ptr;
      Dev<uint16_t> h_fused(zeros_u16(frag_halves(n, width))), h_ref(h_fused.n);
      fused.out_q8 = {q_fused.ptr, m_fused.ptr, n, h_fused.ptr};
      cuda::attention(fused, nullptr);
      cuda::quantize_rows(out2.ptr, n, width, q_ref.ptr, m_ref.ptr, n, nullptr);
      cuda::half_frags(out2.ptr, n, width, h_ref.ptr, nullptr);
      EXPECT_EQ(out2.host(), dout.host());
      EXPECT_EQ(q_fused.host(), q_ref.host());
      EXPECT_TRUE(same_meta(m_fused.host(), m_ref.host()));
      EXPECT_EQ(h_fused.host(), h_ref.host());
    }

    // KV commit: keep rows 0 and 3 of sequence 0 (the second branch) on both sides.
    const std::vector<int32_t> accepted = {0, 3};
    std::vector<int32_t> from, to;
    for (size_t j = 0; j < accepted.size(); ++j) {
      if (accepted[j] != static_cast<int32_t>(j)) {
        from.push_back(600 + accepted[j]);
        to.push_back(600 + static_cast<int32_t>(j));
      }
    }
    kv.commit(0, accepted);
    if (!from.empty()) {
      Dev<int32_t> dfrom(from), dto(to);
      cuda::commit_kv(dk.ptr, dv.ptr, layer_values, layer_values, 2, c.kv_width(), c.v_width(),
                      dfrom.ptr, dto.ptr, static_cast<int>(from.size()), nullptr);
      const auto k_after = dk.host();
      for (int l = 0; l < 2; ++l) {
        for (int s = 0; s < 603; ++s) {
          const uint16_t* got = &k_after[(l * 2 * capacity + s) * c.kv_width()];
          const KvCache::Elem* want_half = kv.key(l, 0, s);
          int differ = 0;
          for (int i = 0; i < c.kv_width(); ++i) differ += got[i] != want_half[i];
          EXPECT_EQ(differ, 0) << "layer " << l << " slot " << s;
        }
      }
    }
  }
}

TEST_F(CudaOps, TreeAttentionMatchesCpu) {
  // Head sizes of the four models (SmolLM2 and the 0.5B 64, Gemma3 256) and one that is not a
  // multiple of the mma's k step of 16.
  for (const int head_dim : {128, 64, 256, 72}) {
    SCOPED_TRACE(head_dim);
    TreeFixture f;
    f.config.head_dim = f.config.head_dim_v = head_dim;
    tree_attention_matches_cpu(f);
  }
}

TEST(CudaAttentionScratch, WidePassesAtLongContextsTakeSeveralLaunches) {
  // The 7B shape: 28 heads, V 128 wide; a row's partials at a 32K context are 3.7 MB.
  const size_t row_bytes = 28ull * (32768 / 128) * (2 + 128) * sizeof(float);
  EXPECT_EQ(cuda::attention_rows_per_launch(28, 32768, 128), 18);
  EXPECT_EQ(cuda::attention_scratch_bytes(512, 28, 32768, 128), 18 * row_bytes);
  EXPECT_EQ(cuda::attention_scratch_bytes(1, 28, 32768, 128), row_bytes);
  EXPECT_LE(cuda::attention_scratch_bytes(512, 28, 32768, 128), cuda::kAttentionScratchBudget);
  // At 4096 slots a 65-row verification is still one launch.
  EXPECT_GE(cuda::attention_rows_per_launch(28, 4096, 128), 65);
  // A cache whose one row passes the budget still gets a row a launch.
  EXPECT_EQ(cuda::attention_rows_per_launch(64, 1 << 24, 256), 1);
}

TEST_F(CudaOps, CommitMovesOverlappingSlotsInOrder) {
  // Accepting suffix rows {1, 2, 4} moves 1->0, 2->1, 4->2: each move reads a slot that the
  // previous move of the same sequence has just vacated or not yet touched.
  ModelConfig c;
  c.n_layer = 3;
  c.n_head = c.n_head_kv = 1;
  c.head_dim = c.head_dim_v = 64;
  const int capacity = 8;
  KvCache kv(c, 1, capacity);
  const size_t layer_values = capacity * 64;
  // Half-rounded values: both caches hold them as halves.
  const auto k_all = half_rounded(random_floats(3 * layer_values, 31)),
             v_all = half_rounded(random_floats(3 * layer_values, 32));
  for (int l = 0; l < 3; ++l) {
    for (int s = 0; s < capacity; ++s) {
      for (int i = 0; i < 64; ++i) {
        kv.key(l, 0, s)[i] = fp32_to_fp16(k_all[l * layer_values + s * 64 + i]);
        kv.value(l, 0, s)[i] = fp32_to_fp16(v_all[l * layer_values + s * 64 + i]);
      }
    }
  }
  const std::vector<int32_t> accepted = {1, 2, 4};
  kv.commit(0, accepted);
  Dev<uint16_t> dk(halves(k_all)), dv(halves(v_all));
  Dev<int32_t> from(std::vector<int32_t>{1, 2, 4}), to(std::vector<int32_t>{0, 1, 2});
  cuda::commit_kv(dk.ptr, dv.ptr, layer_values, layer_values, 3, 64, 64, from.ptr, to.ptr, 3,
                  nullptr);
  const auto k = dk.host(), v = dv.host();
  for (int l = 0; l < 3; ++l) {
    for (int s = 0; s < 3; ++s) {
      int differ = 0;
      for (int i = 0; i < 64; ++i) {
        differ += k[l * layer_values + s * 64 + i] != kv.key(l, 0, s)[i];
        differ += v[l * layer_values + s * 64 + i] != kv.value(l, 0, s)[i];
      }
      EXPECT_EQ(differ, 0) << "layer " << l << " slot " << s;
    }
  }
}

}  // namespace
}  // namespace salvo
