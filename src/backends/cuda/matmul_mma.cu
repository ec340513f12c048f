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
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "backends/cuda/dequant.cuh"
#include "backends/cuda/device_memory.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/q8.cuh"

namespace salvo::cuda {
namespace {

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
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        r.ql[4 * n + 2 * 0 + h] = ld_a2(b + 64 * n + 16 * h + 4 * t);
        r.ql[4 * n + 2 * 1 + h] = ld_a2(b + 64 * n + 32 + 16 * h + 4 * t);
        r.qh[2 * n + h] = ld_a2(b + 128 + 32 * n + 16 * h + 4 * t);
      }
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) r.sc[i] = ld_a2(b + 192 + 4 * i);
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

// 64-row pieces of a launch (the grid's y extent).
unsigned row_pieces(const MmaGroup& g) {
  return static_cast<unsigned>((g.m[0].n_rows + kMatmulMaxRows - 1) / kMatmulMaxRows);
}

// One block step (all kK-element steps of one weight block) for the warp's 16 × 8NT tile.
template <DType T, int NT>
__device__ __forceinline__ void block_steps(const MmaArgs& p, const typename Fmt<T>::Raw& r0,
                                            const typename Fmt<T>::Raw& r1, int blk, int g, int t,
                                            float (&acc)[NT][4]) {
  using F = Fmt<T>;
#pragma unroll
  for (int s = 0; s < F::kElems / F::kK; ++s) {
    const int es = blk * F::kElems + s * F::kK;  // first element of the step
    uint32_t a[4];
    float dw[2], mw[2] = {0.0f, 0.0f};
    if constexpr (F::kK == 32) {
      fmt_step<T>(r0, s, t, a[0], a[2], dw[0], mw[0]);
      fmt_step<T>(r1, s, t, a[1], a[3], dw[1], mw[1]);
    } else {
      F::step(r0, s, a[0], dw[0]);
      F::step(r1, s, a[1], dw[1]);
    }
    const Q8Meta* meta = p.meta + static_cast<int64_t>(es / 32) * p.meta_stride;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      // The activation row of this lane's B fragment. Rows past n_rows read the last row
      // (unconditional loads, as in dp4a_block): their columns are never written.
      const int rb = min(8 * nt + g, p.n_rows - 1);
      const int8_t* xr = p.xq + static_cast<int64_t>(rb) * p.n_in + es;
      uint32_t b0 = 0, b1 = 0;
      if constexpr (F::kK == 16) {
        b0 = *reinterpret_cast<const uint32_t*>(xr + 4 * t);
      } else if constexpr (F::kPair8) {
        const uint2 v = *reinterpret_cast<const uint2*>(xr + 8 * t);
        b0 = v.x;
        b1 = v.y;
      } else {
        b0 = *reinterpret_cast<const uint32_t*>(xr + 4 * t);
        b1 = *reinterpret_cast<const uint32_t*>(xr + 16 + 4 * t);
      }
      int c[4] = {0, 0, 0, 0};
      if constexpr (F::kK == 16) {
        mma_k16_u8(c, a[0], a[1], b0);
      } else {
        mma_k32<F::kSigned>(c, a[0], a[1], a[2], a[3], b0, b1);
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        // The activation row of c[j] and c[2 + j] (clamped like rb).
        const int col = min(8 * nt + 2 * t + j, p.n_rows - 1);
        const Q8Meta m = ld_meta(meta + col);
        const float dx = m.d;
        int xs;
        if constexpr (F::kK == 16) {
          xs = (es / 16) % 2 ? m.sum_hi : m.sum_lo;
        } else {
          xs = m.sum_lo + m.sum_hi;
        }
        const float dxs = __fmul_rn(dx, static_cast<float>(xs));
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // output rows g and g + 8
          float& out = acc[nt][2 * h + j];
          const int isum = c[2 * h + j] - F::kOffset * xs;
          out = __fmaf_rn(__fmul_rn(dw[h], dx), static_cast<float>(isum), out);
          if constexpr (F::kMin) out = __fmaf_rn(mw[h], dxs, out);
        }
      }
    }
  }
}

template <DType T, int NT, bool kTiled>
__device__ __forceinline__ void mma_tile(const MmaGroup& grp, const MmaArgs& p, int tile) {
  using F = Fmt<T>;
  const int n_warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int n_slices = n_warps * grp.splits, slice = my_slice(n_warps);
  const int g = lane / 4, t = lane % 4;
  const int o_base = tile * 16;
  // Rows past n_out (a partial last tile) read the last row and are not written.
  const int o0 = min(o_base + g, p.n_out - 1), o1 = min(o_base + g + 8, p.n_out - 1);
  const uint8_t* w0 = weight_row<T, kTiled>(p, o0);
  const uint8_t* w1 = weight_row<T, kTiled>(p, o1);
  constexpr int64_t stride = block_stride<T, kTiled>();
  const int n_blocks = p.n_in / F::kElems;
  const int n_units = (n_blocks + F::kUnit - 1) / F::kUnit;

  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
  }
  // Slice s takes units s, s + n_slices, ...: the warps of a block read neighbouring bytes. (A
  // contiguous run per warp with the next unit prefetched measured slower on the H200: 28.7
  // against 24.9 us on the 7B gate matrix, Q4_K.)
  typename F::Raw r0[F::kUnit], r1[F::kUnit];
  auto load_unit = [&](int u) {
#pragma unroll
    for (int i = 0; i < F::kUnit; ++i) {
      const int blk = u * F::kUnit + i;
      if (blk < n_blocks) {
        F::load(w0 + blk * stride, t, r0[i]);
        F::load(w1 + blk * stride, t, r1[i]);
      }
    }
  };
  // The weights are never written by a kernel: the first unit's loads go out before the wait
  // for the previous kernel (as in dp4a_kernel).
  if (grp.early_weights && slice < n_units) load_unit(slice);
  pdl_enter();
  for (int u = slice; u < n_units; u += n_slices) {
    if (u != slice || !grp.early_weights) load_unit(u);
#pragma unroll
    for (int i = 0; i < F::kUnit; ++i) {
      const int blk = u * F::kUnit + i;
      if (blk < n_blocks) block_steps<T, NT>(p, r0[i], r1[i], blk, g, t, acc);
    }
  }

  // The warps' partial sums, added in warp order, one n tile at a time.
  __shared__ float partial[kMaxSlices][4][32];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (n_warps > 1) {
      if (warp > 0) {
#pragma unroll
        for (int i = 0; i < 4; ++i) partial[warp][i][lane] = acc[nt][i];
      }
      __syncthreads();
      if (warp == 0) {
        for (int w = 1; w < n_warps; ++w) {
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[nt][i] = __fadd_rn(acc[nt][i], partial[w][i][lane]);
        }
      }
      __syncthreads();
    }
  }
  // Element (col, output g + 8 * (i / 2)) of the tile for the split scratch.
  auto at = [&](int nt, int i) { return (8 * nt + 2 * t + i % 2) * 16 + g + 8 * (i / 2); };
  if (grp.splits > 1) {
    if (warp == 0) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) split_tile(grp, blockIdx.z)[at(nt, i)] = acc[nt][i];
      }
    }
    if (!split_arrive(grp)) return;
    if (warp == 0) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[nt][i] = split_sum(grp, at(nt, i));
      }
    }
  }
  if (warp != 0) return;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int o = o_base + g + 8 * (i / 2), col = 8 * nt + 2 * t + i % 2;
      if (o < p.n_out && col < p.n_rows) {
        float v = acc[nt][i];
        if (p.bias != nullptr) v = __fadd_rn(v, p.bias[o]);
        p.y[static_cast<int64_t>(col) * p.n_out + o] = v;
      }
    }
  }
}

// Blocks of 8 warps per SM the register budget must allow. The unconditional activation loads
// let the compiler hoist them, and uncapped Q4_K took 80 -> 102 registers at NT = 2 (two blocks
// per SM instead of three). Measured on the H200 (session 14, cuda_matmul_bench, us, uncapped /
// capped): Q4_K 16 rows 7B gate 53 / 38, down 57 / 49, 1.5B gate 15.6 / 12.8, q 5.8 / 8.2
// (small matrices lose to the cap's spills, large ones gain more); 17 rows 7B gate 66 / 51;
// Q6_K 17 rows 7B gate 114 / 85, but 16 rows 96 / 89 and 1.5B q 7.6 / 13.4 (660 bytes of
// spills at NT = 2). The other types stay uncapped (not measured capped).
template <DType T, int NT>
constexpr int mma_min_blocks() {
  if constexpr (T == DType::kQ4_K) return NT <= 2 ? 3 : NT <= 4 ? 2 : 1;
  if constexpr (T == DType::kQ6_K) return NT == 3 ? 2 : 1;
  return 1;
}

template <DType T, int NT, bool kTiled>
__global__ void __launch_bounds__(32 * kMaxSlices, mma_min_blocks<T, NT>())
    mma_kernel(const __grid_constant__ MmaGroup grp) {
  int tile;
  const MmaArgs& p = group_part(grp, tile);
  // mma_tile enters the PDL wait itself. The first piece reads its arguments in place (every
  // decode and verification launch).
  if (blockIdx.y == 0) {
    mma_tile<T, NT, kTiled>(grp, p, tile);
  } else {
    mma_tile<T, NT, kTiled>(grp, row_piece(p), tile);
  }
}

// ---- dp4a (few rows) ------------------------------------------------------------------------
// The same arithmetic without the tensor cores, for 1..8 rows, where an m16n8 tile would scale
// 128 sums to use 16 or fewer. A block is a tile of 32 output rows and has one warp per k slice
// (the slices of mma_kernel: warp w takes units w, w + S, ...); lane i owns output row i of the
// tile, computes the integer dot of each step itself (the four "t" shares of the mma layout in
// turn, with dp4a), applies exactly the float steps of mma_kernel in the same order, and the
// warps' partial sums are added in warp order. So both kernels give the same bits, and one
// family serves every R (the bench's and cuda_ops_test's row-invariance checks of variant q8
// compare the two kernels).
//
// Loads: with a lane per output row, reading the weights straight from global memory makes each
// load instruction touch 32 rows with 2..16-byte pieces (L1-wavefront bound, the former version
// of this kernel: no faster than mma). Instead each warp streams its units through shared
// memory: per unit, the 32 rows' bytes are copied with 16-byte cp.async by consecutive lanes
// (each row's piece is contiguous, so 8..15 lanes read one row's run), kDp4aStages - 1 units ahead,
// and each lane then reads its own row's copy. A row's copy sits at a pitch of an odd number of
// 16-byte granules, so the lanes' 16-byte reads (Q4_K, Q5_K) hit distinct banks; the 2-byte
// aligned formats read aligned words and shift them into place. The warps run their pipelines
// independently (no block barrier until the final sum).
//
// The staged kernel's mma form (kMma) keeps those copies and computes 5-8 rows of the k-quants
// on the tensor cores instead: each warp's 32 rows are two m16 tiles read from the stage, its
// activations n8 tiles staged fragment-major (fragment_offset). mma_kernel's threads read their
// 8-16-byte pieces of 16 rows straight from global memory, one dependent round per unit.

// Units per warp in shared memory (one computed, one in flight). Four (a short row's units all
// in flight at once, but 147 KB per 8-warp Q4_K block: one block per SM) measured slower on the
// H200 (session 13, tg128: random 1.5B shape 559 -> 519 tok/s, 7B 270 -> 246).
constexpr int kDp4aStages = 2;

// Alignment of a block's first byte in global memory (rows start at multiples of it too).
template <DType T>
constexpr int block_align() {
  return T == DType::kQ4_K || T == DType::kQ5_K ? 16 : T == DType::kQ4_1 ? 4 : 2;
}

// Bytes of one row's copy of a unit in shared memory: the unit's bytes at their offset within
// the first 16-byte granule (up to 14 for 2-aligned data) plus a word of slack for the shifted
// reads, rounded to an odd number of granules (distinct banks across the 32 rows).
template <DType T>
constexpr int unit_pitch() {
  using F = Fmt<T>;
  const int lead = block_align<T>() == 16 ? 0 : 16 - block_align<T>();
  const int slack = block_align<T>() == 16 ? 0 : 4;
  const int granules = (lead + F::kUnit * F::kBytes + slack + 15) / 16;
  return 16 * (granules % 2 == 1 ? granules : granules + 1);
}

// A stage of a warp: the 32 rows' copies of one unit, then the unit's activations (R rows of
// kUnit * kElems int8) and their Q8Meta ([32-element block][row]).
template <DType T, int R>
struct Dp4aStage {
  static constexpr int kUnitElems = Fmt<T>::kUnit * Fmt<T>::kElems;
  static constexpr int kWeightBytes = 32 * unit_pitch<T>();
  static constexpr int kXBytes = R * kUnitElems;
  static constexpr int kMetaBytes = R * (kUnitElems / 32) * static_cast<int>(sizeof(Q8Meta));
  static constexpr int kBytes = kWeightBytes + kXBytes + kMetaBytes;
};

template <DType T, int R>
constexpr int dp4a_smem_bytes(int warps) {
  return warps * kDp4aStages * Dp4aStage<T, R>::kBytes;
}

// A block's bytes in shared memory, as Fmt::load reads them through the ld_* overloads below
// (`b + k` moves the read position by k bytes; after unrolling every k is a constant).
//
// 16-byte aligned blocks (Q4_K, Q5_K): the block is read as whole granules into registers (one
// conflict-free 16-byte load each), and the fields are taken from them.
template <int kBytes>
struct SmemBlock16 {
  uint4 g[kBytes / 16];
  int k;  // read position
  __device__ __forceinline__ explicit SmemBlock16(const uint8_t* p) : k(0) {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i) g[i] = reinterpret_cast<const uint4*>(p)[i];
  }
  __device__ __forceinline__ uint32_t word(int at) const {  // at % 4 == 0
    const uint4& v = g[at / 16];
    const int j = (at / 4) % 4;
    return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w;
  }
};
template <int kBytes>
__device__ __forceinline__ SmemBlock16<kBytes> operator+(SmemBlock16<kBytes> b, int d) {
  b.k += d;
  return b;
}
template <int kBytes>
__device__ __forceinline__ uint32_t ld_u16(const SmemBlock16<kBytes>& b) {
  return (b.word(b.k & ~3) >> (8 * (b.k & 2))) & 0xFFFF;
}
template <int kBytes>
__device__ __forceinline__ uint32_t ld_a2(const SmemBlock16<kBytes>& b) {
  return b.word(b.k);  // used at 4-byte aligned positions only
}
template <int kBytes>
__device__ __forceinline__ uint32_t ld_a4(const SmemBlock16<kBytes>& b) {
  return b.word(b.k);
}
template <int kBytes>
__device__ __forceinline__ uint2 ld_a8(const SmemBlock16<kBytes>& b) {
  return make_uint2(b.word(b.k), b.word(b.k + 4));
}
template <int kBytes>
__device__ __forceinline__ uint4 ld_a16(const SmemBlock16<kBytes>& b) {
  return b.g[b.k / 16];
}

// Blocks at any even alignment: byte k of the block is byte k + off of the aligned words
// w[...] (off in 0..3); a field is read as two aligned words shifted into place (a clamped
// funnel shift: a shift of 32 takes the upper word whole).
struct SmemWords {
  const uint32_t* w;
  uint32_t off8;  // 8 * off
  int k;          // read position, even
};
__device__ __forceinline__ SmemWords operator+(SmemWords b, int d) {
  b.k += d;
  return b;
}
__device__ __forceinline__ uint32_t ld_a2(const SmemWords& b) {
  const int j = b.k / 4;
  return __funnelshift_rc(b.w[j], b.w[j + 1], b.off8 + 8 * (b.k & 3));
}
__device__ __forceinline__ uint32_t ld_a4(const SmemWords& b) { return ld_a2(b); }
__device__ __forceinline__ uint32_t ld_u16(const SmemWords& b) { return ld_a2(b) & 0xFFFF; }

template <bool kSigned>
__device__ __forceinline__ int dp4a(uint32_t a, uint32_t b, int c) {
  int d;
  if constexpr (kSigned) {
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  } else {
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  }
  return d;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem));
}
// Through L1 (.ca): every warp of an SM copies the same activations.
__device__ __forceinline__ void cp_async16_ca(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async8(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending));
}

// All kElems / kK steps of one weight block for the lane's output row, accumulated into acc[r]
// for the R activation rows (the float steps of block_steps, column r). xb: the block's
// activations in the stage (row r at xb + r * x_stride); mb: their Q8Meta (32-element block j,
// row r at mb[j * R + r]).
template <DType T, int R, class Src>
__device__ __forceinline__ void dp4a_block(const Src& src, int blk, const int8_t* xb, int x_stride,
                                           const Q8Meta* mb, float (&acc)[R]) {
  using F = Fmt<T>;
  typename F::Raw raw[4];
#pragma unroll
  for (int t = 0; t < 4; ++t) F::load(src, t, raw[t]);
    // Every row's reads are unconditional (a row past n_rows holds a copy of the last row; its
    // sums are never written), so the compiler can issue them ahead of the dp4a chains: a branch
    // per row (`if (r >= n_rows) break`) kept every step waiting on its own loads.
#pragma unroll
  for (int s = 0; s < F::kElems / F::kK; ++s) {
    const int es = blk * F::kElems + s * F::kK;
    uint32_t lo[4], hi[4] = {0, 0, 0, 0};
    float dw = 0.0f, mw = 0.0f;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      if constexpr (F::kK == 32) {
        fmt_step<T>(raw[t], s, t, lo[t], hi[t], dw, mw);
      } else {
        F::step(raw[t], s, lo[t], dw);
      }
    }
    const Q8Meta* meta = mb + (s * F::kK / 32) * R;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      // The same address in every lane of the warp (one broadcast read).
      const int8_t* xr = xb + r * x_stride + s * F::kK;
      int c = 0;
      if constexpr (F::kK == 16) {
        const uint4 v = *reinterpret_cast<const uint4*>(xr);
        c = dp4a<false>(lo[0], v.x, c);
        c = dp4a<false>(lo[1], v.y, c);
        c = dp4a<false>(lo[2], v.z, c);
        c = dp4a<false>(lo[3], v.w, c);
      } else {
        const uint4 v0 = *reinterpret_cast<const uint4*>(xr);
        const uint4 v1 = *reinterpret_cast<const uint4*>(xr + 16);
        const uint32_t xw[8] = {v0.x, v0.y, v0.z, v0.w, v1.x, v1.y, v1.z, v1.w};
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          if constexpr (F::kPair8) {  // elements [8t, 8t + 4) and [8t + 4, 8t + 8)
            c = dp4a<F::kSigned>(lo[t], xw[2 * t], c);
            c = dp4a<F::kSigned>(hi[t], xw[2 * t + 1], c);
          } else {  // elements [4t, 4t + 4) and [16 + 4t, 20 + 4t)
            c = dp4a<F::kSigned>(lo[t], xw[t], c);
            c = dp4a<F::kSigned>(hi[t], xw[4 + t], c);
          }
        }
      }
      const Q8Meta m = meta[r];
      int xs;
      if constexpr (F::kK == 16) {
        xs = (es / 16) % 2 ? m.sum_hi : m.sum_lo;
      } else {
        xs = m.sum_lo + m.sum_hi;
      }
      const float dxs = __fmul_rn(m.d, static_cast<float>(xs));
      const int isum = c - F::kOffset * xs;
      acc[r] = __fmaf_rn(__fmul_rn(dw, m.d), static_cast<float>(isum), acc[r]);
      if constexpr (F::kMin) acc[r] = __fmaf_rn(mw, dxs, acc[r]);
    }
  }
}

// A shared-memory copy of a block for Fmt::load (plain loads: __ldg reads global memory only).
struct SmemPtr {
  const uint8_t* p;
};
__device__ __forceinline__ SmemPtr operator+(SmemPtr b, int d) { return {b.p + d}; }
__device__ __forceinline__ uint32_t ld_a2(SmemPtr b) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(b.p);
  return static_cast<uint32_t>(s[0]) | (static_cast<uint32_t>(s[1]) << 16);
}
__device__ __forceinline__ uint32_t ld_a4(SmemPtr b) {
  return *reinterpret_cast<const uint32_t*>(b.p);
}
__device__ __forceinline__ uint2 ld_a8(SmemPtr b) { return *reinterpret_cast<const uint2*>(b.p); }
__device__ __forceinline__ uint4 ld_a16(SmemPtr b) { return *reinterpret_cast<const uint4*>(b.p); }
__device__ __forceinline__ uint16_t ld_u16(SmemPtr b) {
  return *reinterpret_cast<const uint16_t*>(b.p);
}

// The staged kernel's mma form (kMma, 5-8 rows of the k-quants): the warp's 32 output rows are
// two m16 tiles and its R = 8 NT activation rows NT n8 tiles. The unit's activations sit in the
// stage fragment-major: the B fragment of (step s, n tile nt) is 32 lanes' 8 (k32 steps) or 4
// (k16) consecutive bytes, so a lane's read is one conflict-free load. Byte offset of the 16-byte
// piece c (elements [16c, 16c + 16)) of activation row r within the unit's stage:
template <DType T, int NT>
__device__ __forceinline__ int fragment_offset(int r, int c) {
  using F = Fmt<T>;
  static_assert(F::kPair8 || F::kK == 16, "k32 steps pair bytes [8t, 8t + 8)");
  if constexpr (F::kK == 32) return 16 * (((c / 2) * NT + r / 8) * 16 + 2 * (r % 8) + c % 2);
  return 16 * ((c * NT + r / 8) * 8 + r % 8);
}

// All steps of one staged block for the lane's rows g, g + 8, 16 + g, 24 + g of the tile (rows[i]
// holds row 8i + g's copy) and acc[(mt NT + nt) 4 + i], the m16n8 accumulator i of m tile mt and
// n tile nt. The float steps of block_steps in the same order, so the bits are those of the other
// kernels.
template <DType T, int NT>
__device__ __forceinline__ void mma_stage_block(const SmemPtr (&rows)[4], const int8_t* xs,
                                                const Q8Meta* ms, int lane, float (&acc)[8 * NT]) {
  using F = Fmt<T>;
  constexpr int R = 8 * NT;
  const int g = lane / 4, t = lane % 4;
  typename F::Raw raw[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) F::load(rows[i], t, raw[i]);
#pragma unroll
  for (int s = 0; s < F::kElems / F::kK; ++s) {
    uint32_t a[2][4];
    float dw[2][2], mw[2][2];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      mw[mt][0] = mw[mt][1] = 0.0f;
      if constexpr (F::kK == 32) {
        fmt_step<T>(raw[2 * mt], s, t, a[mt][0], a[mt][2], dw[mt][0], mw[mt][0]);
        fmt_step<T>(raw[2 * mt + 1], s, t, a[mt][1], a[mt][3], dw[mt][1], mw[mt][1]);
      } else {
        F::step(raw[2 * mt], s, a[mt][0], dw[mt][0]);
        F::step(raw[2 * mt + 1], s, a[mt][1], dw[mt][1]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      int c[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
      if constexpr (F::kK == 16) {
        const uint32_t b0 =
            *reinterpret_cast<const uint32_t*>(xs + ((s * NT + nt) * 32 + lane) * 4);
        mma_k16_u8(c[0], a[0][0], a[0][1], b0);
        mma_k16_u8(c[1], a[1][0], a[1][1], b0);
      } else {
        const uint2 b = *reinterpret_cast<const uint2*>(xs + ((s * NT + nt) * 32 + lane) * 8);
        mma_k32<F::kSigned>(c[0], a[0][0], a[0][1], a[0][2], a[0][3], b.x, b.y);
        mma_k32<F::kSigned>(c[1], a[1][0], a[1][1], a[1][2], a[1][3], b.x, b.y);
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const Q8Meta m = ld_meta(ms + (s * F::kK / 32) * R + 8 * nt + 2 * t + j);
        const float dx = m.d;
        int xs_sum;
        if constexpr (F::kK == 16) {
          xs_sum = s % 2 ? m.sum_hi : m.sum_lo;
        } else {
          xs_sum = m.sum_lo + m.sum_hi;
        }
        const float dxs = __fmul_rn(dx, static_cast<float>(xs_sum));
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {  // output rows g and g + 8 of the m tile
            float& out = acc[(mt * NT + nt) * 4 + 2 * h + j];
            const int isum = c[mt][2 * h + j] - F::kOffset * xs_sum;
            out = __fmaf_rn(__fmul_rn(dw[mt][h], dx), static_cast<float>(isum), out);
            if constexpr (F::kMin) out = __fmaf_rn(mw[mt][h], dxs, out);
          }
        }
      }
    }
  }
}

// Blocks per SM the staged kernel's registers must allow (its shared memory allows two for R = 8
// with kMma, which then needs <= 128 registers).
template <DType T, int R, bool kMma>
constexpr int staged_min_blocks() {
  return kMma && R == 8 && T != DType::kQ6_K ? 2 : 1;
}

template <DType T, int R, bool kTiled, bool kMma>
__global__ void __launch_bounds__(32 * kMaxSlices, staged_min_blocks<T, R, kMma>())
    dp4a_kernel(const __grid_constant__ MmaGroup grp) {
  static_assert(!kMma || (R % 8 == 0 && Fmt<T>::kUnit == 1), "mma: n8 tiles of one-block units");
  using F = Fmt<T>;
  constexpr int kPitch = unit_pitch<T>(), kGranules = kPitch / 16;
  using Stage = Dp4aStage<T, R>;
  extern __shared__ uint4 dp4a_smem[];
  int tile;
  const MmaArgs& p = group_part(grp, tile);
  const int n_warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int o_raw = tile * 32 + lane;
  const int n_blocks = p.n_in / F::kElems;
  const int n_units = (n_blocks + F::kUnit - 1) / F::kUnit;
  // This warp's units: slice, slice + n_slices, ... (my_units of them).
  const int n_slices = n_warps * grp.splits, slice = my_slice(n_warps);
  const int my_units = slice < n_units ? (n_units - slice + n_slices - 1) / n_slices : 0;
  uint8_t* const buf = reinterpret_cast<uint8_t*>(dp4a_smem) +
                       static_cast<size_t>(warp) * kDp4aStages * Stage::kBytes;
  // Rows past n_out (a partial last tile) copy the last row and are not written.
  const uint8_t* const w_tile = weight_row<T, kTiled>(p, tile * 32);
  const int rows_here = min(32, p.n_out - tile * 32);
  constexpr int kUnitBytes = F::kUnit * F::kBytes;
  // The first byte of unit u of the tile's row r (tiled, kUnit is 1: each kTileRows rows'
  // units are one run of kTileRows * kUnitBytes).
  static_assert(kTileRows == 32, "a dp4a tile is one tile of tile_weights()");
  auto unit_row = [&](int r, int u) {
    if constexpr (kTiled) {
      return w_tile + (static_cast<int64_t>(u) * kTileRows + r) * kUnitBytes;
    } else {
      return w_tile + static_cast<int64_t>(r) * p.row_bytes + static_cast<int64_t>(u) * kUnitBytes;
    }
  };

  // Copies unit i of this warp (all 32 rows) into stage i % kDp4aStages: slot q = lane + 32 j
  // is granule q % kGranules of row q / kGranules, so consecutive lanes read consecutive
  // granules of a row. A row's piece spans the granules from its first byte's granule to its
  // last byte's (the lead bytes before it and the tail after it are not read). The unit's
  // activations come in the same copy group: read from global memory in the loop, each step
  // waited on its own loads (ncu on the H200: long-scoreboard stalls, ~2 warps a scheduler).
  auto stage_x = [&](int i) {
    const int u = slice + i * n_slices;
    const int blocks = min(F::kUnit, n_blocks - u * F::kUnit);
    uint8_t* const dst = buf + (i % kDp4aStages) * Stage::kBytes;
    // Activation rows past n_rows copy the last row.
    const int e0 = u * Stage::kUnitElems, elems = blocks * F::kElems;
    int8_t* const x_dst = reinterpret_cast<int8_t*>(dst + Stage::kWeightBytes);
#pragma unroll
    for (int q = lane; q < R * (Stage::kUnitElems / 16); q += 32) {
      const int r = q / (Stage::kUnitElems / 16), c = q % (Stage::kUnitElems / 16);
      const int8_t* src = p.xq + static_cast<int64_t>(min(r, p.n_rows - 1)) * p.n_in + e0 + 16 * c;
      int at = r * Stage::kUnitElems + 16 * c;
      if constexpr (kMma) at = fragment_offset<T, R / 8>(r, c);
      if (16 * c < elems) cp_async16_ca(x_dst + at, src);
    }
    Q8Meta* const m_dst = reinterpret_cast<Q8Meta*>(dst + Stage::kWeightBytes + Stage::kXBytes);
#pragma unroll
    for (int q = lane; q < R * (Stage::kUnitElems / 32); q += 32) {
      const int j = q / R, r = q % R;
      const Q8Meta* src =
          p.meta + static_cast<int64_t>(e0 / 32 + j) * p.meta_stride + min(r, p.n_rows - 1);
      if (32 * j < elems) cp_async8(m_dst + q, src);
    }
  };
  auto stage_weights = [&](int i) {
    const int u = slice + i * n_slices;
    const int bytes = min(F::kUnit, n_blocks - u * F::kUnit) * F::kBytes;
    uint8_t* const dst = buf + (i % kDp4aStages) * Stage::kBytes;
    if constexpr (kTiled && block_align<T>() == 16 && kPitch == kUnitBytes) {
      // The run of 32 whole-granule rows is the stage's layout as it is: one straight copy
      // (a partial last tile reads tile_weights()' zero rows, which are never written out).
      // (This copy with a choice of run per granule and a runtime full-tile check, left from
      // 16-row runs, measured the 7B gate matrix at 17.4 us against 15.7.)
      const uint8_t* const run = unit_row(0, u);
#pragma unroll
      for (int q = lane; q < 32 * kGranules; q += 32) cp_async16(dst + 16 * q, run + 16 * q);
    } else {
#pragma unroll
      for (int q = lane; q < 32 * kGranules; q += 32) {
        const int row = q / kGranules, g = q % kGranules;
        const uint8_t* const first = unit_row(min(row, rows_here - 1), u);
        const uintptr_t a0 = reinterpret_cast<uintptr_t>(first) & ~static_cast<uintptr_t>(15);
        const uintptr_t end = reinterpret_cast<uintptr_t>(first) + bytes;
        const uintptr_t src = a0 + 16 * static_cast<uintptr_t>(g);
        if (src < end) cp_async16(dst + row * kPitch + 16 * g, reinterpret_cast<const void*>(src));
      }
    }
  };
  auto stage = [&](int i) {
    stage_x(i);
    stage_weights(i);
  };

  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    // The weights are never written by a kernel, so the first units' copies start before the
    // wait for the previous kernel and overlap its tail; their activations come after the wait.
    // (H200, session 21, random shapes, tg128: Qwen2.5-1.5B 840-855 -> 898-905 tok/s, 7B 430 ->
    // 453.)
#pragma unroll
  for (int i = 0; i < kDp4aStages - 1; ++i) {
    if (grp.early_weights && i < my_units) stage_weights(i);
  }
  pdl_enter();
#pragma unroll
  for (int i = 0; i < kDp4aStages - 1; ++i) {
    if (i < my_units) {
      if (!grp.early_weights) stage_weights(i);
      stage_x(i);
    }
    cp_async_commit();
  }
  for (int i = 0; i < my_units; ++i) {
    // Every lane is done with unit i - 1, whose stage the next copy overwrites.
    __syncwarp();
    if (i + kDp4aStages - 1 < my_units) stage(i + kDp4aStages - 1);
    cp_async_commit();
    cp_async_wait<kDp4aStages - 1>();  // this lane's copies of unit i have landed
    __syncwarp();                      // and every lane's
    const int u = slice + i * n_slices;
    const uint8_t* const stage_i = buf + (i % kDp4aStages) * Stage::kBytes;
    const uint8_t* const row_copy = stage_i + lane * kPitch;
    const int8_t* const x_copy = reinterpret_cast<const int8_t*>(stage_i + Stage::kWeightBytes);
    const Q8Meta* const m_copy =
        reinterpret_cast<const Q8Meta*>(stage_i + Stage::kWeightBytes + Stage::kXBytes);
    // Byte offset of row r's unit within its copy's first granule.
    auto lead_of = [&](int r) {
      return static_cast<int>(reinterpret_cast<uintptr_t>(unit_row(min(r, rows_here - 1), u)) & 15);
    };
    if constexpr (kMma) {
      SmemPtr rows[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 8 * i + lane / 4;
        rows[i] = {stage_i + r * kPitch + lead_of(r)};
      }
      mma_stage_block<T, R / 8>(rows, x_copy, m_copy, lane, acc);
      continue;
    }
    const int lead = lead_of(lane);
#pragma unroll
    for (int b = 0; b < F::kUnit; ++b) {
      const int blk = u * F::kUnit + b;
      if (blk >= n_blocks) break;
      const int8_t* const xb = x_copy + b * F::kElems;
      const Q8Meta* const mb = m_copy + b * (F::kElems / 32) * R;
      if constexpr (block_align<T>() == 16) {
        dp4a_block<T, R>(SmemBlock16<F::kBytes>(row_copy + b * F::kBytes), blk, xb,
                         Stage::kUnitElems, mb, acc);
      } else {
        const int at = lead + b * F::kBytes;  // the block's first byte in row_copy
        const SmemWords src{reinterpret_cast<const uint32_t*>(row_copy) + at / 4,
                            static_cast<uint32_t>(8 * (at % 4)), 0};
        dp4a_block<T, R>(src, blk, xb, Stage::kUnitElems, mb, acc);
      }
    }
  }
  cp_async_wait<0>();
  __syncwarp();

  // The warps' sums, added in warp order; each warp leaves its R x 32 values in its own (now
  // idle) stages, so the kernel needs no further shared memory.
  static_assert(R * 32 * sizeof(float) <= Stage::kBytes, "a warp's sums fit its stage");
  auto warp_sums = [&](int w) {
    return reinterpret_cast<float*>(reinterpret_cast<uint8_t*>(dp4a_smem) +
                                    static_cast<size_t>(w) * kDp4aStages * Stage::kBytes);
  };
  if (warp > 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) warp_sums(warp)[r * 32 + lane] = acc[r];
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      for (int w = 1; w < n_warps; ++w) acc[r] = __fadd_rn(acc[r], warp_sums(w)[r * 32 + lane]);
    }
  }
  if (grp.splits > 1) {
    if (warp == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r) split_tile(grp, blockIdx.z)[r * 32 + lane] = acc[r];
    }
    if (!split_arrive(grp)) return;
    if (warp == 0) {
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] = split_sum(grp, r * 32 + lane);
    }
  }
  if (warp != 0) return;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    // kMma: accumulator i = k % 4 of m tile mt, n tile nt ((mt NT + nt) 4 + i = k).
    const int mt = k / 4 / (R / 8), nt = k / 4 % (R / 8), i = k % 4;
    const int row = kMma ? 8 * nt + 2 * (lane % 4) + i % 2 : k;
    const int o = kMma ? tile * 32 + 16 * mt + lane / 4 + 8 * (i / 2) : o_raw;
    if (row >= p.n_rows) {
      if constexpr (kMma) continue;
      break;
    }
    float v = acc[k];
    if (o < p.n_out) {
      if (p.bias != nullptr) v = __fadd_rn(v, p.bias[o]);
      p.y[static_cast<int64_t>(row) * p.n_out + o] = v;
    }
  }
}

int sm_count() {
  static const int n = [] {
    int dev = 0, count = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      return 132;
    }
    return count;
  }();
  return n;
}

// The slice heuristic's two knobs, overridable for tuning (SALVO_MMA_WARPS_PER_SM, warps per SM
// to aim for; SALVO_MMA_MIN_UNITS, units each warp keeps at least).
int env_knob(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}
// 48 from session 9's sweep on the H200 (tg128, alternated twice): the random 7B shape 240 (24)
// -> 256 (48) -> 260 tok/s (96, but its 64-row pass 51 -> 62 ms); real Qwen2.5-Coder-1.5B 431
// (24), 434 (48), 444 (12).
int warps_per_sm() {
  static const int n = env_knob("SALVO_MMA_WARPS_PER_SM", 48);
  return n;
}
int min_units() {
  static const int n = env_knob("SALVO_MMA_MIN_UNITS", 1);
  return n;
}
// SALVO_MMA_SPLITS: the most blocks per tile (1: no split k, the session-12 kernels). Split k
// measured on the H200 (session 13, tg128 alternated twice): random 1.5B shape 557 -> 594
// tok/s, 7B 269 -> 275; pp512 on the 1.5B shape 7156 -> 6552 (its 64-row pieces lose more to
// the scratch round trip than they gain).
int max_splits() {
  static const int n = std::min(env_knob("SALVO_MMA_SPLITS", kMaxSplits), kMaxSplits);
  return n;
}
// Tiles x splits of any launch with splits > 1 (what the scratch holds per piece).
int max_split_tiles() { return warps_per_sm() * sm_count() / kMaxSlices; }

struct Slices {
  int warps, splits;
};

// k slices of a tile: a function of the shape alone (never of the rows, which would change the
// order of the float sums): enough warps per SM where the output tiles alone cannot fill the
// GPU, each warp keeping at least min_units() units (of F::kUnit blocks). Up to kMaxSlices they
// are the warps of one block; beyond, blocks of kMaxSlices warps split the tile (while the
// launch stays within one wave's warps). tiles: 16-row output tiles of the launch (of every
// matrix of a group).
template <DType T>
Slices slices(int tiles, int n_in) {
  using F = Fmt<T>;
  const int units = (n_in / F::kElems + F::kUnit - 1) / F::kUnit;
  const int target = warps_per_sm() * sm_count();
  int s = 1;
  while (s < kMaxSlices && 2 * s * min_units() <= units && tiles * s < target) s *= 2;
  if (s == kMaxSlices) {
    while (s < kMaxSlices * max_splits() && 2 * s * min_units() <= units &&
           tiles * 2 * s <= target) {
      s *= 2;
    }
  }
  return {std::min(s, kMaxSlices), std::max(1, s / kMaxSlices)};
}

// The split scratch of a stream (a captured graph keeps its pointers, so it never moves).
struct SplitScratch {
  DeviceBuffer partial, counts;
};
std::mutex split_mu;
std::map<cudaStream_t, std::unique_ptr<SplitScratch>>& split_scratches() {
  static std::map<cudaStream_t, std::unique_ptr<SplitScratch>> m;
  return m;
}
SplitScratch* find_split_scratch(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(split_mu);
  auto it = split_scratches().find(stream);
  return it == split_scratches().end() ? nullptr : it->second.get();
}

// The group's tiles of `rows_per_tile` outputs; fills grp.first.
int group_tiles(MmaGroup& grp, int rows_per_tile) {
  grp.first[0] = 0;
  for (int i = 0; i < grp.n; ++i) {
    grp.first[i + 1] = grp.first[i] + (grp.m[i].n_out + rows_per_tile - 1) / rows_per_tile;
  }
  return grp.first[grp.n];
}

// The types tile_weights() lays out (one block a unit); the others compile one layout.
constexpr bool can_tile(DType t) {
  return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K;
}

// SALVO_EARLY_WEIGHTS=0: the matmul kernels wait for the previous kernel before their first
// weight loads (A/B runs only).
bool early_weights() {
  static const bool on = [] {
    const char* v = std::getenv("SALVO_EARLY_WEIGHTS");
    return v == nullptr || std::atoi(v) != 0;
  }();
  return on;
}

template <DType T, int NT>
void launch_mma(MmaGroup grp, int warps, cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>(group_tiles(grp, 16));
  const dim3 grid(blocks, row_pieces(grp), static_cast<unsigned>(grp.splits));
  if constexpr (can_tile(T)) {
    if (grp.m[0].tiled) return launch(mma_kernel<T, NT, true>, grid, 32 * warps, 0, stream, grp);
  }
  launch(mma_kernel<T, NT, false>, grid, 32 * warps, 0, stream, grp);
}

template <DType T, int R, bool kTiled, bool kMma = false>
void launch_dp4a_as(MmaGroup grp, int warps, cudaStream_t stream) {
  // The stages of 8 warps exceed the default 48 KB of dynamic shared memory for most formats.
  static const bool opted_in = [] {
    return cudaFuncSetAttribute(dp4a_kernel<T, R, kTiled, kMma>,
                                cudaFuncAttributeMaxDynamicSharedMemorySize,
                                dp4a_smem_bytes<T, R>(kMaxSlices)) == cudaSuccess;
  }();
  SALVO_CHECK_MSG(opted_in, "matmul_mma: the dp4a kernel's shared memory is not available");
  const unsigned blocks = static_cast<unsigned>(group_tiles(grp, 32));
  launch(dp4a_kernel<T, R, kTiled, kMma>, dim3(blocks, 1, static_cast<unsigned>(grp.splits)),
         32 * warps, dp4a_smem_bytes<T, R>(warps), stream, grp);  // 1 piece
}

template <DType T, int R>
void launch_dp4a(MmaGroup grp, int warps, cudaStream_t stream) {
  if constexpr (can_tile(T)) {
    if (grp.m[0].tiled) return launch_dp4a_as<T, R, true>(grp, warps, stream);
  }
  launch_dp4a_as<T, R, false>(grp, warps, stream);
}

// SALVO_MMA_STAGED=0: 5-8 rows of the k-quants take mma_kernel (weights read from global memory
// by each thread) instead of the staged kernel's mma form (A/B runs only).
bool staged_mma() {
  static const bool on = [] {
    const char* v = std::getenv("SALVO_MMA_STAGED");
    return v == nullptr || std::atoi(v) != 0;
  }();
  return on;
}

// The rows up to which a launch takes the dp4a GEMV: the variant's, and up to 8 for a Q6_K LM
// head where the variant takes it for 4 rows or more (a function of the shape alone; both
// kernels give the same bits). Measured on the H200 (session 19, cuda_matmul_bench, us at 8
// rows, dp4a against mma): Q6_K 1.5B LM head 125 / 155, gate/up 15.7 / 17.9, but down 22.7 /
// 20.9 and q/o 8.0 / 6.2; Q4_K loses at every 1.5B and 7B shape (7B gate/up 48 / 27).
template <DType T>
int dp4a_rows_at(int dp4a_rows, int n_out) {
  constexpr int kHeadRows = 32768;  // outputs from which a matrix is an LM head
  if (T == DType::kQ6_K && dp4a_rows >= 4 && n_out >= kHeadRows) return 8;
  return dp4a_rows;
}

template <DType T>
void launch_rows(MmaGroup grp, int dp4a_rows, cudaStream_t stream) {
  const int n_rows = grp.m[0].n_rows;
  const Slices sl = slices<T>(group_tiles(grp, 16), grp.m[0].n_in);
  const int warps = sl.warps;
  grp.splits = sl.splits;
  grp.early_weights = early_weights();
  if (grp.splits > 1) {
    SplitScratch* sc = find_split_scratch(stream);
    if (sc == nullptr) {
      cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
      SALVO_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
      SALVO_CHECK_MSG(capturing == cudaStreamCaptureStatusNone,
                      "matmul: matmul_prepare(stream) must come before a graph capture");
      const Status st = matmul_prepare(stream);
      SALVO_CHECK_MSG(st.ok(), st.message().c_str());
      sc = find_split_scratch(stream);
    }
    grp.partial = sc->partial.get<float>();
    grp.counts = sc->counts.get<int>();
    // A launch wider than the scratch's pieces runs in several (a row's arithmetic does not
    // depend on its piece).
    const int step = kSplitPieces * kMatmulMaxRows;
    if (n_rows > step) {
      for (int r0 = 0; r0 < n_rows; r0 += step) {
        MmaGroup part = grp;
        for (int i = 0; i < grp.n; ++i) {
          MmaArgs& a = part.m[i];
          a.xq += static_cast<int64_t>(r0) * a.n_in;
          a.meta += r0;
          a.y += static_cast<int64_t>(r0) * a.n_out;
          a.n_rows = std::min(step, n_rows - r0);
        }
        launch_rows<T>(part, dp4a_rows, stream);
      }
      return;
    }
  }
  if (n_rows <= dp4a_rows_at<T>(dp4a_rows, grp.m[0].n_out)) {
    if (n_rows <= 1) return launch_dp4a<T, 1>(grp, warps, stream);
    if (n_rows <= 2) return launch_dp4a<T, 2>(grp, warps, stream);
    if (n_rows <= 4) return launch_dp4a<T, 4>(grp, warps, stream);
    return launch_dp4a<T, 8>(grp, warps, stream);
  }
  if constexpr (can_tile(T)) {
    // The k-quants' 5-8 rows: the staged kernel with mma steps (its copies of the weights are
    // whole runs of a tile instead of every thread's own 8-16-byte reads). Measured on the H200
    // (session 21, `salvo bench --verify --verify-context 512`, ms, staged / mma_kernel): random
    // Qwen2.5-1.5B 5 rows 1.94 / 2.02, 8 rows 2.01 / 2.11; 7B 5 rows 3.63 / 4.41, 8 rows 3.88 /
    // 4.82. Its R = 16 form (one block per SM) lost at 9-16 rows on the 1.5B (16 rows 3.36 /
    // 2.98) while the 7B gained (6.70 / 7.20), so those rows stay with mma_kernel.
    if (n_rows <= 8 && staged_mma()) {
      return grp.m[0].tiled ? launch_dp4a_as<T, 8, true, true>(grp, warps, stream)
                            : launch_dp4a_as<T, 8, false, true>(grp, warps, stream);
    }
  }
  if (n_rows <= 8) return launch_mma<T, 1>(grp, warps, stream);
  if (n_rows <= 16) return launch_mma<T, 2>(grp, warps, stream);
  // A 16-node tree is 17 rows with its root: 24-row tiles, not 32.
  if (n_rows <= 24) return launch_mma<T, 3>(grp, warps, stream);
  if (n_rows <= 32) return launch_mma<T, 4>(grp, warps, stream);
  return launch_mma<T, 8>(grp, warps, stream);  // more than 64 rows: every 64-row piece too
}

struct LaunchMma {
  const MmaGroup& grp;
  int dp4a_rows;
  cudaStream_t stream;
  template <DType T>
  void operator()() const {
    if constexpr (T == DType::kQ4_0 || T == DType::kQ4_1 || T == DType::kQ5_0 ||
                  T == DType::kQ8_0 || T == DType::kQ4_K || T == DType::kQ5_K ||
                  T == DType::kQ6_K) {
      launch_rows<T>(grp, dp4a_rows, stream);
    } else {
      SALVO_CHECK_MSG(false, "matmul_mma: weight type without an mma kernel");
    }
  }
};

// p as the kernels take it (all rows: the grid's y index picks a 64-row piece).
MmaArgs piece_args(const MatmulParams& p) {
  MmaArgs a;
  a.w = static_cast<const uint8_t*>(p.w);
  a.row_bytes = static_cast<int64_t>(row_bytes(p.type, p.n_in));
  a.tiled = p.tiled;
  a.n_out = static_cast<int>(p.n_out);
  a.n_in = static_cast<int>(p.n_in);
  a.n_rows = static_cast<int>(p.n_rows);
  a.xq = p.xq.q;
  a.meta = p.xq.meta;
  a.meta_stride = p.xq.meta_stride;
  a.y = p.y;
  a.bias = p.bias;
  return a;
}

}  // namespace

bool tiled_layout_supported(DType type) { return can_tile(type); }

std::vector<uint8_t> tile_weights(DType type, const void* w, int64_t n_out, int64_t n_in) {
  SALVO_CHECK(tiled_layout_supported(type));
  const DTypeTraits& tr = traits(type);
  const int64_t block_bytes = static_cast<int64_t>(tr.block_bytes),
                n_blocks = n_in / static_cast<int64_t>(tr.block_size);
  const int64_t tiles = (n_out + kTileRows - 1) / kTileRows, rb = n_blocks * block_bytes;
  std::vector<uint8_t> out(static_cast<size_t>(tiles * kTileRows * rb), 0);
  const auto* src = static_cast<const uint8_t*>(w);
  for (int64_t o = 0; o < n_out; ++o) {
    for (int64_t b = 0; b < n_blocks; ++b) {
      std::memcpy(
          out.data() + (((o / kTileRows) * n_blocks + b) * kTileRows + o % kTileRows) * block_bytes,
          src + o * rb + b * block_bytes, static_cast<size_t>(block_bytes));
    }
  }
  return out;
}

bool mma_supports(DType type) {
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ8_0:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

Status matmul_prepare(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(split_mu);
  if (split_scratches().count(stream) > 0) return Status();
  auto sc = std::make_unique<SplitScratch>();
  const size_t tiles = static_cast<size_t>(kSplitPieces) * max_split_tiles();
  SALVO_RETURN_IF_ERROR(sc->partial.reserve(tiles * kSplitTileFloats * sizeof(float)));
  SALVO_RETURN_IF_ERROR(sc->counts.reserve(tiles * sizeof(int)));
  split_scratches()[stream] = std::move(sc);
  return Status();
}

void matmul_release(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(split_mu);
  split_scratches().erase(stream);
}

void matmul_mma(const MatmulParams& p, int dp4a_rows, cudaStream_t stream) {
  matmul_mma_group(&p, 1, dp4a_rows, stream);
}

void matmul_mma_group(const MatmulParams* parts, int n_parts, int dp4a_rows, cudaStream_t stream) {
  SALVO_CHECK(dp4a_rows <= 8 && n_parts >= 1 && n_parts <= kMaxGroup);
  const MatmulParams& p = parts[0];
  for (int i = 0; i < n_parts; ++i) {
    const MatmulParams& q = parts[i];
    SALVO_CHECK(q.xq.q != nullptr && q.xq.meta != nullptr && q.xq.meta_stride >= q.n_rows);
    SALVO_CHECK(q.type == p.type && q.n_in == p.n_in && q.n_rows == p.n_rows && q.xq.q == p.xq.q &&
                q.tiled == p.tiled);
    SALVO_CHECK(!q.tiled || tiled_layout_supported(q.type));
  }
  if (p.n_rows == 0) return;
  SALVO_CHECK(p.n_rows <= int64_t{65535} * kMatmulMaxRows);  // the grid's y extent
  MmaGroup grp;
  grp.n = n_parts;
  for (int i = 0; i < n_parts; ++i) grp.m[i] = piece_args(parts[i]);
  dispatch_weight_type(p.type, LaunchMma{grp, dp4a_rows, stream});
}

}  // namespace salvo::cuda
