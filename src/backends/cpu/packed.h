// Weights repacked at load (Q4_K, Q6_K and the legacy Q4_0, Q4_1, Q5_0, Q8_0): eight output rows
// interleaved per super-block, so one 32-byte load holds four consecutive quants of each of the
// eight rows and one byte-product instruction (vpdpbusd) multiplies them against four activation
// bytes broadcast to every lane: eight outputs advance per instruction instead of one. Scales come
// unpacked (no 6-bit shuffles in the inner loop). Sizes match the GGUF blocks (Q4_K +2.8%,
// Q6_K exact), so decode reads about the same bytes and prefill does a fraction of the work.
//
// Row invariance: a packed kernel computes each output lane with the same instruction sequence
// whatever the number of activation rows, and every batch size uses the packed kernel, so a
// row's result never depends on its batch. The portable kernel performs the same float
// operations (fma where the SIMD code fuses), so every path gives identical bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "backends/cpu/matmul.h"
#include "quant/types.h"

namespace salvo::cpu {

inline constexpr int kPackRows = 8;       // output rows interleaved per group
inline constexpr int kMaxPackedActs = 8;  // most activation rows per kernel call

// One super-block (256 inputs) of eight Q4_K rows.
struct PackedQ4K {
  fp16_t d[kPackRows];
  fp16_t dmin[kPackRows];
  uint8_t sc[8][kPackRows];         // [sub-block][row], 6-bit scales
  uint8_t mins[4][kPackRows][2];    // [sub-block pair][row][which of the pair], 6-bit minimums
  uint8_t qs[8][4][kPackRows * 4];  // [sub-block][step of 8 quants][row * 4 + i]:
                                    // low nibble = quant 8*step + i, high = 8*step + 4 + i
};
static_assert(sizeof(PackedQ4K) == 1184);

// One super-block of eight Q6_K rows (sub-blocks of 16).
struct PackedQ6K {
  fp16_t d[kPackRows];
  int8_t sc[16][kPackRows];          // [sub-block][row]
  uint8_t ql[16][2][kPackRows * 4];  // [sub-block][step of 8][row * 4 + i], nibbles as Q4K
  // [sub-block][row * 4 + i]: 2-bit highs of quants 8 + i (bits 0-1), 12 + i (2-3), i (4-5)
  // and 4 + i (6-7), placed so each comes out as (bits & 0x30) after at most one shift.
  uint8_t qh[16][kPackRows * 4];
};
static_assert(sizeof(PackedQ6K) == 1680);

// The legacy 32-quant formats, one block of eight rows each. Quants are laid out as in the
// k-quant groups: [step][row * 4 + i], so one 32-byte load holds four quants of each row.
// 4-bit steps hold eight quants (low nibble = quant 8*step + i, high = 8*step + 4 + i); Q8_0
// steps hold four (quant 4*step + i). Sizes equal the GGUF blocks exactly.
struct PackedQ4_0 {
  fp16_t d[kPackRows];
  uint8_t qs[4][kPackRows * 4];  // unsigned 0..15; the kernels apply the -8 offset
};
static_assert(sizeof(PackedQ4_0) == 8 * sizeof(BlockQ4_0));

struct PackedQ4_1 {
  fp16_t d[kPackRows];
  fp16_t m[kPackRows];
  uint8_t qs[4][kPackRows * 4];
};
static_assert(sizeof(PackedQ4_1) == 8 * sizeof(BlockQ4_1));

struct PackedQ5_0 {
  fp16_t d[kPackRows];
  // [row * 4 + i]: bit 2*step = fifth bit of quant 8*step + i, bit 2*step + 1 that of
  // quant 8*step + 4 + i.
  uint8_t qh[kPackRows * 4];
  uint8_t qs[4][kPackRows * 4];  // unsigned 0..31 with qh; the kernels apply the -16 offset
};
static_assert(sizeof(PackedQ5_0) == 8 * sizeof(BlockQ5_0));

struct PackedQ8_0 {
  fp16_t d[kPackRows];
  int8_t qs[8][kPackRows * 4];
};
static_assert(sizeof(PackedQ8_0) == 8 * sizeof(BlockQ8_0));

// Whether `type` has a packed layout and the shape fits it (n_out a multiple of kPackRows).
bool packable(DType type, int64_t n_out, int64_t n_in);
// Bytes of the packed matrix.
size_t packed_bytes(DType type, int64_t n_out, int64_t n_in);
// Bytes of one group of kPackRows rows.
size_t packed_group_bytes(DType type, int64_t n_in);
// Repacks the whole matrix (packable(w) must hold); threads split the row groups. Without a
// pool, done_rows (if set) receives each packed slice of source rows (pointer, bytes) as soon
// as it is done, so a caller can release their pages while a large table (Gemma 3's 262k-row
// tied embedding) is packed instead of holding source and copy at once.
std::unique_ptr<uint8_t[]> pack_matrix(
    const WeightView& w, ThreadPool* pool,
    const std::function<void(const void*, size_t)>& done_rows = {});
// The matrix of w's rows `ids`, in that order, packed (packable(w.type, ids.size(), w.n_in) must
// hold). The rows may lie anywhere in w: after each ~1 MiB of packed rows `done` (if set) is
// called, so a caller whose w is mapped can release the pages the copy faulted in (a DFlash
// drafter's ranked head, speculative/draft_vocab.h).
std::unique_ptr<uint8_t[]> pack_rows(const WeightView& w, std::span<const int32_t> ids,
                                     const std::function<void()>& done = {});
// Writes row `row` of w.packed back in its GGUF block format (row_bytes(w.type, w.n_in) bytes
// at dst), so a tied embedding table reads its rows from the packed copy and its mapped pages
// stay released. Returns false where the layout cannot be undone (Q4_K, Q6_K) or w has no
// packed copy.
bool unpack_row(const WeightView& w, int64_t row, void* dst);

}  // namespace salvo::cpu
