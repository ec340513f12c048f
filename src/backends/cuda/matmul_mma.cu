// Block-quantized matrix × skinny activation product on the int8 tensor cores (variant kMma):
// mma_kernel, and the launches of every integer kernel (the arithmetic: intmm_common.cuh).
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "backends/cuda/device_memory.h"
#include "backends/cuda/intmm_dp4a.cuh"

namespace salvo::cuda {
namespace {

using namespace intmm;

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
  const int v = env_int(name, 0);
  return v > 0 ? v : fallback;
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

// SALVO_EARLY_WEIGHTS=0: the matmul kernels wait for the previous kernel before their first
// weight loads (A/B runs only).
bool early_weights() {
  static const bool on = env_on("SALVO_EARLY_WEIGHTS");
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
  static const bool on = env_on("SALVO_MMA_STAGED");
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
  SALVO_RETURN_IF_ERROR(half_prepare(stream));
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
  half_release(stream);
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
