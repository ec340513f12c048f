// What the integer matmul kernels share (mma_kernel in matmul_mma.cu, dp4a_kernel in
// intmm_dp4a.cuh): the block formats' unpacking, the mma wrappers and the launch arguments.
//
// Block-quantized matrix × skinny activation product on the int8 tensor cores (variant kMma).
//
// The activations are quantized per row and 32-element block to int8 (quantize_rows, like
// ggml's q8_1). A warp owns a tile of 16 output rows and up to 64 activation rows (NT tiles of
// 8) and walks its share of the weight blocks: per 32-element (sub-)block it unpacks the
// thread's weight quants straight into the A fragment of mma.sync m16n8k32 (Q6_K, with a scale
// per 16 elements, uses m16n8k16), multiplies them by the int8 activations exactly in int32 and
// then applies the block's scales and minimum in float. The weights are unpacked as unsigned
// values; an offset format (Q4_0: q - 8) subtracts offset × (sum of the activation quants), and a
// minimum (Q4_1, Q4_K, Q5_K) adds min × d_x × that sum, both exact integers before the float
// step. Within one k step the pairing of the thread's weight bytes and activation bytes is free
// (the mma sums the 32 products), so each format uses the layout that makes its loads widest.
//
// Row invariance: the integer dot of a block is exact; the float steps of y[r, o] are the same
// explicit-rounding operations (__fmaf_rn, __fmul_rn, __fadd_rn) in the same order whatever the
// number of rows: a block's warp (the k slices) depends on the shape only, each warp adds its
// blocks in increasing order, and the warps' partial sums are added in warp order.
#pragma once

#include "backends/cuda/dequant.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/q8.cuh"

namespace salvo::cuda::intmm {

// ---- loads -------------------------------------------------------------------------------

// 4 bytes from a 2-byte aligned address (Q4_0, Q5_0, Q8_0 and Q6_K blocks are 18/22/34/210
// bytes long, so their fields sit at even addresses only).
__device__ __forceinline__ uint32_t ld_a2(const uint8_t* p) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(__ldg(s)) | (static_cast<uint32_t>(__ldg(s + 1)) << 16);
}
__device__ __forceinline__ uint32_t ld_a4(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint32_t*>(p));
}
__device__ __forceinline__ uint2 ld_a8(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint2*>(p));
}
__device__ __forceinline__ uint4 ld_a16(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint4*>(p));
}
__device__ __forceinline__ uint16_t ld_u16(const uint8_t* p) {
  return __ldg(reinterpret_cast<const uint16_t*>(p));
}
__device__ __forceinline__ float half_bits(uint32_t h) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h & 0xFFFF)));
}
// Bits 0..3 of v to bit 4 of bytes 0..3 (the fifth bit of four Q5_0 quants).
__device__ __forceinline__ uint32_t spread4(uint32_t v) {
  return ((v * 0x00204081u) & 0x01010101u) << 4;
}

// ---- the weight formats ---------------------------------------------------------------------
// Per format: kElems/kBytes of a block, kK (elements of one mma step: 32, or 16 for Q6_K),
// kUnit (blocks a warp loads before it computes: enough bytes in flight), kSigned (quants are
// int8), kOffset (subtracted from each unsigned quant), kMin (a per-block minimum term), kPair8
// (the thread's activation bytes are elements [8t, 8t + 8) of the step; else [4t, 4t + 4) and
// [16 + 4t, 20 + 4t), or [4t, 4t + 4) for k16). load() reads the thread's share of one row's
// block (b: a device pointer, or the dp4a kernel's shared-memory copy); step() returns the A
// registers of step s (lo: logical k 4t.., hi: k 16 + 4t..), the scale dw and the min mw (added as
// mw × d_x × sum of x quants).
template <DType T>
struct Fmt;

template <>
struct Fmt<DType::kQ4_0> {
  static constexpr int kElems = 32, kBytes = 18, kK = 32, kUnit = 4, kOffset = 8;
  static constexpr bool kSigned = false, kMin = false, kPair8 = false;
  struct Raw {
    uint32_t d, q;
  };
  template <class Src>
  __device__ static void load(Src b, int t, Raw& r) {
    r.d = ld_u16(b);
    r.q = ld_a2(b + 2 + 4 * t);
  }
  __device__ static void step(const Raw& r, int, uint32_t& lo, uint32_t& hi, float& dw, float& mw) {
    lo = r.q & 0x0F0F0F0Fu;
    hi = (r.q >> 4) & 0x0F0F0F0Fu;
    dw = half_bits(r.d);
    mw = 0.0f;
  }
};

template <>
struct Fmt<DType::kQ4_1> {
  static constexpr int kElems = 32, kBytes = 20, kK = 32, kUnit = 4, kOffset = 0;
  static constexpr bool kSigned = false, kMin = true, kPair8 = false;
  struct Raw {
    uint32_t dm, q;
  };
  template <class Src>
  __device__ static void load(Src b, int t, Raw& r) {
    r.dm = ld_a4(b);
    r.q = ld_a4(b + 4 + 4 * t);
  }
  __device__ static void step(const Raw& r, int, uint32_t& lo, uint32_t& hi, float& dw, float& mw) {
    lo = r.q & 0x0F0F0F0Fu;
    hi = (r.q >> 4) & 0x0F0F0F0Fu;
    dw = half_bits(r.dm);
    mw = half_bits(r.dm >> 16);
  }
};

template <>
struct Fmt<DType::kQ5_0> {
  static constexpr int kElems = 32, kBytes = 22, kK = 32, kUnit = 4, kOffset = 16;
  static constexpr bool kSigned = false, kMin = false, kPair8 = false;
  struct Raw {
    uint32_t d, qh, q;
  };
  template <class Src>
  __device__ static void load(Src b, int t, Raw& r) {
    r.d = ld_u16(b);
    r.qh = ld_a2(b + 2);
    r.q = ld_a2(b + 6 + 4 * t);
  }
  __device__ static void step(const Raw& r, int, uint32_t& lo, uint32_t& hi, float& dw, float& mw,
                              int t) {
    lo = (r.q & 0x0F0F0F0Fu) | spread4((r.qh >> (4 * t)) & 0xF);
    hi = ((r.q >> 4) & 0x0F0F0F0Fu) | spread4((r.qh >> (16 + 4 * t)) & 0xF);
    dw = half_bits(r.d);
    mw = 0.0f;
  }
};

template <>
struct Fmt<DType::kQ8_0> {
  static constexpr int kElems = 32, kBytes = 34, kK = 32, kUnit = 4, kOffset = 0;
  static constexpr bool kSigned = true, kMin = false, kPair8 = true;
  struct Raw {
    uint32_t d, q0, q1;
  };
  template <class Src>
  __device__ static void load(Src b, int t, Raw& r) {
    r.d = ld_u16(b);
    r.q0 = ld_a2(b + 2 + 8 * t);
    r.q1 = ld_a2(b + 6 + 8 * t);
  }
  __device__ static void step(const Raw& r, int, uint32_t& lo, uint32_t& hi, float& dw, float& mw) {
    lo = r.q0;
    hi = r.q1;
    dw = half_bits(r.d);
    mw = 0.0f;
  }
};

// ggml's get_scale_min_k4 on the 12 scale bytes held in three words.
__device__ __forceinline__ void scale_min_k4(int j, uint32_t s0, uint32_t s1, uint32_t s2, int& d,
                                             int& m) {
  const uint32_t w[3] = {s0, s1, s2};
  auto byte = [&](int i) { return static_cast<int>((w[i / 4] >> (8 * (i % 4))) & 0xFF); };
  if (j < 4) {
    d = byte(j) & 63;
    m = byte(j + 4) & 63;
  } else {
    d = (byte(j + 4) & 0xF) | ((byte(j - 4) >> 6) << 4);
    m = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
  }
}

// Q4_K and Q5_K: 64-element group j holds elements 64j + l (low nibble of qs[32j + l]) and
// 64j + 32 + l (high nibble); the thread takes l in [8t, 8t + 8), so one 8-byte load feeds the
// two steps (sub-blocks 2j and 2j + 1) of the group.
template <>
struct Fmt<DType::kQ4_K> {
  static constexpr int kElems = 256, kBytes = 144, kK = 32, kUnit = 1, kOffset = 0;
  static constexpr bool kSigned = false, kMin = true, kPair8 = true;
  struct Raw {
    uint4 hdr;
    uint2 q[4];
  };
  template <class Src>
  __device__ static void load(Src b, int t, Raw& r) {
    r.hdr = ld_a16(b);
#pragma unroll
    for (int j = 0; j < 4; ++j) r.q[j] = ld_a8(b + 16 + 32 * j + 8 * t);
  }
  __device__ static void step(const Raw& r, int s, uint32_t& lo, uint32_t& hi, float& dw,
                              float& mw) {
    const int shift = 4 * (s & 1);
    lo = (r.q[s / 2].x >> shift) & 0x0F0F0F0Fu;
    hi = (r.q[s / 2].y >> shift) & 0x0F0F0F0Fu;
    int sc, m;
    scale_min_k4(s, r.hdr.y, r.hdr.z, r.hdr.w, sc, m);
    dw = __fmul_rn(half_bits(r.hdr.x), static_cast<float>(sc));
    mw = -__fmul_rn(half_bits(r.hdr.x >> 16), static_cast<float>(m));
  }
};

template <>
struct Fmt<DType::kQ5_K> {
  static constexpr int kElems = 256, kBytes = 176, kK = 32, kUnit = 1, kOffset = 0;
  static constexpr bool kSigned = false, kMin = true, kPair8 = true;
  struct Raw {
    uint4 hdr;
    uint2 qh;
    uint2 q[4];
  };
  template <class Src>
  __device__ static void load(Src b, int t, Raw& r) {
    r.hdr = ld_a16(b);
    r.qh = ld_a8(b + 16 + 8 * t);
#pragma unroll
    for (int j = 0; j < 4; ++j) r.q[j] = ld_a8(b + 48 + 32 * j + 8 * t);
  }
  __device__ static void step(const Raw& r, int s, uint32_t& lo, uint32_t& hi, float& dw,
                              float& mw) {
    const int shift = 4 * (s & 1);
    lo = ((r.q[s / 2].x >> shift) & 0x0F0F0F0Fu) | (((r.qh.x >> s) & 0x01010101u) << 4);
    hi = ((r.q[s / 2].y >> shift) & 0x0F0F0F0Fu) | (((r.qh.y >> s) & 0x01010101u) << 4);
    int sc, m;
    scale_min_k4(s, r.hdr.y, r.hdr.z, r.hdr.w, sc, m);
    dw = __fmul_rn(half_bits(r.hdr.x), static_cast<float>(sc));
    mw = -__fmul_rn(half_bits(r.hdr.x >> 16), static_cast<float>(m));
  }
};

// Q6_K: 16 steps of 16 elements, step s = elements [16s, 16s + 16) with the int8 scale sc[s].
// Half n = s / 8, quarter qq = (s % 8) / 2 of that half, l = 16 (s % 2) + 4t + i: the low four
// bits are nibble (qq >= 2) of ql[64n + 32 (qq & 1) + l], the high two bits of
// qh[32n + l] >> 2qq. The thread keeps l in [4t, 4t + 4) and [16 + 4t, 20 + 4t).
template <>
struct Fmt<DType::kQ6_K> {
  static constexpr int kElems = 256, kBytes = 210, kK = 16, kUnit = 1, kOffset = 32;
  static constexpr bool kSigned = false, kMin = false, kPair8 = false;
  struct Raw {
    uint32_t ql[8], qh[4], sc[4], d;
  };
  template <class Src>
  __device__ static void load(Src b, int t, Raw& r) {
    load_half(b, t, 0, r);
    load_half(b, t, 1, r);
  }
  // The words of half n only (steps [8n, 8n + 8)): a kernel holding four rows' blocks loads
  // each half just before its steps, so half 0's words are dead before half 1's are live.
  template <class Src>
  __device__ static void load_half(Src b, int t, int n, Raw& r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      r.ql[4 * n + h] = ld_a2(b + 64 * n + 16 * h + 4 * t);
      r.ql[4 * n + 2 + h] = ld_a2(b + 64 * n + 32 + 16 * h + 4 * t);
      r.qh[2 * n + h] = ld_a2(b + 128 + 32 * n + 16 * h + 4 * t);
      r.sc[2 * n + h] = ld_a2(b + 192 + 4 * (2 * n + h));
    }
    r.d = ld_u16(b + 208);
  }
  __device__ static void step(const Raw& r, int s, uint32_t& a, float& dw) {
    const int n = s / 8, qq = (s % 8) / 2, h = s % 2;
    const uint32_t ql = r.ql[4 * n + 2 * (qq & 1) + h];
    const uint32_t nib = qq >= 2 ? (ql >> 4) & 0x0F0F0F0Fu : ql & 0x0F0F0F0Fu;
    a = nib | (((r.qh[2 * n + h] >> (2 * qq)) & 0x03030303u) << 4);
    const int sc = static_cast<int8_t>((r.sc[s / 4] >> (8 * (s % 4))) & 0xFF);
    dw = __fmul_rn(half_bits(r.d), static_cast<float>(sc));
  }
};

// Q5_0's step needs the lane's t; the others ignore it.
template <DType T>
__device__ __forceinline__ void fmt_step(const typename Fmt<T>::Raw& r, int s, int t, uint32_t& lo,
                                         uint32_t& hi, float& dw, float& mw) {
  if constexpr (T == DType::kQ5_0) {
    Fmt<T>::step(r, s, lo, hi, dw, mw, t);
  } else {
    Fmt<T>::step(r, s, lo, hi, dw, mw);
  }
}

// A Q8Meta as one 8-byte load (read field by field, it took two 4-byte loads).
__device__ __forceinline__ Q8Meta ld_meta(const Q8Meta* m) {
  static_assert(sizeof(Q8Meta) == 8, "Q8Meta is one 8-byte word");
  const uint2 v = *reinterpret_cast<const uint2*>(m);
  Q8Meta r;
  r.d = __uint_as_float(v.x);
  r.sum_lo = static_cast<int16_t>(v.y & 0xFFFF);
  r.sum_hi = static_cast<int16_t>(v.y >> 16);
  return r;
}

// ---- mma -----------------------------------------------------------------------------------

template <bool kSigned>
__device__ __forceinline__ void mma_k32(int c[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  if constexpr (kSigned) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ void mma_k16_u8(int c[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, "
      "{%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

struct MmaArgs {
  const uint8_t* w;
  int64_t row_bytes;
  bool tiled;  // tile_weights()' layout (kUnit == 1 formats; the kernels' kTiled)
  int n_out, n_in, n_rows;
  const int8_t* xq;
  const Q8Meta* meta;
  int64_t meta_stride;
  float* y;
  const float* bias;
};

// Rows of a tile of tile_weights(): the dp4a kernel's tile, whose copy of one block of its rows
// is then one contiguous run. Tiles of 16 rows (the mma kernel's) measured worse on the H200
// (session 20, random Qwen2.5-1.5B shape, tg128 tok/s, row-major / 16 / 32: 765 / 778 / 830):
// the two runs of a dp4a tile lose most of the gain, and the 16-row passes were as slow.
constexpr int kTileRows = 32;

// The kernels are compiled per layout (kTiled) rather than branching on p.tiled: the address
// arithmetic sits in the copy loops, and a runtime choice there cost the row-major layout 5% of
// a 1.5B decode step (H200, session 20).
// Block 0 of row `o`: in the row-major GGUF layout, or in tile_weights()' (where a row's
// blocks sit kTileRows blocks apart).
template <DType T, bool kTiled>
__device__ __forceinline__ const uint8_t* weight_row(const MmaArgs& p, int o) {
  using F = Fmt<T>;
  if constexpr (kTiled) {
    const int64_t n_blocks = p.n_in / F::kElems;
    return p.w +
           (static_cast<int64_t>(o / kTileRows) * n_blocks * kTileRows + o % kTileRows) * F::kBytes;
  } else {
    return p.w + static_cast<int64_t>(o) * p.row_bytes;
  }
}
// The types tile_weights() lays out (one block a unit); the others compile one layout.
constexpr bool can_tile(DType t) {
  return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}

// Bytes from a row's block to its next block.
template <DType T, bool kTiled>
constexpr int64_t block_stride() {
  return kTiled ? kTileRows * Fmt<T>::kBytes : Fmt<T>::kBytes;
}

constexpr int kMaxSlices = 8;  // warps per block, each a slice of the weight blocks

// Split k: a narrow matrix (few output tiles, e.g. the 1.5B's down projection: 48 dp4a blocks
// for 132 SMs) also splits its slices across up to kMaxSplits blocks per tile (the grid's z).
// Each block writes its warps' sum (in warp order) to a scratch tile of kSplitTileFloats, and
// the block that arrives last at the tile's count adds the blocks' sums in split order: a fixed
// order given by the shape, so row invariance and the dp4a/mma agreement hold. The scratch
// holds kSplitPieces 64-row pieces; wider launches run in several.
constexpr int kMaxSplits = 8;
constexpr int kSplitTileFloats = 16 * kMatmulMaxRows;  // mma: 16 outputs x 64 rows; dp4a: 32 x 8
constexpr int kSplitPieces = 4;

// Up to kMaxGroup matrices of one type and width that read the same activations (Q/K/V,
// gate/up) in one launch: blocks [first[i], first[i + 1]) compute matrix i.
constexpr int kMaxGroup = 3;
struct MmaGroup {
  MmaArgs m[kMaxGroup];
  int first[kMaxGroup + 1];
  int n;
  int splits = 1;             // blocks per tile along k (gridDim.z)
  float* partial = nullptr;   // [pieces][tiles][splits][kSplitTileFloats] when splits > 1
  int* counts = nullptr;      // [pieces][tiles], zero between launches
  bool early_weights = true;  // the first unit's weights are read before the PDL wait
};

// Slice (k share) of this warp among the warps of all blocks of its tile.
__device__ __forceinline__ int my_slice(int n_warps) {
  return static_cast<int>(blockIdx.z) * n_warps + static_cast<int>(threadIdx.x / 32);
}

__device__ __forceinline__ float* split_tile(const MmaGroup& g, int split) {
  const int64_t tile = static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x;
  return g.partial + (tile * g.splits + split) * kSplitTileFloats;
}

// Called by every thread after the block wrote its sums to split_tile(g, blockIdx.z): true in
// the block that arrives last at the tile's count.
__device__ __forceinline__ bool split_arrive(const MmaGroup& g) {
  return last_to_arrive(g.counts + static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x,
                        g.splits);
}

// Value i of the tile: the splits' sums added in split order.
__device__ __forceinline__ float split_sum(const MmaGroup& g, int i) {
  float v = __ldcg(split_tile(g, 0) + i);
  for (int z = 1; z < g.splits; ++z) v = __fadd_rn(v, __ldcg(split_tile(g, z) + i));
  return v;
}
// The matrix of this block and the block's tile within it.
__device__ __forceinline__ const MmaArgs& group_part(const MmaGroup& g, int& tile) {
  int i = 0;
  while (i + 1 < g.n && static_cast<int>(blockIdx.x) >= g.first[i + 1]) ++i;
  tile = static_cast<int>(blockIdx.x) - g.first[i];
  return g.m[i];
}

// a's piece blockIdx.y of kMatmulMaxRows activation rows: a prefill's pieces run side by side in
// one launch and share the weights through L2 (a row's arithmetic does not depend on its piece).
__device__ __forceinline__ MmaArgs row_piece(const MmaArgs& a) {
  MmaArgs p = a;
  const int r0 = static_cast<int>(blockIdx.y) * kMatmulMaxRows;
  p.xq += static_cast<int64_t>(r0) * p.n_in;
  p.meta += r0;
  p.y += static_cast<int64_t>(r0) * p.n_out;
  p.n_rows = min(kMatmulMaxRows, p.n_rows - r0);
  return p;
}

}  // namespace salvo::cuda::intmm
