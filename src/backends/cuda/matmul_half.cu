// The kHalf matmul (kernels.h): Q4_K / Q6_K weights repacked at upload, dequantized to fp16 in
// registers and multiplied on the fp16 tensor cores (mma.m16n8k16, fp32 accumulation) with fp16
// activations. Every row count from 1 to 64 runs the same instructions per weight (only the
// number of 8-row n tiles changes), where the integer kernels pay a per-block conversion and
// float fix-ups per row. Measured on the H200 (session 28, `salvo bench --device cuda -p 512 -n
// 128 --verify --verify-rows 1,...,64 --verify-context 512`, SALVO_CUDA_HALF=0 / 1), real
// Qwen2.5-Coder-1.5B: k-row passes 1 1.127 / 1.247 ms, 8 2.109 / 1.515, 16 3.207 / 2.176, 64
// 9.809 / 6.526; pp512 10763 / 13292 tok/s; tg128 865 / 766. Random 7B shape: 1 row 2.15 /
// 2.52 ms, 16 rows 7.16 / 5.11, 64 rows 25.1 / 14.7. One row costs 10-17% more than the dp4a
// GEMV (the dequantization's ALU work, ~285 instructions per Q4_K chunk); the
// speculative modes, whose passes are 4-16 rows, gain 20-30% (bench_spec code auto 1393 ->
// 1814 tok/s). Session 67 on an H100 (random 7B, the same bench, int8 / kHalf): tg128 388.6,
// 394.0 / 384.2, 389.1 tok/s; 1 row 2.46 / 2.59 ms, 16 rows 6.48 / 3.46, pp512 4540 / 7267.
// The int8 gate/up launch streams 76 MB in 26.5 us (kHalf's 35.0: the dequantization's
// instructions), but its own activation and RoPE launches, its slower Q6_K down (27.4 against
// 23.2 us) and norms (4.5 against 3.9) take most of that back, and prefill loses 37%: plain
// decoding stays on kHalf too.
//
// Layout (pack_half_weights): per 16 output rows (a tile, the mma's m) and super-block of 256
// weights, one chunk. Its first 2048 bytes are the 4-bit quants in fragment order: lane l's
// uint4 i sits at 16 (32 i + l), and word j of it is k16 step 4 i + j with the nibbles of
// fragment register a0 at bits 0-3 and 16-19, a1 at 4-7 / 20-23, a2 8-11 / 24-27, a3 12-15 /
// 28-31, so (w >> 4 j) & 0x000F000F | 0x64006400 is register j as two fp16 1024 + q. Q6_K then
// has 1024 bytes of the quants' high 2 bits (lane l's uint4 i at 16 (32 i + l), word j of it
// steps 2 (4 i + j) and + 1, register r's pair at bits 2 r + 8 e and 16 + 2 r + 8 e for step
// parity e). The scales come after, in one of two layouts (kernels.h half_compact()): the wide
// one (FmtQ4KWide, FmtQ6KWide, the default) has each row's fp16 products, described there; the
// compact one (session 69, SALVO_HALF_COMPACT=1 until a GPU has measured it) keeps the GGUF's
// scales, a byte each, for the row pair (g, g + 8) that lanes 4 g .. 4 g + 3 hold, with the rows'
// fp16 d after them: 4.625 bits a Q4_K weight and 6.56 a Q6_K one against 5.0 and 7.0 (7.5% and
// 6.3% fewer bytes), and the same scales to the bit where d times the power of two below stays
// in fp16's normal range (half_pack_test):
// - Q4_K: 32 bytes at 2048 + 32 g, word j for sub-block j: 4 sc and 4 m of row g, then of row
//   g + 8; at 2304 + 8 g, half2 (256 d, -256 dmin) of row g, then of row g + 8. The bytes
//   become fp16 1 + 4 sc / 1024 (PRMT beside 0x3C), and one HFMA2 with the row's pair and its
//   negation gives (d sc, -dmin m), rounded once, as the wide layout's products are.
// - Q6_K: 32 bytes at 3072 + 32 g, byte 2 j + h: sc + 128 of group j for row g (h 0) or g + 8;
//   at 3328 + 4 g, half2 (d of row g, of row g + 8). 1024 + sc + 128 - 1152 is sc exactly, and
//   HMUL2 with d rounds d sc once.
// The scales carry a power of two per matrix (MatmulParams::half_scale undoes it on the fp32
// sums) so that small ones stay clear of fp16's subnormals; a row's d is 0 where all its scales
// are, so that 256 d stays finite (any scale of 1 or more bounds d by the largest product).
//
// Row invariance: a block takes one tile and one k split; warp w of split s takes super-blocks
// s W + w, + W S, ...; the warps' sums are added in warp order and the splits' in split order
// by the last block to arrive. W and S depend on the shape alone, and the mma computes each
// activation row's column on its own, so a row's bits do not depend on the rows beside it.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "backends/cuda/act.cuh"
#include "backends/cuda/bulk_copy.cuh"
#include "backends/cuda/cp_async.cuh"
#include "backends/cuda/device_memory.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/mma.cuh"
#include "backends/cuda/rope.cuh"
#include "quant/fp16.h"

namespace salvo::cuda {
namespace {

constexpr int kMaxWarps = 8;
constexpr int kMaxParts = 3;
constexpr int kQ4KChunk = 2368, kQ6KChunk = 3360;
constexpr int kQ4KWideChunk = 2560, kQ6KWideChunk = 3584;

// (w & 0x000F000F) | 0x64006400 in one LOP3 (0xEA: (a & b) | c): two fp16 1024 + nibble.
__device__ __forceinline__ uint32_t lop_nibbles(uint32_t w) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(w), "r"(0x000F000Fu), "r"(0x64006400u));
  return r;
}

// (w & 0x00F000F0) | 0x64006400: two fp16 1024 + 16 nibble.
__device__ __forceinline__ uint32_t lop_nibbles_hi(uint32_t w) {
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(w), "r"(0x00F000F0u), "r"(0x64006400u));
  return r;
}

// Weights are read once: past L1, and marked to leave L2 early.
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// A chunk's 16 bytes at p: from global memory (ld_stream) or, for the bulk form (kBulk), from the
// warp's shared ring.
template <bool kShared>
__device__ __forceinline__ uint4 ld_chunk(const uint8_t* p) {
  if constexpr (kShared) {
    return ld_shared16(p);
  } else {
    return ld_stream(p);
  }
}

// A chunk's 8 bytes at p (the rows' d pairs), as ld_chunk.
template <bool kShared>
__device__ __forceinline__ uint2 ld_chunk8(const uint8_t* p) {
  uint2 v;
  if constexpr (kShared) {
    asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(smem_u32(p)));
  } else {
    asm volatile("ld.global.cs.v2.u32 {%0,%1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "l"(p));
  }
  return v;
}

// A chunk's 4 bytes at p, as ld_chunk.
template <bool kShared>
__device__ __forceinline__ uint32_t ld_chunk4(const uint8_t* p) {
  uint32_t v;
  if constexpr (kShared) {
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(smem_u32(p)));
  } else {
    asm volatile("ld.global.cs.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
  }
  return v;
}

__device__ __forceinline__ uint32_t word_of(const uint4& v, int j) {
  return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
}

__device__ __forceinline__ half2 as_half2(uint32_t v) { return *reinterpret_cast<half2*>(&v); }
__device__ __forceinline__ uint32_t as_u32(half2 v) { return *reinterpret_cast<uint32_t*>(&v); }

// The fragment registers of a Q4_K k16 step from its quants' word w and the rows' (scale,
// -min): registers 1 and 3 take their nibbles where they lie (bits 4-7 / 20-23 of w and of w >>
// 8: fp16 1024 + 16 q, which x / 16 - 64 turns into q exactly), so a step shifts once, not three
// times. Both layouts (below) share it.
__device__ __forceinline__ void q4k_regs(uint32_t w, half2 s_g, half2 m_g, half2 s_g8, half2 m_g8,
                                         uint32_t (&a)[4]) {
  const half2 k1024 = __half2half2(__ushort_as_half(0x6400));
  const half2 k16th = __half2half2(__ushort_as_half(0x2C00));  // 1 / 16
  const half2 km64 = __half2half2(__ushort_as_half(0xD400));   // -64
  const uint32_t w8 = w >> 8;
  const half2 q0 = __hsub2(as_half2(lop_nibbles(w)), k1024);
  const half2 q1 = __hfma2(as_half2(lop_nibbles_hi(w)), k16th, km64);
  const half2 q2 = __hsub2(as_half2(lop_nibbles(w8)), k1024);
  const half2 q3 = __hfma2(as_half2(lop_nibbles_hi(w8)), k16th, km64);
  a[0] = as_u32(__hfma2(q0, s_g, m_g));
  a[1] = as_u32(__hfma2(q1, s_g8, m_g8));
  a[2] = as_u32(__hfma2(q2, s_g, m_g));
  a[3] = as_u32(__hfma2(q3, s_g8, m_g8));
}

// The same for Q6_K step s, hw its high bits' word: registers 1 and 3 take their nibbles at bits
// 4-7 (16 times the quant), their high bits go to bits 8-9, and x / 16 - 96 gives q - 32.
__device__ __forceinline__ void q6k_regs(uint32_t w, uint32_t hw, int s, half2 s_g, half2 s_g8,
                                         uint32_t (&a)[4]) {
  const half2 k1056 = __half2half2(__ushort_as_half(0x6420));  // 1024 + 32
  const half2 k16th = __half2half2(__ushort_as_half(0x2C00));  // 1 / 16
  const half2 km96 = __half2half2(__ushort_as_half(0xD600));   // -96
  const uint32_t w8 = w >> 8;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const bool odd = j % 2 == 1;
    const uint32_t lo = odd ? lop_nibbles_hi(j < 2 ? w : w8) : lop_nibbles(j < 2 ? w : w8);
    // The pair's high bits sit at 2 j + 8 (s % 2); they go to bit 4 (even j) or 8 (odd j).
    const int from = 2 * j + 8 * (s % 2), to = odd ? 8 : 4;
    const uint32_t hi = from >= to ? (hw >> (from - to)) : (hw << (to - from));
    uint32_t raw;  // lo | (hi & mask): the high bits above the nibble
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n"
        : "=r"(raw)
        : "r"(hi), "r"(odd ? 0x03000300u : 0x00300030u), "r"(lo));
    const half2 q = odd ? __hfma2(as_half2(raw), k16th, km96) : __hsub2(as_half2(raw), k1056);
    a[j] = as_u32(__hmul2(q, j % 2 == 0 ? s_g : s_g8));
  }
}

// Bytes 2 e and 2 e + 1 of w as the low bytes of two fp16, beside `high` (PRMT).
__device__ __forceinline__ half2 byte_pair(uint32_t w, int e, uint32_t high) {
  return as_half2(__byte_perm(w, high, e == 0 ? 0x4140 : 0x4342));
}

struct FmtQ4K {
  static constexpr int kBytes = kQ4KChunk;
  struct Regs {
    uint4 q[4];
    uint4 sm[2];  // word j of sm[j / 4]: sub-block j's 4 sc, 4 m of row g, then of row g + 8
    uint2 dm;     // half2 (256 d, -256 dmin) of row g (x) and of row g + 8 (y)
  };
  template <bool kShared = false>
  static __device__ __forceinline__ void load(const uint8_t* c, int lane, Regs& k) {
    const int g = lane / 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) k.q[i] = ld_chunk<kShared>(c + 16 * (32 * i + lane));
    k.sm[0] = ld_chunk<kShared>(c + 2048 + 32 * g);
    k.sm[1] = ld_chunk<kShared>(c + 2048 + 32 * g + 16);
    k.dm = ld_chunk8<kShared>(c + 2304 + 8 * g);
  }
  // Sub-block j's (d sc, -dmin m) of row g (h 0) or g + 8: (1 + 4 sc / 1024) 256 d - 256 d.
  static __device__ __forceinline__ half2 scale_min(const Regs& k, int j, int h) {
    const half2 dm = as_half2(h == 0 ? k.dm.x : k.dm.y);
    return __hfma2(byte_pair(word_of(k.sm[j / 4], j % 4), h, 0x3C3C3C3Cu), dm, __hneg2(dm));
  }
  // The fragment registers of k16 step s (0-15) of the super-block.
  static __device__ __forceinline__ void step(const Regs& k, int s, uint32_t (&a)[4]) {
    step_with(k, scale_min(k, s / 2, 0), scale_min(k, s / 2, 1), s, a);
  }
  // A chunk's scales made before its steps (chunk_mma's kPrep): v[2 j + h] is sub-block
  // j's scale_min of row g (h 0) or g + 8.
  struct Scales {
    half2 v[16];
  };
  static __device__ __forceinline__ void scales(const Regs& k, Scales& sc) {
#pragma unroll
    for (int j = 0; j < 16; ++j) sc.v[j] = scale_min(k, j / 2, j % 2);
  }
  static __device__ __forceinline__ void step(const Regs& k, const Scales& sc, int s,
                                              uint32_t (&a)[4]) {
    step_with(k, sc.v[s / 2 * 2], sc.v[s / 2 * 2 + 1], s, a);
  }
  static __device__ __forceinline__ void step_with(const Regs& k, half2 hg, half2 hg8, int s,
                                                   uint32_t (&a)[4]) {
    const half2 s_g = __low2half2(hg), m_g = __high2half2(hg);
    const half2 s_g8 = __low2half2(hg8), m_g8 = __high2half2(hg8);
    q4k_regs(word_of(k.q[s / 4], s % 4), s_g, m_g, s_g8, m_g8, a);
  }
};

struct FmtQ6K {
  static constexpr int kBytes = kQ6KChunk;
  struct Regs {
    uint4 q[4];
    uint4 h[2];
    uint4 sc[2];  // byte 2 j + h of word j / 2: group j's sc + 128 of row g (h 0) or g + 8
    uint32_t d;   // half2 (d of row g, d of row g + 8)
  };
  template <bool kShared = false>
  static __device__ __forceinline__ void load(const uint8_t* c, int lane, Regs& k) {
    const int g = lane / 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) k.q[i] = ld_chunk<kShared>(c + 16 * (32 * i + lane));
#pragma unroll
    for (int i = 0; i < 2; ++i) k.h[i] = ld_chunk<kShared>(c + 2048 + 16 * (32 * i + lane));
    k.sc[0] = ld_chunk<kShared>(c + 3072 + 32 * g);
    k.sc[1] = ld_chunk<kShared>(c + 3072 + 32 * g + 16);
    k.d = ld_chunk4<kShared>(c + 3328 + 4 * g);
  }
  // Group s's (d sc) of rows g and g + 8.
  static __device__ __forceinline__ half2 scale_pair(const Regs& k, int s) {
    const half2 k1152 = __half2half2(__ushort_as_half(0x6480));  // 1024 + 128
    const uint32_t sw = word_of(k.sc[s / 8], (s / 2) % 4);
    return __hmul2(__hsub2(byte_pair(sw, s % 2, 0x64646464u), k1152), as_half2(k.d));
  }
  // The fragment registers of k16 step s (0-15) of the super-block.
  static __device__ __forceinline__ void step(const Regs& k, int s, uint32_t (&a)[4]) {
    step_with(k, scale_pair(k, s), s, a);
  }
  // A chunk's scales made before its steps (chunk_mma's kPrep): v[s] is scale_pair(s).
  struct Scales {
    half2 v[16];
  };
  static __device__ __forceinline__ void scales(const Regs& k, Scales& sc) {
#pragma unroll
    for (int s = 0; s < 16; ++s) sc.v[s] = scale_pair(k, s);
  }
  static __device__ __forceinline__ void step(const Regs& k, const Scales& sc, int s,
                                              uint32_t (&a)[4]) {
    step_with(k, sc.v[s], s, a);
  }
  static __device__ __forceinline__ void step_with(const Regs& k, half2 pg, int s,
                                                   uint32_t (&a)[4]) {
    const half2 s_g = __low2half2(pg), s_g8 = __high2half2(pg);
    q6k_regs(word_of(k.q[s / 4], s % 4), word_of(k.h[s / 8], (s / 2) % 4), s, s_g, s_g8, a);
  }
};

// The wide layout (SALVO_HALF_COMPACT=0, the default until the compact one is measured on a
// GPU): each row's scales as fp16 products, Q4_K half2 (d sc, dmin m) a sub-block at 2048 + 4 (8
// rt + j), Q6_K half d sc a group at 3072 + 32 rt + 2 j.
struct FmtQ4KWide {
  static constexpr int kBytes = kQ4KWideChunk;
  struct Regs {
    uint4 q[4];
    uint4 sm[4];  // row g: sm[0..1] (sub-blocks 0-7), row g + 8: sm[2..3]
  };
  template <bool kShared = false>
  static __device__ __forceinline__ void load(const uint8_t* c, int lane, Regs& k) {
    const int g = lane / 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) k.q[i] = ld_chunk<kShared>(c + 16 * (32 * i + lane));
    const uint8_t* sm = c + 2048;
    k.sm[0] = ld_chunk<kShared>(sm + 32 * g);
    k.sm[1] = ld_chunk<kShared>(sm + 32 * g + 16);
    k.sm[2] = ld_chunk<kShared>(sm + 32 * (g + 8));
    k.sm[3] = ld_chunk<kShared>(sm + 32 * (g + 8) + 16);
  }
  // The fragment registers of k16 step s (0-15) of the super-block.
  static __device__ __forceinline__ void step(const Regs& k, int s, uint32_t (&a)[4]) {
    const int sub = s / 2;
    const half2 hg = as_half2(word_of(k.sm[sub / 4], sub % 4));
    const half2 hg8 = as_half2(word_of(k.sm[2 + sub / 4], sub % 4));
    const half2 s_g = __low2half2(hg), m_g = __hneg2(__high2half2(hg));
    const half2 s_g8 = __low2half2(hg8), m_g8 = __hneg2(__high2half2(hg8));
    q4k_regs(word_of(k.q[s / 4], s % 4), s_g, m_g, s_g8, m_g8, a);
  }
};

struct FmtQ6KWide {
  static constexpr int kBytes = kQ6KWideChunk;
  struct Regs {
    uint4 q[4];
    uint4 h[2];
    uint4 sc[4];  // row g: sc[0..1] (groups 0-15), row g + 8: sc[2..3]
  };
  template <bool kShared = false>
  static __device__ __forceinline__ void load(const uint8_t* c, int lane, Regs& k) {
    const int g = lane / 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) k.q[i] = ld_chunk<kShared>(c + 16 * (32 * i + lane));
#pragma unroll
    for (int i = 0; i < 2; ++i) k.h[i] = ld_chunk<kShared>(c + 2048 + 16 * (32 * i + lane));
    const uint8_t* sc = c + 3072;
    k.sc[0] = ld_chunk<kShared>(sc + 32 * g);
    k.sc[1] = ld_chunk<kShared>(sc + 32 * g + 16);
    k.sc[2] = ld_chunk<kShared>(sc + 32 * (g + 8));
    k.sc[3] = ld_chunk<kShared>(sc + 32 * (g + 8) + 16);
  }
  // The fragment registers of k16 step s (0-15) of the super-block.
  static __device__ __forceinline__ void step(const Regs& k, int s, uint32_t (&a)[4]) {
    const half2 pg = as_half2(word_of(k.sc[s / 8], (s / 2) % 4));
    const half2 pg8 = as_half2(word_of(k.sc[2 + s / 8], (s / 2) % 4));
    const half2 s_g = s % 2 == 0 ? __low2half2(pg) : __high2half2(pg);
    const half2 s_g8 = s % 2 == 0 ? __low2half2(pg8) : __high2half2(pg8);
    q6k_regs(word_of(k.q[s / 4], s % 4), word_of(k.h[s / 8], (s / 2) % 4), s, s_g, s_g8, a);
  }
};

struct HalfPart {
  const uint8_t* w = nullptr;
  float* y = nullptr;
  const float* bias = nullptr;
  float scale = 1.0f;
  int n_out = 0;
  HalfRole role = HalfRole::kPlain;
};

// A launch whose parts differ in format (Q4_K Q and K with a Q6_K V, as Q4_K_M files have in
// about half the layers): each block runs its own part's format, so a tile's sums are those of a
// launch of its format alone, and the V of those layers needs no launch of its own. H200, session
// 39 (`salvo bench --verify`, two runs each, SALVO_HALF_MIXED=0 the other form): real
// Qwen2.5-Coder-1.5B 8-row pass 1.313, 1.319 against 1.351, 1.351 ms, 1 row 1.201, 1.204 against
// 1.216, 1.217; drafted code passes (traced) 1.305, 1.309 against 1.330, 1.332; the random 7B
// unchanged (2.41-2.42 ms at 1 row, 2.66 at 8: its Q/K/V launch already takes two waves).
template <class Q4, class Q6>
struct FmtMixedOf {
  using Q4K = Q4;
  using Q6K = Q6;
};
using FmtMixed = FmtMixedOf<FmtQ4K, FmtQ6K>;
using FmtMixedWide = FmtMixedOf<FmtQ4KWide, FmtQ6KWide>;
template <class F>
constexpr bool kIsMixed = false;
template <class Q4, class Q6>
constexpr bool kIsMixed<FmtMixedOf<Q4, Q6>> = true;
template <class F>
constexpr bool kIsQ6K = std::is_same_v<F, FmtQ6K> || std::is_same_v<F, FmtQ6KWide>;
// The bytes of a bulk ring's slot: a mixed launch's take Q6_K's chunk.
template <class F>
constexpr int slot_bytes() {
  if constexpr (kIsMixed<F>) {
    return F::Q6K::kBytes;
  } else {
    return F::kBytes;
  }
}

// The elements (a, b) of rotation pair p of a head (rope_row_order): pairs below n_rot / 2
// rotate (NEOX: i and i + n_rot / 2; else 2i and 2i + 1), the rest are consecutive elements.
__host__ __device__ inline void rope_pair_dims(int p, int n_rot, bool neox, int& a, int& b) {
  const int half = n_rot / 2;
  if (p < half) {
    a = neox ? p : 2 * p;
    b = neox ? p + half : 2 * p + 1;
  } else {
    a = n_rot + 2 * (p - half);
    b = a + 1;
  }
}

struct HalfGroup {
  HalfPart m[kMaxParts];
  int first[kMaxParts + 1] = {};  // each part's first tile
  int n = 0;
  const uint4* x = nullptr;  // the activations' fragments, [8-row tile][n_in / 32][32]
  int n_in = 0, n_rows = 0, splits = 1;
  float* partial = nullptr;  // [tile][split][NT * 4 * 32]
  int* counts = nullptr;     // [tile]
  // MatmulParams::gated: one part, its tiles 8 gate rows and 8 up rows; act(gate) * up goes to
  // y [n_rows, n_out / 2] and, as fp16, to gated_h (rows from row0).
  bool gated = false;
  GatedAct act = GatedAct::kSilu;
  uint16_t* gated_h = nullptr;
  int64_t row0 = 0;
  RopeEpilogue rope;  // the parts whose role is not kPlain
  int q6k_parts = 0;  // FmtMixed: bit i set where part i is Q6_K (else Q4_K)
  bool early = true;  // a warp's second chunk of weights loads before the wait (tile_sums)
};

// A/B forms of the kernels, as template bits (a runtime flag would move the registers of every
// form): kBulk3 and kBulk4, the weights through a ring of 3 or 4 chunks in shared memory
// (tile_sums_bulk).
constexpr int kBulk3 = 4, kBulk4 = 8;
constexpr int kBulkForms = kBulk3 | kBulk4;
// kClusterSplits: a tile's k splits are the blocks of a thread-block cluster (1 x splits), and
// split 0 adds the others' sums from their shared memory (the default: half_cluster()).
constexpr int kClusterSplits = 16;
template <int Form>
constexpr int bulk_depth() {
  return (Form & kBulk4) != 0 ? 4 : 3;
}

// The lane's uint4 within a 32-lane group of the fragments: lane (g, t) holds column g, and with
// one n tile (NT == 1) the lanes whose column is past the rows read the last row's, so a one-row
// load touches 64 bytes instead of 512 (those columns' sums are never stored). Measured on the
// H200 (session 32, against every lane its own column, tg128): random 1.5B shape 857 -> 875
// tok/s, real Qwen2.5-Coder-1.5B 847 -> 853, random 7B 415 -> 418.
template <int NT>
__device__ __forceinline__ int x_lane(const HalfGroup& grp, int lane) {
  if (NT > 1) return lane;
  return min(lane / 4, grp.n_rows - 1) * 4 + lane % 4;
}

// A build's A/B knob (an alt build: -DCMAKE_CUDA_FLAGS=-DSALVO_HALF_PREP_NT=1 makes the scales
// first at every row count; session 71's ptxas: no new spills at 1 row, the 16-row mixed
// launch's 4 -> 8 bytes).
#ifndef SALVO_HALF_PREP_NT
#define SALVO_HALF_PREP_NT 4
#endif
// A chunk's made scales where the format has them (the compact layout), else nothing.
template <class F, bool kPrep>
struct PrepScales {
  struct type {};
};
template <class F>
struct PrepScales<F, true> {
  using type = typename F::Scales;
};

// One super-block: 16 k16 steps, each 4 fragment registers dequantized and NT mma. xv_of(p, nt):
// the lane's activation fragments of steps 2p and 2p + 1 for n tile nt (a uint4).
template <class F, int NT, class X>
__device__ __forceinline__ void chunk_mma(const typename F::Regs& k, X xv_of, float (&acc)[NT][4]) {
  // The compact layout's launches of SALVO_HALF_PREP_NT n tiles or more (32-64 rows) make the
  // chunk's scales first, out of each step's chain to its mma. Session 71 on an H100 (random
  // 7B): without it compact's 64-row pass took 10.75-10.81 ms against the wide layout's
  // 9.86-9.89, with the same instructions (sass_mix.py) but each scale's PRMT and HFMA2 just
  // before its step; not yet run on a GPU.
  constexpr bool kPrep =
      NT >= SALVO_HALF_PREP_NT && (std::is_same_v<F, FmtQ4K> || std::is_same_v<F, FmtQ6K>);
  typename PrepScales<F, kPrep>::type sc;
  if constexpr (kPrep) F::scales(k, sc);
#pragma unroll
  for (int p = 0; p < 8; ++p) {
    uint4 xv[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) xv[nt] = xv_of(p, nt);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      uint32_t a[4];
      if constexpr (kPrep) {
        F::step(k, sc, 2 * p + h, a);
      } else {
        F::step(k, 2 * p + h, a);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        mma16816(acc[nt], a, h == 0 ? xv[nt].x : xv[nt].z, h == 0 ? xv[nt].y : xv[nt].w);
      }
    }
  }
}

// chunk_mma with the activations from global memory. xs: the lane's fragments of the first step
// pair (n tile 0); n tile nt is nt_stride uint4 further. PreX0: the first step pair's fragments
// of the first kX0 n tiles come in x0, loaded a chunk ahead (the other pairs' loads are issued
// early enough by ptxas, the first one's was not: tile_sums).
template <class F, int NT, int kX0, bool PreX0>
__device__ __forceinline__ void chunk_steps(const typename F::Regs& k, const uint4* __restrict__ xs,
                                            int64_t nt_stride, float (&acc)[NT][4],
                                            const uint4 (&x0)[kX0]) {
  chunk_mma<F, NT>(
      k,
      [&](int p, int nt) {
        if (PreX0 && p == 0 && nt < kX0) return x0[nt < kX0 ? nt : 0];
        return __ldg(xs + nt * nt_stride + p * 32);
      },
      acc);
}

// A chunk's activation fragments in a warp's shared slot: [step pair][n tile][lane] uint4. The
// lane that copies a fragment is the lane that reads it back, so waiting on the lane's own
// cp.async group is all the ordering needed (no barrier).
constexpr int kStageUint4 = 8 * 32;  // per n tile and chunk
template <int NT>
__device__ __forceinline__ void stage_chunk(uint4* slot, const uint4* __restrict__ xs,
                                            int64_t nt_stride, int lane) {
#pragma unroll
  for (int p = 0; p < 8; ++p) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
      cp_async16_ca(slot + (p * NT + nt) * 32 + lane, xs + nt * nt_stride + p * 32);
  }
}

// The sums of one tile over the super-blocks first, first + stride, ... of its matrix. Stage:
// each chunk's activation fragments are copied into the warp's shared ring (two slots of NT *
// kStageUint4) with the next chunk's weights, a chunk ahead, so a step pair reads them from
// shared memory instead of waiting on L2 at each pair (ncu, random 1.5B, session 38: long
// scoreboard was the largest stall of every kHalf launch, 3-6 cycles an instruction, with 10-22%
// achieved occupancy to hide it). Either way the sums are the same operations in the same order.
template <class F, int NT, bool Stage>
__device__ __forceinline__ void tile_sums(const uint8_t* base, int n_sb, const uint4* xs,
                                          int64_t nt_stride, int first, int stride, int lane,
                                          uint4* ring, bool early, float (&acc)[NT][4]) {
  int sb = first;
  typename F::Regs cur, nxt;
  // Weights are never another kernel's output: the first chunk loads before the wait, and with
  // `early` (HalfGroup::early) the second one too, so a warp of one or two chunks (the 7B's
  // Q/K/V and output launches) has all its weight loads in flight while the kernel before it
  // ends. One n tile only: as a runtime choice in the 2-8-tile forms it moved their registers
  // (Q4_K 32 rows 128 -> 138, Q6_K 144 -> 182) and the 7B's 32-row pass from 5.50 to 5.84 ms.
  if (sb < n_sb) F::load(base + static_cast<int64_t>(sb) * F::kBytes, lane, cur);
  const bool second_early = NT == 1 && early && sb + stride < n_sb;
  if (second_early) F::load(base + static_cast<int64_t>(sb + stride) * F::kBytes, lane, nxt);
  pdl_enter();
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
  // Unstaged, one n tile: the first step pair's activations load with the next chunk's weights.
  // Without it the warp waited on that load at every chunk (ncu's stall samples of the 7B gate/up
  // at one row, session 32: 31% of them on that load and the mma after it); with it, H200, random
  // 7B shape, 1-row pass 2.50 -> 2.47 ms, 8 rows 2.74 -> 2.70 (the 1.5B shape unchanged). Tried
  // for both n tiles of 9-16-row launches too and removed (session 58, H100: the 7B's 16-row
  // pass 3.61 -> 3.67 ms).
  constexpr bool pre_x0 = !Stage && NT == 1;
  constexpr int kX0 = 1;
  uint4 x0[kX0] = {}, x0_next[kX0] = {};
  if constexpr (Stage) {
    if (sb < n_sb) stage_chunk<NT>(ring, xs + sb * 256, nt_stride, lane);
    cp_async_commit();
  } else if constexpr (pre_x0) {
#pragma unroll
    for (int nt = 0; nt < kX0; ++nt)
      if (sb < n_sb) x0[nt] = __ldg(xs + nt * nt_stride + sb * 256);
  }
  // One chunk loads while the one before it computes. (Two register sets taken in turn, without
  // the copy, measured slower on the H200: random 1.5B 1-row pass 1.21 -> 1.41 ms, 7B 2.52 ->
  // 2.87, with 26% fewer instructions; not understood.)
  for (int i = 0; sb < n_sb; sb += stride, ++i) {
    const int next = sb + stride;
    uint4* slot = ring + (i % 2) * NT * kStageUint4;
    if (next < n_sb) {
      if (i != 0 || !second_early)
        F::load(base + static_cast<int64_t>(next) * F::kBytes, lane, nxt);
      if constexpr (Stage) {
        stage_chunk<NT>(ring + ((i + 1) % 2) * NT * kStageUint4, xs + next * 256, nt_stride, lane);
      } else if constexpr (pre_x0) {
#pragma unroll
        for (int nt = 0; nt < kX0; ++nt) x0_next[nt] = __ldg(xs + nt * nt_stride + next * 256);
      }
    }
    if constexpr (Stage) {
      cp_async_commit();
      cp_async_wait<1>();
      chunk_mma<F, NT>(
          cur, [&](int p, int nt) { return slot[(p * NT + nt) * 32 + lane]; }, acc);
    } else {
      chunk_steps<F, NT, kX0, pre_x0>(cur, xs + sb * 256, nt_stride, acc, x0);
    }
    cur = nxt;
#pragma unroll
    for (int nt = 0; nt < kX0; ++nt) x0[nt] = x0_next[nt];
  }
}

// tile_sums for one n tile (1-8 rows) with the weights through the warp's ring of D chunks in
// shared memory, filled by bulk copies (bulk_copy.cuh) that lane 0 asks for D chunks ahead (an
// A/B form, SALVO_HALF_BULK=3|4). ncu on an H100 (session 57): about half the one-row gate/up
// launch's stall samples wait on a chunk's weights at first use, with one chunk in flight a warp
// (its registers); the narrow down / output matrices run at 40-50% of DRAM. Here a warp has D - 1
// to D chunks in flight and holds one chunk's registers. Same sums in the same order as
// tile_sums. bars: the warp's D barriers; ring: its D slots of F::kBytes.
template <class F, int D>
__device__ __forceinline__ void tile_sums_bulk(const uint8_t* base, int n_sb, const uint4* xs,
                                               int first, int stride, int lane, uint8_t* ring,
                                               uint64_t* bars, float (&acc)[1][4]) {
  const uint64_t policy = evict_first_policy();
  if (lane == 0) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      mbar_init(&bars[d]);
      const int sb = first + d * stride;
      if (sb < n_sb) {
        bulk_load(ring + d * F::kBytes, base + static_cast<int64_t>(sb) * F::kBytes, F::kBytes,
                  &bars[d], policy);
      }
    }
  }
  __syncwarp();
  pdl_enter();
  acc[0][0] = acc[0][1] = acc[0][2] = acc[0][3] = 0.0f;
  uint4 x0[1] = {}, x0_next[1] = {};
  if (first < n_sb) x0[0] = __ldg(xs + first * 256);
  int sb = first;
  for (int i = 0; sb < n_sb; sb += stride, ++i) {
    const int slot = i % D;
    if (sb + stride < n_sb) x0_next[0] = __ldg(xs + (sb + stride) * 256);
    mbar_wait(&bars[slot], (i / D) & 1);
    typename F::Regs k;
    F::template load<true>(ring + slot * F::kBytes, lane, k);
    chunk_steps<F, 1, 1, true>(k, xs + sb * 256, 0, acc, x0);
    // Every lane's reads of the slot are in registers and used: the slot takes chunk i + D.
    __syncwarp();
    const int refill = sb + D * stride;
    if (lane == 0 && refill < n_sb) {
      bulk_load(ring + slot * F::kBytes, base + static_cast<int64_t>(refill) * F::kBytes, F::kBytes,
                &bars[slot], policy);
    }
    x0[0] = x0_next[0];
  }
}

// Adds the sums of warps 1 .. W - 1 into warp 0's, in warp order, one n tile at a time. Every
// warp of the block takes part (barriers).
template <int NT>
__device__ __forceinline__ void add_warps(float (&acc)[NT][4], float (*red)[4][32], int warp,
                                          int lane, int W) {
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (warp != 0) {
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
}

// A tile's output o of activation row col: the fp32 sum scaled, plus the bias.
__device__ __forceinline__ float finish(const HalfPart& m, float sum, int o) {
  float v = __fmul_rn(sum, m.scale);
  if (m.bias != nullptr) v = __fadd_rn(v, m.bias[o]);
  return v;
}

// The end of a kRopeQ / kRopeK / kStoreV tile: lane (g, t) holds rows g and g + 8 of the tile
// for columns 8 nt + 2 t + {0, 1}. Q and K tiles hold rotation pairs (rope_row_order), so the
// lane rotates its own pairs; Q goes to y in the heads' own order, K and V to the cache slots
// (without rotate: Q and K to y unrotated, in the heads' order; V takes the plain epilogue).
// A lane's pairs are one pair index at 2 NT positions: their angle chains (rope_thetas'
// multiplications, one after another) run side by side, so a wide tile waits for one chain, not
// 2 NT in turn (session 30's first form, which rotated every row count, lost at 64 rows).
template <int NT>
__device__ __forceinline__ void rope_store_tile(const HalfGroup& grp, const HalfPart& m, int tile,
                                                int lane, const float (&acc)[NT][4]) {
  const RopeEpilogue& re = grp.rope;
  const int g = lane / 4, t = lane % 4;
  const int64_t row_width = m.role == HalfRole::kRopeK ? re.kv.k_width : re.kv.v_width;
  uint16_t* cache = m.role == HalfRole::kRopeK ? re.kv.k : re.kv.v;
  const int o0 = tile * 16 + g, o1 = o0 + 8;
  const int head = o0 / re.head_dim, p = 8 * ((o0 % re.head_dim) / 16) + g;
  int a, b;
  rope_pair_dims(p, re.n_rot, re.neox, a, b);
  const bool turns = m.role != HalfRole::kStoreV && p < re.n_rot / 2 && re.rotate;
  float theta[2 * NT];  // column 8 nt + 2 t + i at 2 nt + i
#pragma unroll
  for (int j = 0; j < 2 * NT; ++j) {
    const int col = 8 * (j / 2) + 2 * t + j % 2;
    theta[j] = col < grp.n_rows ? static_cast<float>(re.batch.pos[grp.row0 + col]) : 0.0f;
  }
  if (turns) rope_thetas(theta, p, re.theta_scale);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int col = 8 * nt + 2 * t + i;
      if (col >= grp.n_rows) continue;
      const int64_t r = grp.row0 + col;
      // Q (and K, V unrotated) to y as floats, K and V to the cache as fp16.
      const bool to_cache = m.role != HalfRole::kRopeQ && re.rotate;
      float* y = m.y + static_cast<int64_t>(col) * m.n_out;
      uint16_t* slot_row = to_cache
                               ? cache + (static_cast<int64_t>(re.batch.seq[r]) * re.kv.capacity +
                                          re.batch.slot[r]) *
                                             row_width
                               : nullptr;
      auto put = [&](int o, float value) {
        if (to_cache) {
          slot_row[o] = __half_as_ushort(__float2half_rn(value));
        } else {
          y[o] = value;
        }
      };
      const float x0 = finish(m, acc[nt][i], o0), x1 = finish(m, acc[nt][i + 2], o1);
      if (m.role == HalfRole::kStoreV) {
        put(o0, x0);
        put(o1, x1);
        continue;
      }
      float y0 = x0, y1 = x1;
      if (turns) rope_turn(x0, x1, theta[2 * nt + i], y0, y1);
      put(head * re.head_dim + a, y0);
      put(head * re.head_dim + b, y1);
    }
  }
}

// One block's tile of part m: grid (tiles of the group, splits); blockDim.x / 32 warps.
template <class F, int NT, bool Stage, int Form>
__device__ __forceinline__ void tile_work(const HalfGroup& grp, const HalfPart& m, int tile) {
  const int ks = blockIdx.y, n_split = grp.splits;
  const int W = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n_sb = grp.n_in / 256, n_k2 = grp.n_in / 32;
  const uint8_t* base = m.w + static_cast<int64_t>(tile) * n_sb * F::kBytes;
  float acc[NT][4];
  extern __shared__ uint4 half_ring[];  // Stage: per warp, 2 slots of NT * kStageUint4
  if constexpr ((Form & kBulkForms) != 0) {
    // kMaxWarps * D barriers, then each warp's D slots (bulk_smem_bytes).
    constexpr int D = bulk_depth<Form>();
    uint64_t* bars = reinterpret_cast<uint64_t*>(half_ring) + warp * D;
    uint8_t* ring = reinterpret_cast<uint8_t*>(half_ring) + kMaxWarps * 4 * sizeof(uint64_t) +
                    warp * D * F::kBytes;
    tile_sums_bulk<F, D>(base, n_sb, grp.x + x_lane<NT>(grp, lane), ks * W + warp, W * n_split,
                         lane, ring, bars, acc);
  } else {
    tile_sums<F, NT, Stage>(base, n_sb, grp.x + x_lane<NT>(grp, lane),
                            static_cast<int64_t>(n_k2) * 32, ks * W + warp, W * n_split, lane,
                            half_ring + warp * 2 * NT * kStageUint4, grp.early, acc);
  }
  __shared__ float red[kMaxWarps][4][32];
  add_warps<NT>(acc, red, warp, lane, W);
  if constexpr ((Form & kClusterSplits) != 0) {
    static_assert(NT <= kMaxWarps, "a block's sums fit red");
    // The global form's sums in the same order (split 0's, then each other split's added), from
    // the cluster's shared memory: no partials in global memory, fence or count.
    if (n_split > 1) {
      namespace cg = cooperative_groups;
      const cg::cluster_group cluster = cg::this_cluster();
      float* mine = &red[0][0][0];  // free after add_warps: [NT * 4][32]
      if (warp == 0) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
          for (int i = 0; i < 4; ++i) mine[(nt * 4 + i) * 32 + lane] = acc[nt][i];
        }
      }
      cluster.sync();  // every split's sums written and visible to the cluster
      if (ks == 0 && warp == 0) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            float v = acc[nt][i];
            for (int sp = 1; sp < n_split; ++sp) {
              v = __fadd_rn(v, cluster.map_shared_rank(mine, sp)[(nt * 4 + i) * 32 + lane]);
            }
            acc[nt][i] = v;
          }
        }
      }
      cluster.sync();  // no block leaves while split 0 may still read its shared memory
      if (ks != 0) return;
    }
  }
  if (warp != 0) return;
  if ((Form & kClusterSplits) == 0 && n_split > 1) {
    const int gtile = blockIdx.x;
    float* mine = grp.partial + (static_cast<int64_t>(gtile) * n_split + ks) * (NT * 4 * 32);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) mine[(nt * 4 + i) * 32 + lane] = acc[nt][i];
    }
    __threadfence();
    __syncwarp();
    int last = 0;
    if (lane == 0) last = atomicAdd(grp.counts + gtile, 1) == n_split - 1;
    last = __shfl_sync(0xffffffffu, last, 0);
    if (!last) return;
    __threadfence();
    const float* all = grp.partial + static_cast<int64_t>(gtile) * n_split * (NT * 4 * 32);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float v = __ldcg(all + (nt * 4 + i) * 32 + lane);
        for (int s = 1; s < n_split; ++s) {
          v = __fadd_rn(v, __ldcg(all + (s * NT * 4 + nt * 4 + i) * 32 + lane));
        }
        acc[nt][i] = v;
      }
    }
    if (lane == 0) grp.counts[gtile] = 0;
  }
  if (m.role != HalfRole::kPlain && (m.role != HalfRole::kStoreV || grp.rope.rotate)) {
    return rope_store_tile<NT>(grp, m, tile, lane, acc);
  }
  const int g = lane / 4, t = lane % 4;
  if (grp.gated) {
    // The lane holds gate (fragment rows g) and up (rows g + 8) of one output for two columns:
    // the product needs no other lane, block or launch.
    const int n_ff = m.n_out / 2, o = tile * 8 + g;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int col = 8 * nt + 2 * t + i;
        if (col >= grp.n_rows || o >= n_ff) continue;
        const float gv = __fmul_rn(acc[nt][i], m.scale), uv = __fmul_rn(acc[nt][i + 2], m.scale);
        const float v = grp.act == GatedAct::kSilu ? silu_times(gv, uv) : gelu_tanh_times(gv, uv);
        m.y[static_cast<int64_t>(col) * n_ff + o] = v;
        grp.gated_h[half_frag_index(grp.row0 + col, o, n_ff)] =
            __half_as_ushort(__float2half_rn(v));
      }
    }
    return;
  }
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int o = tile * 16 + g + 8 * (i / 2), col = 8 * nt + 2 * t + i % 2;
      if (col < grp.n_rows && o < m.n_out) {
        m.y[static_cast<int64_t>(col) * m.n_out + o] = finish(m, acc[nt][i], o);
      }
    }
  }
}

// A kernel's work: the block's part and tile, then that part's format.
template <class F, int NT, bool Stage, int Form = 0>
__device__ __forceinline__ void half_tiles(const HalfGroup& grp) {
  int part = 0;
  while (part + 1 < grp.n && static_cast<int>(blockIdx.x) >= grp.first[part + 1]) ++part;
  const HalfPart& m = grp.m[part];
  const int tile = blockIdx.x - grp.first[part];
  if constexpr (kIsMixed<F>) {
    if ((grp.q6k_parts >> part) & 1) {
      return tile_work<typename F::Q6K, NT, Stage, Form>(grp, m, tile);
    }
    return tile_work<typename F::Q4K, NT, Stage, Form>(grp, m, tile);
  } else {
    return tile_work<F, NT, Stage, Form>(grp, m, tile);
  }
}

template <class F, int NT, bool Stage = false>
__global__ void __launch_bounds__(kMaxWarps * 32) half_kernel(HalfGroup grp) {
  half_tiles<F, NT, Stage>(grp);
}

// The unstaged 1-8-row form, held to 128 registers (16 warps an SM). Left to itself ptxas gave
// the Q6_K form 136 once `early` (tile_sums) came in, so a 4-warp block of the 7B's Q6_K down
// fitted 3 times an SM instead of 4 (H100, session 58, random 7B: 1-row pass 2.74 ms against
// session 56's 2.65). With this kernel, and `early` for one n tile only (the 32-row pass had
// gone from 5.50 to 5.84 ms), another H100 of the same session, this build / session 56's,
// alternated: tg128 375.3, 380.8 / 373.1, 381.0 tok/s, 1 row 2.658, 2.678 / 2.675, 2.677 ms, 32
// rows 5.527, 5.506 / 5.539, 5.512.
template <class F, int Form = 0>
__global__ void __launch_bounds__(kMaxWarps * 32, 2) half_kernel_1(HalfGroup grp) {
  half_tiles<F, 1, false, Form>(grp);
}

// The 1-8-row form with the weights through bulk copies (SALVO_HALF_BULK=3|4: kBulk3, kBulk4).
template <class F, int Form>
__global__ void __launch_bounds__(kMaxWarps * 32) half_kernel_b(HalfGroup grp) {
  half_tiles<F, 1, false, Form>(grp);
}

// The 16-row form keeps to 128 registers (two blocks of 8 warps an SM): left to itself, ptxas
// gave the Q4_K form 136 once the fused norms' factor was gone, and the 7B's 12- and 16-row
// passes lost 9% to the lower occupancy (session 34). The other forms are left to ptxas: a bound
// on them moved the 32- and 64-row forms to 222-255 registers.
template <class F, int Form = 0>
__global__ void __launch_bounds__(kMaxWarps * 32, 2) half_kernel_16(HalfGroup grp) {
  half_tiles<F, 2, false, Form>(grp);
}

__global__ void half_frags_kernel(const float* x, int64_t n_rows, int64_t n_in, int64_t n,
                                  uint16_t* h) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int64_t r = i / n_in, k = i % n_in;
  const float v = r < n_rows ? x[i] : 0.0f;
  h[half_frag_index(r, k, n_in)] = __half_as_ushort(__float2half_rn(v));
}

// ---- the split scratch of a stream (a captured graph keeps its pointers) ----
// Tiles x splits of a launch with splits > 1: shape_of splits only groups of fewer than its
// target of blocks (2 an SM, ~530 on the H200; the knob can ask for more).
constexpr int kMaxSplitBlocks = 2048;
struct HalfScratch {
  DeviceBuffer partial, counts;
};
std::mutex scratch_mu;
std::map<cudaStream_t, std::unique_ptr<HalfScratch>>& scratches() {
  static std::map<cudaStream_t, std::unique_ptr<HalfScratch>> m;
  return m;
}
HalfScratch* find_scratch(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(scratch_mu);
  auto it = scratches().find(stream);
  return it == scratches().end() ? nullptr : it->second.get();
}

int sm_count_cached() {
  static const int n = [] {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 132;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
      return 132;
    return sms;
  }();
  return n;
}

struct Shape {
  int warps, splits;
};
// A/B knobs: SALVO_HALF_WARPS=W (1-8) forces the warps of a block, -1 picks the count in 4-8 that
// leaves the fewest warps without a super-block; SALVO_HALF_BLOCKS_PER_SM: the split target.
int half_warps_knob() {
  static const int n = env_int("SALVO_HALF_WARPS", 0);
  return n;
}
int half_blocks_knob() {
  static const int n = std::max(1, env_int("SALVO_HALF_BLOCKS_PER_SM", 2));
  return n;
}
// A warp's second chunk of weights loads before the wait for the previous kernel (tile_sums;
// SALVO_HALF_EARLY=0 turns it off). Session 57 on an H100, random shapes, `salvo bench --device
// cuda -p 512 -n 128 -r 3 --verify`, two runs each, off / on: 7B tg128 358.3, 357.7 / 368.8,
// 367.5 tok/s, 1-row pass 2.819, 2.827 / 2.751, 2.767 ms, 16 rows 3.62-3.65 either way; 1.5B
// tg128 876.1, 856.2 / 886.1, 892.3, 1 row 1.243, 1.259 / 1.216, 1.210. The same bits
// (cuda_ops_test, cuda_model_test and cuda_dflash_test with it). Those gains were partly its own
// registers' cost won back (half_kernel_1): with the registers mended in session 58 the 1-row
// pass equals session 56's build without it; on against off since then is not measured.
bool half_early() {
  static const bool on = env_on("SALVO_HALF_EARLY");
  return on;
}
// The 1-8- and 16-row launches whose tiles take 2 to 8 k splits add them up in a cluster
// (kClusterSplits) instead of through global memory, a fence and a count: those launches are
// short latency chains (session 64's trace, random 1.5B, 1-row pass: the down projection's 3
// splits a tile, 8.2 us for 7.7 MB of Q4_K, 30% of HBM's pace). The same bits. Session 66 on an
// H100 (random shapes, gpu_kit_quick.sh: `salvo bench -p 512 (7B) or 0 -n 128 -r 3 --verify
// --verify-rows 1,16 --verify-context 512`, two alternations, with / without): 1.5B tg128 904.0,
// 907.3 / 873.0, 885.8 tok/s, 1-row pass 1.197, 1.202 / 1.228, 1.234 ms, 16 rows 1.646, 1.652
// / 1.685, 1.691; 7B tg128 383.1, 383.3 / 384.0, 383.5, 1 row 2.614, 2.607 / 2.630, 2.623, 16
// rows 3.425, 3.424 / 3.474, 3.478. SALVO_HALF_CLUSTER=0 for A/B runs; read at every launch, so
// that a test runs both forms (a graph captures it once).
bool half_cluster() { return env_int("SALVO_HALF_CLUSTER", 1) != 0 && hopper(); }
// SALVO_HALF_BULK=3 or 4 (an A/B form): 1-8-row launches take the weights through a ring of that
// many chunks a warp (tile_sums_bulk), before the staged form of 5-8 rows. Session 58 on an H100
// (random 7B, one row): slower as a whole (1-row pass 2.84 / 2.86 ms against 2.74), but per
// launch (bench/kernel_trace.cc, kBulk3) the Q6_K down 33.1 -> 22.7 us, the LM head 178 -> 153,
// Q/K/V 7.9 -> 5.8, against the Q4_K down 18.2 -> 21.6, the output 3.6 -> 4.7 and the RMSNorm
// after each launch 4.2 -> 6.5. So the form is chosen per launch: SALVO_HALF_BULK_ON is a mask of
// the launches that take it (bulk_class), all of them when unset.
enum BulkClass { kBulkQ6K = 1, kBulkMixed = 2, kBulkQkv = 4, kBulkQ4K = 8 };
template <class F>
int bulk_class(const HalfGroup& grp) {
  if constexpr (kIsQ6K<F>) {
    return kBulkQ6K;
  } else if constexpr (kIsMixed<F>) {
    return kBulkMixed;
  } else {
    for (int i = 0; i < grp.n; ++i) {
      if (grp.m[i].role != HalfRole::kPlain) return kBulkQkv;  // Q/K/V and its RoPE epilogue
    }
    return kBulkQ4K;
  }
}
template <class F>
int half_bulk(const HalfGroup& grp) {
  static const int d = env_int("SALVO_HALF_BULK", 0);
  static const int on = env_int("SALVO_HALF_BULK_ON", 15);
  if (d != 3 && d != 4) return 0;
  return (on & bulk_class<F>(grp)) != 0 ? d : 0;
}
// The dynamic shared memory of a bulk launch: kMaxWarps * 4 barriers, then D slots a warp (a
// mixed launch's slots take Q6_K's chunk).
template <class F>
size_t bulk_smem_bytes(int depth, int warps) {
  return kMaxWarps * 4 * sizeof(uint64_t) + static_cast<size_t>(depth) * warps * slot_bytes<F>();
}
// Past the 48 KB a launch gets without asking, and all of the SM's memory as shared (the weights
// skip L1 in this form): asked once, before captures.
void allow_bulk_smem() {
  static const bool done = [] {
    const int most = static_cast<int>(bulk_smem_bytes<FmtQ6KWide>(4, kMaxWarps));
    for (const void* k :
         {(const void*)half_kernel_b<FmtQ4K, kBulk3>, (const void*)half_kernel_b<FmtQ6K, kBulk3>,
          (const void*)half_kernel_b<FmtMixed, kBulk3>, (const void*)half_kernel_b<FmtQ4K, kBulk4>,
          (const void*)half_kernel_b<FmtQ6K, kBulk4>, (const void*)half_kernel_b<FmtMixed, kBulk4>,
          (const void*)half_kernel_b<FmtQ4KWide, kBulk3>,
          (const void*)half_kernel_b<FmtQ6KWide, kBulk3>,
          (const void*)half_kernel_b<FmtMixedWide, kBulk3>,
          (const void*)half_kernel_b<FmtQ4KWide, kBulk4>,
          (const void*)half_kernel_b<FmtQ6KWide, kBulk4>,
          (const void*)half_kernel_b<FmtMixedWide, kBulk4>}) {
      SALVO_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
      SALVO_CUDA_CHECK(
          cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
    }
    return true;
  }();
  (void)done;
}
// Warps a block and k splits, from the group's shape alone (never its rows). Narrow, short
// matrices (Q/K/V, the attention output) take 8 warps, the rest 4 (session 27's prototype, 1 /
// 64 rows: 7B q/o 7.3 / 24 us at 8 warps against 10.2 / 38 at 4, but 7B gate+up 35.6 / 203
// against 35.6 / 116). Splits fill about two blocks an SM where the tiles alone cannot.
Shape shape_of(int tiles, int n_in, int total_out) {
  const int n_sb = n_in / 256;
  int warps = n_in <= 4096 && total_out <= 8192 ? 8 : 4;
  const int knob = half_warps_knob();
  if (knob >= 1 && knob <= kMaxWarps) warps = knob;
  if (knob == -1) {
    int best = kMaxWarps + 1;
    for (int w = 4; w <= kMaxWarps; ++w) {
      const int idle = (n_sb + w - 1) / w * w - n_sb;
      if (idle < best) best = idle, warps = w;
    }
  }
  const int target = half_blocks_knob() * sm_count_cached();
  int splits = std::min((target + tiles - 1) / tiles, n_sb / warps);
  splits = std::max(1, std::min(splits, (n_sb + warps - 1) / warps));
  while (splits > 1 && tiles * splits > kMaxSplitBlocks) --splits;
  return {warps, splits};
}

// Staged activations (tile_sums) for launches of 5-8 rows; SALVO_HALF_STAGE=0 loads them
// at each step pair as the other row counts do (A/B runs). Session 38 on the H200, staged for
// 1-16 rows against none (`salvo bench --verify`, two runs each): the 8-row pass of the random
// 1.5B 1.331, 1.340 against 1.379, 1.360 ms, of the random 7B 2.665, 2.672 against 2.704, 2.703;
// one row no faster; 16 rows 7% (1.5B) and 32% (7B) slower: two n tiles a slot take 64-128 KB of
// shared memory a block, the gate/up launch's occupancy fell from 21% to 15% and its stalls moved
// to the shared-memory pipe (mio_throttle). Staged for 5-8 rows only, real Qwen2.5-Coder-1.5B
// with its drafter, 7-node trees on the code prompts: verification pass 1.329, 1.325 against
// 1.354, 1.357 ms (SALVO_SPEC_TRACE), bench_spec code 2145 against 2084 tok/s, the same text.
bool stage_rows(int n_rows) {
  static const bool on = env_on("SALVO_HALF_STAGE");
  return on && n_rows > 4 && n_rows <= 8;
}
// The dynamic shared memory of a staged launch: two slots of kStageUint4 a warp (one n tile).
constexpr size_t stage_bytes(int warps) { return size_t{2} * kStageUint4 * sizeof(uint4) * warps; }
// 8 warps take 64 KB, past the 48 KB a launch gets without asking: asked once, before captures.
void allow_stage_smem() {
  static const bool done = [] {
    for (const void* k :
         {(const void*)half_kernel<FmtQ4K, 1, true>, (const void*)half_kernel<FmtQ6K, 1, true>,
          (const void*)half_kernel<FmtMixed, 1, true>,
          (const void*)half_kernel<FmtQ4KWide, 1, true>,
          (const void*)half_kernel<FmtQ6KWide, 1, true>,
          (const void*)half_kernel<FmtMixedWide, 1, true>}) {
      SALVO_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(stage_bytes(kMaxWarps))));
    }
    return true;
  }();
  (void)done;
}

template <class F, int NT>
void launch_nt(const HalfGroup& grp, int warps, cudaStream_t stream) {
  const dim3 grid(grp.first[grp.n], grp.splits);
  const bool cluster = half_cluster() && grp.splits > 1 && grp.splits <= kMaxPortableCluster;
  const dim3 splits(1, grp.splits, 1);
  if constexpr (NT == 2) {
    if (cluster) {
      return launch_cluster(half_kernel_16<F, kClusterSplits>, grid, splits, 32 * warps, 0, stream,
                            grp);
    }
    launch(half_kernel_16<F>, grid, 32 * warps, 0, stream, grp);
  } else if constexpr (NT == 1) {
    if (const int depth = half_bulk<F>(grp); depth != 0) {
      allow_bulk_smem();
      const size_t bytes = bulk_smem_bytes<F>(depth, warps);
      if (depth == 4) return launch(half_kernel_b<F, kBulk4>, grid, 32 * warps, bytes, stream, grp);
      return launch(half_kernel_b<F, kBulk3>, grid, 32 * warps, bytes, stream, grp);
    }
    if (stage_rows(grp.n_rows)) {
      allow_stage_smem();
      return launch(half_kernel<F, 1, true>, grid, 32 * warps, stage_bytes(warps), stream, grp);
    }
    if (cluster) {
      return launch_cluster(half_kernel_1<F, kClusterSplits>, grid, splits, 32 * warps, 0, stream,
                            grp);
    }
    launch(half_kernel_1<F>, grid, 32 * warps, 0, stream, grp);
  } else {
    launch(half_kernel<F, NT>, grid, 32 * warps, 0, stream, grp);
  }
}

template <class F>
void launch_rows(const HalfGroup& grp, int warps, cudaStream_t stream) {
  if (grp.n_rows <= 8) return launch_nt<F, 1>(grp, warps, stream);
  if (grp.n_rows <= 16) return launch_nt<F, 2>(grp, warps, stream);
  if (grp.n_rows <= 32) return launch_nt<F, 4>(grp, warps, stream);
  launch_nt<F, 8>(grp, warps, stream);
}

// A piece of a group in its format: Q4_K, Q6_K or both (FmtMixedOf) in one layout.
template <class Q4, class Q6, class Mixed>
void launch_format(const HalfGroup& piece, bool mixed, DType type, int warps, cudaStream_t stream) {
  if (mixed) {
    launch_rows<Mixed>(piece, warps, stream);
  } else if (type == DType::kQ4_K) {
    launch_rows<Q4>(piece, warps, stream);
  } else {
    launch_rows<Q6>(piece, warps, stream);
  }
}

// ---- packing (host) ----
// One GGUF super-block as 256 quants (0-15 or 0-63), its d and dmin, and its scales (Q4_K: 8
// sub-blocks of sc, m; Q6_K: 16 groups of sc).
struct Unpacked {
  uint8_t q[256];
  float d, dmin;
  int sc[16], m[16];
};
void unpack_block(DType type, const uint8_t* b, Unpacked& u) {
  if (type == DType::kQ4_K) {
    uint16_t dh, dmh;
    std::memcpy(&dh, b, 2);
    std::memcpy(&dmh, b + 2, 2);
    u.d = fp16_to_fp32(dh);
    u.dmin = fp16_to_fp32(dmh);
    const uint8_t* scales = b + 4;
    const uint8_t* qs = b + 16;
    for (int sub = 0; sub < 8; ++sub) {
      uint8_t sc, m;
      scale_min_k4(sub, scales, &sc, &m);
      u.sc[sub] = sc;
      u.m[sub] = m;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = qs[32 * (sub / 2) + l];
        u.q[32 * sub + l] = sub % 2 == 0 ? (byte & 0xF) : (byte >> 4);
      }
    }
    return;
  }
  // Q6_K: ql[128], qh[64], int8 scales[16], half d.
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  uint16_t dh;
  std::memcpy(&dh, b + 208, 2);
  u.d = fp16_to_fp32(dh);
  u.dmin = 0.0f;
  for (int g = 0; g < 16; ++g) {
    u.sc[g] = sc[g];
    u.m[g] = 0;
  }
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t a = ql[64 * n + l], c = ql[64 * n + l + 32], h = qh[32 * n + l];
      uint8_t* q = u.q + 128 * n;
      q[l] = static_cast<uint8_t>((a & 0xF) | ((h & 3) << 4));
      q[l + 32] = static_cast<uint8_t>((c & 0xF) | (((h >> 2) & 3) << 4));
      q[l + 64] = static_cast<uint8_t>((a >> 4) | (((h >> 4) & 3) << 4));
      q[l + 96] = static_cast<uint8_t>((c >> 4) | (((h >> 6) & 3) << 4));
    }
  }
}

// The fp16 of v * up, or 0 where every one of its n factors is 0: v then multiplies nothing,
// and a d that no scale bounds could overflow 256 d (the layout comment).
uint16_t scaled_half(float v, float up, const int* factors, int n) {
  bool any = false;
  for (int i = 0; i < n; ++i) any = any || factors[i] != 0;
  return fp32_to_fp16(any ? v * up : 0.0f);
}

// The compact layout's scales of tile row rt (the layout comment at the top): its scale bytes,
// then its d (and -dmin) times up.
void put_compact_scales(uint8_t* c, DType type, int rt, const Unpacked& u, float up) {
  const int g = rt % 8, h = rt / 8;
  if (type == DType::kQ4_K) {
    for (int sub = 0; sub < 8; ++sub) {
      c[2048 + 32 * g + 4 * sub + 2 * h] = static_cast<uint8_t>(4 * u.sc[sub]);
      c[2048 + 32 * g + 4 * sub + 2 * h + 1] = static_cast<uint8_t>(4 * u.m[sub]);
    }
    const uint16_t hd = scaled_half(256.0f * u.d, up, u.sc, 8);
    const uint16_t hm = scaled_half(-256.0f * u.dmin, up, u.m, 8);
    std::memcpy(c + 2304 + 8 * g + 4 * h, &hd, 2);
    std::memcpy(c + 2304 + 8 * g + 4 * h + 2, &hm, 2);
  } else {
    for (int grp = 0; grp < 16; ++grp) {
      c[3072 + 32 * g + 2 * grp + h] = static_cast<uint8_t>(u.sc[grp] + 128);
    }
    const uint16_t hd = scaled_half(u.d, up, u.sc, 16);
    std::memcpy(c + 3328 + 4 * g + 2 * h, &hd, 2);
  }
}

// The wide layout's scales of tile row rt: the fp16 products d sc (and dmin m) times up.
void put_wide_scales(uint8_t* c, DType type, int rt, const Unpacked& u, float up) {
  if (type == DType::kQ4_K) {
    for (int sub = 0; sub < 8; ++sub) {
      const uint16_t hs = fp32_to_fp16(u.d * static_cast<float>(u.sc[sub]) * up);
      const uint16_t hm = fp32_to_fp16(u.dmin * static_cast<float>(u.m[sub]) * up);
      std::memcpy(c + 2048 + 4 * (8 * rt + sub), &hs, 2);
      std::memcpy(c + 2048 + 4 * (8 * rt + sub) + 2, &hm, 2);
    }
    return;
  }
  for (int grp = 0; grp < 16; ++grp) {
    const uint16_t hs = fp32_to_fp16(u.d * static_cast<float>(u.sc[grp]) * up);
    std::memcpy(c + 3072 + 32 * rt + 2 * grp, &hs, 2);
  }
}

// The low nibble of quant k of tile row rt into the fragment-ordered 2048 bytes at c.
void put_nibble(uint8_t* c, int rt, int k, int q) {
  const int g = rt % 8, half = rt / 8, s = k / 16, kk = k % 16;
  const int jj = kk / 8, t = (kk % 8) / 2, e = kk % 2, j = half + 2 * jj, lane = 4 * g + t;
  uint32_t word;
  uint8_t* at = c + 16 * (32 * (s / 4) + lane) + 4 * (s % 4);
  std::memcpy(&word, at, 4);
  word |= static_cast<uint32_t>(q & 0xF) << (4 * j + 16 * e);
  std::memcpy(at, &word, 4);
}

// Q6_K: the high 2 bits of quant k of tile row rt into the 1024 bytes at c + 2048.
void put_high(uint8_t* c, int rt, int k, int q) {
  const int g = rt % 8, half = rt / 8, s = k / 16, kk = k % 16;
  const int jj = kk / 8, t = (kk % 8) / 2, e = kk % 2, j = half + 2 * jj, lane = 4 * g + t;
  uint32_t word;
  uint8_t* at = c + 2048 + 16 * (32 * (s / 8) + lane) + 4 * ((s / 2) % 4);
  std::memcpy(&word, at, 4);
  word |= static_cast<uint32_t>(q >> 4) << (2 * j + 8 * (s % 2) + 16 * e);
  std::memcpy(at, &word, 4);
}

int chunk_bytes(DType type, bool compact) {
  if (!compact) return type == DType::kQ4_K ? kQ4KWideChunk : kQ6KWideChunk;
  return type == DType::kQ4_K ? kQ4KChunk : kQ6KChunk;
}
int block_bytes(DType type) { return type == DType::kQ4_K ? 144 : 210; }

}  // namespace

bool half_enabled() {
  static const bool on = env_on("SALVO_CUDA_HALF");
  return on;
}

bool half_compact() {
  static const bool on = env_int("SALVO_HALF_COMPACT", 0) != 0;
  return on;
}

bool half_mixed_enabled() {
  static const bool on = env_on("SALVO_HALF_MIXED");
  return on;
}

bool half_supported(DType type, int64_t n_out, int64_t n_in) {
  return (type == DType::kQ4_K || type == DType::kQ6_K) && n_in % 256 == 0 && n_in > 0 && n_out > 0;
}

namespace {
// Runs fn(i) for i in [0, n) on the host's cores (a 7B model's matrices pack in seconds).
template <class Fn>
void parallel_for(int64_t n, Fn fn) {
  const int64_t n_threads =
      std::min<int64_t>(n, std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < n_threads; ++t) {
    pool.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += n_threads) fn(i);
    });
  }
  for (auto& th : pool) th.join();
}
}  // namespace

int64_t half_packed_bytes(DType type, int64_t n_out, int64_t n_in, bool compact) {
  return (n_out + 15) / 16 * (n_in / 256) * chunk_bytes(type, compact);
}

std::vector<uint8_t> pack_half_weights(DType type, const void* w, int64_t n_out, int64_t n_in,
                                       float* scale, bool compact) {
  SALVO_CHECK(half_supported(type, n_out, n_in));
  const int64_t n_sb = n_in / 256, tiles = (n_out + 15) / 16;
  const int chunk = chunk_bytes(type, compact), bb = block_bytes(type);
  const uint8_t* src = static_cast<const uint8_t*>(w);
  // The power of two that brings the largest scale or min near 256 (fp16's normal range is
  // 6.1e-5 to 65504; a dequantized weight is at most 63 of its scale).
  const int n_scales = type == DType::kQ4_K ? 8 : 16;
  std::vector<float> largest(tiles, 0.0f);
  parallel_for(tiles, [&](int64_t tile) {
    Unpacked u{};
    for (int64_t r = 16 * tile; r < std::min(n_out, 16 * tile + 16); ++r) {
      for (int64_t b = 0; b < n_sb; ++b) {
        unpack_block(type, src + (r * n_sb + b) * bb, u);
        for (int i = 0; i < n_scales; ++i) {
          const float s = std::fabs(u.d * static_cast<float>(u.sc[i]));
          const float m = std::fabs(u.dmin * static_cast<float>(u.m[i]));
          largest[tile] = std::max({largest[tile], s, m});
        }
      }
    }
  });
  const float most = *std::max_element(largest.begin(), largest.end());
  int shift = 0;
  if (most > 0.0f && std::isfinite(most)) {
    shift = static_cast<int>(std::floor(std::log2(256.0f / most)));
    shift = std::max(-24, std::min(24, shift));
  }
  const float up = std::ldexp(1.0f, shift);
  *scale = std::ldexp(1.0f, -shift);
  std::vector<uint8_t> out(static_cast<size_t>(half_packed_bytes(type, n_out, n_in, compact)), 0);
  parallel_for(tiles, [&](int64_t tile) {
    Unpacked u{};
    for (int64_t r = 16 * tile; r < std::min(n_out, 16 * tile + 16); ++r) {
      const int rt = static_cast<int>(r % 16);
      for (int64_t b = 0; b < n_sb; ++b) {
        unpack_block(type, src + (r * n_sb + b) * bb, u);
        uint8_t* c = out.data() + (tile * n_sb + b) * chunk;
        for (int k = 0; k < 256; ++k) {
          put_nibble(c, rt, k, u.q[k]);
          if (type == DType::kQ6_K) put_high(c, rt, k, u.q[k]);
        }
        if (compact) {
          put_compact_scales(c, type, rt, u, up);
        } else {
          put_wide_scales(c, type, rt, u, up);
        }
      }
    }
  });
  return out;
}

bool half_gated_supported(DType type, int64_t n_ff, int64_t n_in) {
  return half_supported(type, 2 * n_ff, n_in) && n_ff % 32 == 0;
}

std::vector<uint8_t> pack_half_gated(DType type, const void* gate, const void* up, int64_t n_ff,
                                     int64_t n_in, float* scale) {
  SALVO_CHECK(half_gated_supported(type, n_ff, n_in));
  const size_t rb = static_cast<size_t>(n_in / 256) * block_bytes(type);
  std::vector<uint8_t> rows(2 * n_ff * rb);
  for (int64_t r = 0; r < n_ff; ++r) {  // tile t: gate rows 8t..8t+7, then up's
    const int64_t at = 16 * (r / 8) + r % 8;
    std::memcpy(&rows[at * rb], static_cast<const uint8_t*>(gate) + r * rb, rb);
    std::memcpy(&rows[(at + 8) * rb], static_cast<const uint8_t*>(up) + r * rb, rb);
  }
  return pack_half_weights(type, rows.data(), 2 * n_ff, n_in, scale);
}

bool rope_rows_supported(int head_dim, int n_rot) {
  return head_dim > 0 && head_dim % 16 == 0 && n_rot >= 0 && n_rot % 2 == 0 && n_rot <= head_dim;
}

std::vector<int> rope_row_order(int n_heads, int head_dim, int n_rot, bool neox) {
  SALVO_CHECK(rope_rows_supported(head_dim, n_rot));
  std::vector<int> order(static_cast<size_t>(n_heads) * head_dim);
  for (int h = 0; h < n_heads; ++h) {
    for (int row = 0; row < head_dim; ++row) {
      int a, b;
      rope_pair_dims(8 * (row / 16) + row % 8, n_rot, neox, a, b);
      order[h * head_dim + row] = h * head_dim + (row % 16 < 8 ? a : b);
    }
  }
  return order;
}

void half_frags(const float* x, int64_t n_rows, int64_t n_in, uint16_t* h, cudaStream_t stream) {
  SALVO_CHECK(n_in % 32 == 0);
  const int64_t n = (n_rows + 7) / 8 * 8 * n_in;
  if (n == 0) return;
  launch(half_frags_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, x, n_rows, n_in,
         n, h);
}

Status half_prepare(cudaStream_t stream) {
  allow_stage_smem();
  std::lock_guard<std::mutex> lock(scratch_mu);
  if (scratches().count(stream) > 0) return Status();
  auto sc = std::make_unique<HalfScratch>();
  SALVO_RETURN_IF_ERROR(sc->partial.reserve(size_t{kMaxSplitBlocks} * 8 * 4 * 32 * sizeof(float)));
  SALVO_RETURN_IF_ERROR(sc->counts.reserve(size_t{kMaxSplitBlocks} * sizeof(int)));
  SALVO_CUDA_CHECK(cudaMemset(sc->counts.get(), 0, size_t{kMaxSplitBlocks} * sizeof(int)));
  scratches()[stream] = std::move(sc);
  return Status();
}

void half_release(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(scratch_mu);
  scratches().erase(stream);
}

void matmul_half_group(const MatmulParams* parts, int n_parts, cudaStream_t stream) {
  SALVO_CHECK(n_parts >= 1 && n_parts <= kMaxParts);
  const MatmulParams& p = parts[0];
  HalfGroup grp;
  grp.n = n_parts;
  int total_out = 0;
  bool mixed = false;
  for (int i = 0; i < n_parts; ++i) {
    const MatmulParams& q = parts[i];
    SALVO_CHECK(q.variant == MatmulVariant::kHalf && half_supported(q.type, q.n_out, q.n_in));
    SALVO_CHECK(q.n_in == p.n_in && q.n_rows == p.n_rows && q.xq.h == p.xq.h);
    SALVO_CHECK(q.xq.h != nullptr);
    grp.m[i] = {static_cast<const uint8_t*>(q.w), q.y,   q.bias, q.half_scale,
                static_cast<int>(q.n_out),        q.role};
    if (q.type == DType::kQ6_K) grp.q6k_parts |= 1 << i;
    mixed = mixed || q.type != p.type;
    if (q.role != HalfRole::kPlain) {
      SALVO_CHECK(q.rope.batch.n_rows == p.n_rows && q.n_out % 16 == 0);
      grp.rope = q.rope;
    }
    grp.first[i + 1] = grp.first[i] + static_cast<int>((q.n_out + 15) / 16);
    total_out += static_cast<int>(q.n_out);
  }
  if (p.n_rows == 0) return;
  if (p.gated) {
    SALVO_CHECK(n_parts == 1 && p.gated_h != nullptr && p.bias == nullptr &&
                half_gated_supported(p.type, p.n_out / 2, p.n_in));
    grp.gated = true;
    grp.act = p.gated_act;
    grp.gated_h = p.gated_h;
  }
  const int tiles = grp.first[n_parts];
  const Shape sh = shape_of(tiles, static_cast<int>(p.n_in), total_out);
  grp.n_in = static_cast<int>(p.n_in);
  grp.splits = sh.splits;
  grp.early = half_early();
  if (grp.splits > 1) {
    HalfScratch* sc = find_scratch(stream);
    if (sc == nullptr) {
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
      SALVO_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
      SALVO_CHECK_MSG(capturing == cudaStreamCaptureStatusNone,
                      "matmul: matmul_prepare(stream) must come before a graph capture");
      const Status st = half_prepare(stream);
      SALVO_CHECK_MSG(st.ok(), st.message().c_str());
      sc = find_scratch(stream);
    }
    grp.partial = sc->partial.get<float>();
    grp.counts = sc->counts.get<int>();
  }
  // Launches of up to kMatmulMaxRows rows (8 n tiles of the fragments each).
  const int64_t tile_uint4 = p.n_in / 32 * 32;  // uint4 of one 8-row tile
  for (int64_t r0 = 0; r0 < p.n_rows; r0 += kMatmulMaxRows) {
    HalfGroup piece = grp;
    piece.x = reinterpret_cast<const uint4*>(p.xq.h) + (r0 / 8) * tile_uint4;
    piece.n_rows = static_cast<int>(std::min<int64_t>(kMatmulMaxRows, p.n_rows - r0));
    piece.row0 = r0;
    for (int i = 0; i < n_parts; ++i) {  // a gated matrix writes n_out / 2 columns a row
      piece.m[i].y = parts[i].y + r0 * (p.gated ? p.n_out / 2 : parts[i].n_out);
    }
    if (!half_compact()) {
      launch_format<FmtQ4KWide, FmtQ6KWide, FmtMixedWide>(piece, mixed, p.type, sh.warps, stream);
    } else {
      launch_format<FmtQ4K, FmtQ6K, FmtMixed>(piece, mixed, p.type, sh.warps, stream);
    }
  }
}

}  // namespace salvo::cuda
