// Prototype, not part of salvo's build: a Q4_K matrix x skinny activation product that
// dequantizes the weights to fp16 in registers and multiplies on the fp16 tensor cores
// (mma.m16n8k16, fp32 accumulation), for 1-64 activation rows with the same instructions per
// weight at every row count. Question it answers: can one kernel read a Q4_K matrix near HBM
// speed at one row AND at 16 (salvo's int8 kernels: 16 rows cost 2-3x one row, see
// DEVELOPERS.md), so that a 16-row verification pass costs little more than a decode step.
//
// Weights are repacked per 16-row tile and 256-element super-block into one 2560-byte chunk:
// 2048 bytes of nibbles in mma fragment order (lane l's uint4 i at 16 * (32 i + l); word j of it
// is step 4 i + j: nibbles of a0 at bits 0-3 / 16-19, a1 at 4-7 / 20-23, a2 8-11 / 24-27, a3
// 12-15 / 28-31, so (w >> 4 j) & 0x000F000F | 0x64006400 is fragment register j as 1024 + q),
// then 512 bytes of half2 (d * sc, dmin * m) per row and sub-block of 32 (5 bits a weight
// against Q4_K's 4.5). Activations are fp16 in B fragment order, two k16 steps a uint4.
//   nvcc -O3 -arch=sm_90 -std=c++17 bench/f16_mma_gemv.cu -o f16_mma_gemv && ./f16_mma_gemv
// Options: --warps W (per block, default 4), --ksplit S (0 = auto), --reps R, --no-check,
// --type q4_k|q6_k, --emulate (the layout checked on the host, no GPU needed).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

constexpr int kMaxWarps = 16;

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t lop_nibbles(uint32_t w) {
  uint32_t r;
  // (w & 0x000F000F) | 0x64006400 in one LOP3 (0xEA: (a & b) | c).
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(w), "r"(0x000F000Fu), "r"(0x64006400u));
  return r;
}

__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

// Q4_K: nibbles 2048 bytes + (d * sc, dmin * m) half2 per row and sub-block, 512 bytes.
struct FmtQ4K {
  static constexpr int kBytes = 2560;
  struct Regs {
    uint4 q[4];
    uint4 sm[4];  // row g: sm[0..1] (sub-blocks 0-7), row g + 8: sm[2..3]
  };
  static __device__ __forceinline__ void load(const uint8_t* c, int lane, Regs& k) {
    const int g = lane / 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) k.q[i] = ld_stream(c + 16 * (32 * i + lane));
    const uint8_t* sm = c + 2048;
    k.sm[0] = *reinterpret_cast<const uint4*>(sm + 32 * g);
    k.sm[1] = *reinterpret_cast<const uint4*>(sm + 32 * g + 16);
    k.sm[2] = *reinterpret_cast<const uint4*>(sm + 32 * (g + 8));
    k.sm[3] = *reinterpret_cast<const uint4*>(sm + 32 * (g + 8) + 16);
  }
  // Fragment registers of step s (0-15) of the super-block.
  static __device__ __forceinline__ void step(const Regs& k, int s, uint32_t (&a)[4]) {
    const half2 k1024 = __half2half2(__ushort_as_half(0x6400));
    const int sub = s / 2;
    const uint32_t smg = word_of(k.sm[sub / 4], sub % 4);
    const uint32_t smg8 = word_of(k.sm[2 + sub / 4], sub % 4);
    const half2 hg = *reinterpret_cast<const half2*>(&smg);
    const half2 hg8 = *reinterpret_cast<const half2*>(&smg8);
    const half2 s_g = __low2half2(hg), m_g = __hneg2(__high2half2(hg));
    const half2 s_g8 = __low2half2(hg8), m_g8 = __hneg2(__high2half2(hg8));
    const uint32_t w = word_of(k.q[s / 4], s % 4);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t raw = lop_nibbles(w >> (4 * j));
      const half2 q = __hsub2(*reinterpret_cast<const half2*>(&raw), k1024);
      const half2 v = __hfma2(q, (j % 2 == 0) ? s_g : s_g8, (j % 2 == 0) ? m_g : m_g8);
      a[j] = *reinterpret_cast<const uint32_t*>(&v);
    }
  }
};

// Q6_K: low nibbles 2048 bytes as Q4_K's; high 2 bits 1024 bytes (lane l's uint4 i at 16 * (32 i
// + l), word j of it is steps 2 (4 i + j) and + 1: register r's pair at bits 2 r + 8 e and
// 16 + 2 r + 8 e for step parity e); d * sc as half per row and group of 16, 512 bytes.
struct FmtQ6K {
  static constexpr int kBytes = 3584;
  struct Regs {
    uint4 q[4];
    uint4 h[2];
    uint4 sc[4];  // row g: sc[0..1] (groups 0-15), row g + 8: sc[2..3]
  };
  static __device__ __forceinline__ void load(const uint8_t* c, int lane, Regs& k) {
    const int g = lane / 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) k.q[i] = ld_stream(c + 16 * (32 * i + lane));
#pragma unroll
    for (int i = 0; i < 2; ++i) k.h[i] = ld_stream(c + 2048 + 16 * (32 * i + lane));
    const uint8_t* sc = c + 3072;
    k.sc[0] = *reinterpret_cast<const uint4*>(sc + 32 * g);
    k.sc[1] = *reinterpret_cast<const uint4*>(sc + 32 * g + 16);
    k.sc[2] = *reinterpret_cast<const uint4*>(sc + 32 * (g + 8));
    k.sc[3] = *reinterpret_cast<const uint4*>(sc + 32 * (g + 8) + 16);
  }
  static __device__ __forceinline__ void step(const Regs& k, int s, uint32_t (&a)[4]) {
    const half2 k1056 = __half2half2(__ushort_as_half(0x6420));  // 1024 + 32
    const uint32_t scg = word_of(k.sc[s / 8], (s / 2) % 4);
    const uint32_t scg8 = word_of(k.sc[2 + s / 8], (s / 2) % 4);
    const half2 pg = *reinterpret_cast<const half2*>(&scg);
    const half2 pg8 = *reinterpret_cast<const half2*>(&scg8);
    const half2 s_g = s % 2 == 0 ? __low2half2(pg) : __high2half2(pg);
    const half2 s_g8 = s % 2 == 0 ? __low2half2(pg8) : __high2half2(pg8);
    const uint32_t w = word_of(k.q[s / 4], s % 4);
    const uint32_t hw = word_of(k.h[s / 8], (s / 2) % 4);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t lo = lop_nibbles(w >> (4 * j));
      const int sh = 2 * j + 8 * (s % 2);
      const uint32_t hi = sh >= 4 ? (hw >> (sh - 4)) : (hw << (4 - sh));
      uint32_t raw;
      asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(raw) : "r"(hi), "r"(0x00300030u), "r"(lo));
      const half2 q = __hsub2(*reinterpret_cast<const half2*>(&raw), k1056);
      const half2 v = __hmul2(q, (j % 2 == 0) ? s_g : s_g8);
      a[j] = *reinterpret_cast<const uint32_t*>(&v);
    }
  }
};

// One super-block: 16 k16 steps, each 4 fragment registers dequantized and NT mma.
template <class F, int NT>
__device__ __forceinline__ void chunk_steps(const typename F::Regs& k, const uint4* __restrict__ xf,
                                            int sb, int n_k2, int lane, float (&acc)[NT][4]) {
#pragma unroll
  for (int p = 0; p < 8; ++p) {
    // Activation fragments of steps 2p and 2p + 1, one uint4 per n tile.
    uint4 xv[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      xv[nt] = __ldg(xf + (static_cast<int64_t>(nt) * n_k2 + sb * 8 + p) * 32 + lane);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t a[4];
      F::step(k, 2 * p + h, a);
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint32_t b0 = h == 0 ? xv[nt].x : xv[nt].z, b1 = h == 0 ? xv[nt].y : xv[nt].w;
        mma16816(acc[nt], a, b0, b1);
      }
    }
  }
}

// grid (tiles, ksplit); W warps a block; warp w of split ks takes super-blocks ks * W + w,
// + W * ksplit, ... (neighbouring warps read neighbouring chunks). Partial sums added in warp
// order, then in split order by the last block of the tile to arrive: the same bits whatever
// the row count (the mma computes each column on its own).
template <class F, int NT>
__global__ void f16_mma_kernel(const uint8_t* __restrict__ wp, const uint4* __restrict__ xf,
                               float* __restrict__ y, float* __restrict__ partial,
                               int* __restrict__ counters, int N, int K, int n_rows) {
  const int tile = blockIdx.x, ks = blockIdx.y, n_split = gridDim.y;
  const int W = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int n_sb = K / 256, n_k2 = K / 32;
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
  const uint8_t* base = wp + static_cast<int64_t>(tile) * n_sb * F::kBytes;
  const int stride = W * n_split;
  int sb = ks * W + warp;
  typename F::Regs cur, nxt;
  if (sb < n_sb) F::load(base + static_cast<int64_t>(sb) * F::kBytes, lane, cur);
  for (; sb < n_sb; sb += stride) {
    const int next = sb + stride;
    if (next < n_sb) F::load(base + static_cast<int64_t>(next) * F::kBytes, lane, nxt);
    chunk_steps<F, NT>(cur, xf, sb, n_k2, lane, acc);
    cur = nxt;
  }
  // The warps' sums added in warp order, one n tile at a time.
  __shared__ float red[kMaxWarps][4][32];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (warp > 0) {
#pragma unroll
      for (int i = 0; i < 4; ++i) red[warp][i][lane] = acc[nt][i];
    }
    __syncthreads();
    if (warp == 0) {
      for (int w = 1; w < W; ++w) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = __fadd_rn(acc[nt][i], red[w][i][lane]);
      }
    }
    __syncthreads();
  }
  if (warp != 0) return;
  if (n_split > 1) {
    float* mine = partial + (static_cast<int64_t>(tile) * n_split + ks) * (NT * 4 * 32);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) mine[(nt * 4 + i) * 32 + lane] = acc[nt][i];
    __threadfence();
    __syncwarp();
    int last = 0;
    if (lane == 0) last = atomicAdd(counters + tile, 1) == n_split - 1;
    last = __shfl_sync(0xffffffffu, last, 0);
    if (!last) return;
    __threadfence();
    const float* all = partial + static_cast<int64_t>(tile) * n_split * (NT * 4 * 32);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float v = 0.0f;
        for (int s = 0; s < n_split; ++s)
          v = __fadd_rn(v, __ldcg(all + (s * NT * 4 + nt * 4 + i) * 32 + lane));
        acc[nt][i] = v;
      }
    if (lane == 0) counters[tile] = 0;
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int o = tile * 16 + g + 8 * (i / 2), col = 8 * nt + 2 * t + i % 2;
      if (col < n_rows) y[static_cast<int64_t>(col) * N + o] = acc[nt][i];
    }
}

__global__ void read_kernel(const uint4* __restrict__ p, size_t n, int* out) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const uint4 v = __ldcs(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7fffffffu) *out = static_cast<int>(acc);
}

// ---- host ----
static float h2f(uint16_t h) {
  __half x;
  std::memcpy(&x, &h, 2);
  return __half2float(x);
}
static uint16_t f2h(float f) {
  const __half x = __float2half_rn(f);
  uint16_t h;
  std::memcpy(&h, &x, 2);
  return h;
}

// ggml's get_scale_min_k4.
static void scale_min(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

struct Matrix {
  int N, K, chunk;
  std::vector<float> w;       // dequantized as ggml does (float d * sc)
  std::vector<uint8_t> pack;  // the kernel's layout
};

static Matrix make_q4k(int N, int K, std::mt19937& rng) {
  const int kChunk = FmtQ4K::kBytes;
  Matrix m{N, K, kChunk, std::vector<float>(static_cast<size_t>(N) * K), {}};
  const int n_sb = K / 256, tiles = N / 16;
  m.pack.assign(static_cast<size_t>(tiles) * n_sb * kChunk, 0);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> dd(0.002f, 0.02f);
  std::vector<uint8_t> qv(256);
  for (int r = 0; r < N; ++r) {
    for (int b = 0; b < n_sb; ++b) {
      const uint16_t d = f2h(dd(rng)), dmin = f2h(dd(rng) * 0.5f);
      uint8_t scales[12], qs[128];
      for (auto& s : scales) s = byte(rng);
      for (auto& q : qs) q = byte(rng);
      float* wr = &m.w[static_cast<size_t>(r) * K + b * 256];
      uint8_t* chunk = &m.pack[(static_cast<size_t>(r / 16) * n_sb + b) * kChunk];
      const int rt = r % 16;
      for (int sub = 0; sub < 8; ++sub) {
        int sc, mn;
        scale_min(sub, scales, sc, mn);
        const float s = h2f(d) * sc, mm = h2f(dmin) * mn;
        for (int l = 0; l < 32; ++l) {
          const uint8_t byte_ = qs[32 * (sub / 2) + l];
          const int q = sub % 2 == 0 ? (byte_ & 0xF) : (byte_ >> 4);
          qv[sub * 32 + l] = static_cast<uint8_t>(q);
          wr[sub * 32 + l] = s * q - mm;
        }
        const uint16_t hs = f2h(s), hm = f2h(mm);
        std::memcpy(chunk + 2048 + 4 * (8 * rt + sub), &hs, 2);
        std::memcpy(chunk + 2048 + 4 * (8 * rt + sub) + 2, &hm, 2);
      }
      // Nibbles in fragment order: this row is g = rt % 8 of rows g / g + 8 (half = rt / 8).
      const int g = rt % 8, half = rt / 8;
      for (int s = 0; s < 16; ++s) {
        for (int t = 0; t < 4; ++t) {
          const int lane = 4 * g + t;
          uint32_t* word =
              reinterpret_cast<uint32_t*>(chunk + 16 * (32 * (s / 4) + lane) + 4 * (s % 4));
          // Registers j = half (k 2t, 2t+1) and j = 2 + half (k 2t+8, 2t+9).
          for (int jj = 0; jj < 2; ++jj) {
            const int j = half + 2 * jj, k0 = 16 * s + 2 * t + 8 * jj;
            *word |= static_cast<uint32_t>(qv[k0]) << (4 * j);
            *word |= static_cast<uint32_t>(qv[k0 + 1]) << (16 + 4 * j);
          }
        }
      }
    }
  }
  return m;
}

// Nibble q & 0xF of element k of the (tile row rt) into the fragment-ordered 2048 bytes at c.
static void put_nibble(uint8_t* c, int rt, int k, int q) {
  const int g = rt % 8, half = rt / 8, s = k / 16, kk = k % 16;
  const int jj = kk / 8, t = (kk % 8) / 2, e = kk % 2, j = half + 2 * jj, lane = 4 * g + t;
  uint32_t* word = reinterpret_cast<uint32_t*>(c + 16 * (32 * (s / 4) + lane) + 4 * (s % 4));
  *word |= static_cast<uint32_t>(q & 0xF) << (4 * j + 16 * e);
}

static Matrix make_q6k(int N, int K, std::mt19937& rng) {
  const int kChunk = FmtQ6K::kBytes;
  Matrix m{N, K, kChunk, std::vector<float>(static_cast<size_t>(N) * K), {}};
  const int n_sb = K / 256, tiles = N / 16;
  m.pack.assign(static_cast<size_t>(tiles) * n_sb * kChunk, 0);
  std::uniform_int_distribution<int> q6(0, 63), sc8(-128, 127);
  std::uniform_real_distribution<float> dd(0.0002f, 0.002f);
  for (int r = 0; r < N; ++r) {
    for (int b = 0; b < n_sb; ++b) {
      const uint16_t d = f2h(dd(rng));
      float* wr = &m.w[static_cast<size_t>(r) * K + b * 256];
      uint8_t* c = &m.pack[(static_cast<size_t>(r / 16) * n_sb + b) * kChunk];
      const int rt = r % 16, g = rt % 8, half = rt / 8;
      for (int grp = 0; grp < 16; ++grp) {
        const float s = h2f(d) * sc8(rng);
        const uint16_t hs = f2h(s);
        std::memcpy(c + 3072 + 32 * rt + 2 * grp, &hs, 2);
        for (int l = 0; l < 16; ++l) {
          const int k = 16 * grp + l, q = q6(rng);
          wr[k] = s * (q - 32);
          put_nibble(c, rt, k, q);
          // High 2 bits: step s = grp, parity e, register j, element e2 of the pair.
          const int kk = l, jj = kk / 8, t = (kk % 8) / 2, e2 = kk % 2, j = half + 2 * jj;
          const int lane = 4 * g + t, sp = grp;
          uint32_t* hw = reinterpret_cast<uint32_t*>(c + 2048 + 16 * (32 * (sp / 8) + lane) +
                                                     4 * ((sp / 2) % 4));
          *hw |= static_cast<uint32_t>(q >> 4) << (2 * j + 8 * (sp % 2) + 16 * e2);
        }
      }
    }
  }
  return m;
}

// x [rows][K] as fp16 B fragments: [nt][k/32][lane] uint4 = (b0, b1) of steps 2p and 2p + 1.
static std::vector<uint16_t> pack_x(const std::vector<uint16_t>& x, int rows, int K, int NT) {
  std::vector<uint16_t> f(static_cast<size_t>(NT) * (K / 32) * 32 * 8, 0);
  for (int nt = 0; nt < NT; ++nt)
    for (int p = 0; p < K / 32; ++p)
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4, r = 8 * nt + g;
        uint16_t* o = &f[((static_cast<size_t>(nt) * (K / 32) + p) * 32 + lane) * 8];
        for (int h = 0; h < 2; ++h) {
          const int k0 = 32 * p + 16 * h;
          const int ks[4] = {k0 + 2 * t, k0 + 2 * t + 1, k0 + 2 * t + 8, k0 + 2 * t + 9};
          for (int e = 0; e < 4; ++e)
            o[4 * h + e] = r < rows ? x[static_cast<size_t>(r) * K + ks[e]] : 0;
        }
      }
  return f;
}

constexpr int kMaxRows = 64;

// y[r][o] for kMaxRows rows in double, the outputs spread over the host's threads.
static std::vector<double> reference(const Matrix& m, const std::vector<uint16_t>& x) {
  std::vector<double> ref(static_cast<size_t>(kMaxRows) * m.N, 0.0);
  std::vector<float> xf(x.size());
  for (size_t i = 0; i < x.size(); ++i) xf[i] = h2f(x[i]);
  const int n_threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int th = 0; th < n_threads; ++th) {
    pool.emplace_back([&, th] {
      for (int o = th; o < m.N; o += n_threads) {
        const float* wr = &m.w[static_cast<size_t>(o) * m.K];
        for (int r = 0; r < kMaxRows; ++r) {
          const float* xr = &xf[static_cast<size_t>(r) * m.K];
          double acc = 0;
          for (int k = 0; k < m.K; ++k) acc += static_cast<double>(wr[k]) * xr[k];
          ref[static_cast<size_t>(r) * m.N + o] = acc;
        }
      }
    });
  }
  for (auto& t : pool) t.join();
  return ref;
}

// --emulate: the kernels' decoding done on the host (no GPU needed): each lane's A registers
// decoded from the pack with the kernel's bit operations, B from pack_x, D with the PTX
// m16n8k16 fragment layouts, against the ggml-style dequantized weights. Checks that the pack
// and the kernel agree on where every weight sits.
static double emulate(bool q6) {
  std::mt19937 rng(3);
  const int N = 32, K = 512, rows = 11, NT = 2;
  Matrix m = q6 ? make_q6k(N, K, rng) : make_q4k(N, K, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> x(16 * K);
  for (auto& v : x) v = f2h(nd(rng));
  const std::vector<uint16_t> xf = pack_x(x, rows, K, NT);
  const int n_sb = K / 256, n_k2 = K / 32;
  double num = 0, den = 0;
  for (int tile = 0; tile < N / 16; ++tile) {
    std::vector<double> acc(2 * 16 * 8, 0.0);  // [nt][m row][n col]
    for (int sb = 0; sb < n_sb; ++sb) {
      const uint8_t* c = &m.pack[(static_cast<size_t>(tile) * n_sb + sb) * m.chunk];
      for (int s = 0; s < 16; ++s) {
        float A[16][16], B[2][16][8];
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          uint32_t w, hw = 0;
          std::memcpy(&w, c + 16 * (32 * (s / 4) + lane) + 4 * (s % 4), 4);
          if (q6) std::memcpy(&hw, c + 2048 + 16 * (32 * (s / 8) + lane) + 4 * ((s / 2) % 4), 4);
          for (int j = 0; j < 4; ++j) {
            const int row = j % 2 == 0 ? g : g + 8;
            uint32_t raw = ((w >> (4 * j)) & 0x000F000Fu) | 0x64006400u;
            float sc, mn = 0.0f, off = 1024.0f;
            uint16_t hs, hm;
            if (q6) {
              const int sh = 2 * j + 8 * (s % 2);
              raw |= (sh >= 4 ? hw >> (sh - 4) : hw << (4 - sh)) & 0x00300030u;
              std::memcpy(&hs, c + 3072 + 32 * row + 2 * s, 2);
              sc = h2f(hs);
              off = 1056.0f;
            } else {
              std::memcpy(&hs, c + 2048 + 4 * (8 * row + s / 2), 2);
              std::memcpy(&hm, c + 2048 + 4 * (8 * row + s / 2) + 2, 2);
              sc = h2f(hs);
              mn = h2f(hm);
            }
            for (int e = 0; e < 2; ++e) {
              const float q = h2f(static_cast<uint16_t>(raw >> (16 * e))) - off;
              A[row][2 * t + e + (j >= 2 ? 8 : 0)] = q * sc - mn;
            }
          }
          for (int nt = 0; nt < NT; ++nt) {
            const uint16_t* o =
                &xf[((static_cast<size_t>(nt) * n_k2 + sb * 8 + s / 2) * 32 + lane) * 8 +
                    4 * (s % 2)];
            B[nt][2 * t][g] = h2f(o[0]);
            B[nt][2 * t + 1][g] = h2f(o[1]);
            B[nt][2 * t + 8][g] = h2f(o[2]);
            B[nt][2 * t + 9][g] = h2f(o[3]);
          }
        }
        for (int nt = 0; nt < NT; ++nt)
          for (int i = 0; i < 16; ++i)
            for (int j = 0; j < 8; ++j)
              for (int k = 0; k < 16; ++k)
                acc[(nt * 16 + i) * 8 + j] += static_cast<double>(A[i][k]) * B[nt][k][j];
      }
    }
    for (int nt = 0; nt < NT; ++nt)
      for (int i = 0; i < 16; ++i)
        for (int j = 0; j < 8; ++j) {
          const int o = tile * 16 + i, r = 8 * nt + j;
          if (r >= rows) continue;
          double ref = 0;
          for (int k = 0; k < K; ++k)
            ref += static_cast<double>(m.w[static_cast<size_t>(o) * K + k]) *
                   h2f(x[static_cast<size_t>(r) * K + k]);
          const double d = acc[(nt * 16 + i) * 8 + j] - ref;
          num += d * d;
          den += ref * ref;
        }
  }
  return num / den;
}

template <class F>
static void launch(int NT, dim3 grid, int threads, const uint8_t* w, const uint4* x, float* y,
                   float* partial, int* counters, int N, int K, int rows) {
  if (NT == 1)
    f16_mma_kernel<F, 1><<<grid, threads>>>(w, x, y, partial, counters, N, K, rows);
  else if (NT == 2)
    f16_mma_kernel<F, 2><<<grid, threads>>>(w, x, y, partial, counters, N, K, rows);
  else if (NT == 4)
    f16_mma_kernel<F, 4><<<grid, threads>>>(w, x, y, partial, counters, N, K, rows);
  else
    f16_mma_kernel<F, 8><<<grid, threads>>>(w, x, y, partial, counters, N, K, rows);
}

int main(int argc, char** argv) {
  int warps = 4, ksplit_opt = 0, reps = 50;
  bool check = true;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--warps" && i + 1 < argc)
      warps = std::atoi(argv[++i]);
    else if (a == "--ksplit" && i + 1 < argc)
      ksplit_opt = std::atoi(argv[++i]);
    else if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--type" && i + 1 < argc)
      only = argv[++i];
    else if (a == "--no-check")
      check = false;
    else if (a == "--emulate") {
      const double e4 = emulate(false), e6 = emulate(true);
      std::printf("emulated on the host: q4_k nmse %.2e, q6_k nmse %.2e\n", e4, e6);
      return e4 < 1e-5 && e6 < 1e-5 ? 0 : 1;
    }
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  struct Shape {
    const char* name;
    int N, K;
  };
  const Shape shapes[] = {
      {"1.5b q/o", 1536, 1536},  {"1.5b gate", 8960, 1536},      {"1.5b gate+up", 17920, 1536},
      {"1.5b down", 1536, 8960}, {"1.5b lm_head", 151936, 1536}, {"7b q/o", 3584, 3584},
      {"7b gate", 18944, 3584},  {"7b gate+up", 37888, 3584},    {"7b down", 3584, 18944}};
  const int row_counts[] = {1, 2, 4, 8, 16, 32, 64};
  std::mt19937 rng(7);
  int* dummy = nullptr;
  CHECK(cudaMalloc(&dummy, sizeof(int)));
  std::printf(
      "warps %d a block; GB/s of the GGUF type's bytes and of the repacked bytes; stream: plain "
      "16-byte reads of the repacked bytes\n",
      warps);
  std::printf(
      "type  shape              N      K split rows      us  GB/s(gguf) GB/s(pack) stream  nmse\n");
  for (const char* type : {"q4_k", "q6_k"}) {
    if (!only.empty() && only != type) continue;
    const bool q6 = std::string(type) == "q6_k";
    for (const Shape& sh : shapes) {
      Matrix m = q6 ? make_q6k(sh.N, sh.K, rng) : make_q4k(sh.N, sh.K, rng);
      const size_t bytes = m.pack.size();
      const double gguf_bytes = static_cast<double>(sh.N) * sh.K / 256 * (q6 ? 210 : 144);
      // Enough copies to stream past the 50 MB L2, as a decode step does.
      const int copies = static_cast<int>(std::max<size_t>(1, (256u << 20) / bytes));
      uint8_t* wd = nullptr;
      CHECK(cudaMalloc(&wd, bytes * copies));
      for (int c = 0; c < copies; ++c) {
        CHECK(cudaMemcpy(wd + bytes * c, m.pack.data(), bytes, cudaMemcpyHostToDevice));
      }
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      float stream_ms = 0;
      cudaEventRecord(a);
      for (int rep = 0; rep < reps; ++rep) {
        read_kernel<<<sms * 4, 512>>>(reinterpret_cast<const uint4*>(wd + bytes * (rep % copies)),
                                      bytes / 16, dummy);
      }
      cudaEventRecord(b);
      CHECK(cudaEventSynchronize(b));
      cudaEventElapsedTime(&stream_ms, a, b);
      const double stream_gbps = bytes * reps / (stream_ms * 1e-3) / 1e9;
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<uint16_t> x(static_cast<size_t>(kMaxRows) * sh.K);
      for (auto& v : x) v = f2h(nd(rng));
      // The reference for kMaxRows rows; the smaller counts are its first rows.
      const std::vector<double> ref = check ? reference(m, x) : std::vector<double>();
      const int tiles = sh.N / 16, n_sb = sh.K / 256;
      int ksplit = ksplit_opt;
      if (ksplit <= 0) ksplit = std::min((2 * sms + tiles - 1) / tiles, n_sb / warps);
      ksplit = std::max(1, std::min(ksplit, (n_sb + warps - 1) / warps));
      float *yd = nullptr, *partial = nullptr;
      int* counters = nullptr;
      uint4* xd = nullptr;
      CHECK(cudaMalloc(&yd, sizeof(float) * kMaxRows * sh.N));
      CHECK(cudaMalloc(
          &partial, sizeof(float) * static_cast<size_t>(tiles) * ksplit * (kMaxRows / 8) * 4 * 32));
      CHECK(cudaMalloc(&counters, sizeof(int) * tiles));
      CHECK(cudaMemset(counters, 0, sizeof(int) * tiles));
      CHECK(cudaMalloc(&xd, sizeof(uint16_t) * (kMaxRows / 8) * (sh.K / 32) * 32 * 8));
      std::vector<float> first_row;  // row 0 of the 1-row run: every other run's must match it
      for (int rows : row_counts) {
        const int NT = rows <= 8 ? 1 : rows <= 16 ? 2 : rows <= 32 ? 4 : 8;
        std::vector<uint16_t> xfp = pack_x(x, rows, sh.K, NT);
        CHECK(cudaMemcpy(xd, xfp.data(), xfp.size() * 2, cudaMemcpyHostToDevice));
        auto run = [&](int c) {
          const uint8_t* w = wd + bytes * (c % copies);
          if (q6)
            launch<FmtQ6K>(NT, dim3(tiles, ksplit), warps * 32, w, xd, yd, partial, counters, sh.N,
                           sh.K, rows);
          else
            launch<FmtQ4K>(NT, dim3(tiles, ksplit), warps * 32, w, xd, yd, partial, counters, sh.N,
                           sh.K, rows);
        };
        run(0);
        CHECK(cudaDeviceSynchronize());
        std::vector<float> y(static_cast<size_t>(rows) * sh.N);
        CHECK(cudaMemcpy(y.data(), yd, y.size() * 4, cudaMemcpyDeviceToHost));
        double nmse = 0;
        if (check) {
          double num = 0, den = 0;
          for (size_t i = 0; i < y.size(); ++i) {
            num += (y[i] - ref[i]) * (y[i] - ref[i]);
            den += ref[i] * ref[i];
          }
          nmse = num / den;
        }
        bool invariant = true;
        if (rows == 1)
          first_row.assign(y.begin(), y.begin() + sh.N);
        else
          invariant = std::memcmp(first_row.data(), y.data(), sh.N * 4) == 0;
        for (int c = 0; c < 3; ++c) run(c);
        cudaEventRecord(a);
        for (int rep = 0; rep < reps; ++rep) run(rep);
        cudaEventRecord(b);
        CHECK(cudaEventSynchronize(b));
        float ms = 0;
        cudaEventElapsedTime(&ms, a, b);
        const double us = ms * 1e3 / reps;
        std::printf("%-5s %-13s %6d %6d %4d %4d %8.2f %10.0f %10.0f %6.0f  %.2e%s\n", type, sh.name,
                    sh.N, sh.K, ksplit, rows, us, gguf_bytes / (us * 1e-6) / 1e9,
                    bytes / (us * 1e-6) / 1e9, stream_gbps, nmse,
                    invariant ? "" : "  ROW 0 DIFFERS FROM THE 1-ROW RUN");
      }
      cudaFree(wd);
      cudaFree(yd);
      cudaFree(partial);
      cudaFree(counters);
      cudaFree(xd);
    }
  }
  CHECK(cudaGetLastError());
  return 0;
}
