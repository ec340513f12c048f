// Repacking of Q4_K / Q6_K and Q4_0 / Q4_1 / Q5_0 / Q8_0 matrices into the eight-row layouts of
// packed.h, and the portable kernels, which define the arithmetic the SIMD kernels reproduce bit
// for bit.
#include "backends/cpu/packed.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "backends/cpu/dot.h"
#include "quant/fp16.h"
#include "util/check.h"

namespace salvo::cpu {
namespace {

// All 256 quants of a Q4_K block (0..15): 64-quant chunks, low nibbles first.
void q4k_quants(const BlockQ4_K& b, uint8_t* q) {
  for (int chunk = 0; chunk < 4; ++chunk) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = b.qs[32 * chunk + l];
      q[64 * chunk + l] = byte & 0xF;
      q[64 * chunk + 32 + l] = byte >> 4;
    }
  }
}

// All 256 quants of a Q6_K block, 0..63 (the kernels apply the -32 offset).
void q6k_quants(const BlockQ6_K& b, uint8_t* q) {
  for (int half = 0; half < 2; ++half) {
    const uint8_t* ql = b.ql + 64 * half;
    const uint8_t* qh = b.qh + 32 * half;
    uint8_t* out = q + 128 * half;
    for (int l = 0; l < 32; ++l) {
      out[l] = static_cast<uint8_t>((ql[l] & 0xF) | ((qh[l] & 3) << 4));
      out[l + 32] = static_cast<uint8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
      out[l + 64] = static_cast<uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
      out[l + 96] = static_cast<uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
    }
  }
}

void pack_q4k_group(const BlockQ4_K* const* rows, int64_t n_sb, PackedQ4K* out) {
  uint8_t q[kQKK];
  for (int64_t b = 0; b < n_sb; ++b) {
    PackedQ4K& p = out[b];
    for (int k = 0; k < kPackRows; ++k) {
      const BlockQ4_K& blk = rows[k][b];
      p.d[k] = blk.d;
      p.dmin[k] = blk.dmin;
      q4k_quants(blk, q);
      for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        scale_min_k4(j, blk.scales, &sc, &m);
        p.sc[j][k] = sc;
        p.mins[j / 2][k][j % 2] = m;
        for (int s = 0; s < 4; ++s) {
          const uint8_t* e = q + 32 * j + 8 * s;
          for (int i = 0; i < 4; ++i) {
            p.qs[j][s][4 * k + i] = static_cast<uint8_t>(e[i] | (e[i + 4] << 4));
          }
        }
      }
    }
  }
}

void pack_q6k_group(const BlockQ6_K* const* rows, int64_t n_sb, PackedQ6K* out) {
  uint8_t q[kQKK];
  for (int64_t b = 0; b < n_sb; ++b) {
    PackedQ6K& p = out[b];
    for (int k = 0; k < kPackRows; ++k) {
      const BlockQ6_K& blk = rows[k][b];
      p.d[k] = blk.d;
      q6k_quants(blk, q);
      for (int j = 0; j < 16; ++j) {
        p.sc[j][k] = blk.scales[j];
        for (int i = 0; i < 4; ++i) {
          const uint8_t* e = q + 16 * j + i;  // quants i, 4 + i, 8 + i, 12 + i of the sub-block
          for (int s = 0; s < 2; ++s) {
            p.ql[j][s][4 * k + i] =
                static_cast<uint8_t>((e[8 * s] & 0xF) | ((e[8 * s + 4] & 0xF) << 4));
          }
          p.qh[j][4 * k + i] = static_cast<uint8_t>((e[8] >> 4) | ((e[12] >> 4) << 2) |
                                                    ((e[0] >> 4) << 4) | ((e[4] >> 4) << 6));
        }
      }
    }
  }
}

// Quant e (0..31) of a legacy 4-bit block: low nibbles hold 0..15, high nibbles 16..31.
uint8_t nibble(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 0xF : qs[e - 16] >> 4; }

// The 4-bit quants of eight rows into the [step][row * 4 + i] nibble layout.
template <typename Block>
void pack_nibbles(const Block* const* rows, int64_t b, uint8_t (*qs)[kPackRows * 4]) {
  for (int k = 0; k < kPackRows; ++k) {
    for (int s = 0; s < 4; ++s) {
      for (int i = 0; i < 4; ++i) {
        const uint8_t* q = rows[k][b].qs;
        qs[s][4 * k + i] =
            static_cast<uint8_t>(nibble(q, 8 * s + i) | (nibble(q, 8 * s + 4 + i) << 4));
      }
    }
  }
}

void pack_q4_0_group(const BlockQ4_0* const* rows, int64_t n_blocks, PackedQ4_0* out) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int k = 0; k < kPackRows; ++k) out[b].d[k] = rows[k][b].d;
    pack_nibbles(rows, b, out[b].qs);
  }
}

void pack_q4_1_group(const BlockQ4_1* const* rows, int64_t n_blocks, PackedQ4_1* out) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int k = 0; k < kPackRows; ++k) {
      out[b].d[k] = rows[k][b].d;
      out[b].m[k] = rows[k][b].m;
    }
    pack_nibbles(rows, b, out[b].qs);
  }
}

void pack_q5_0_group(const BlockQ5_0* const* rows, int64_t n_blocks, PackedQ5_0* out) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int k = 0; k < kPackRows; ++k) {
      out[b].d[k] = rows[k][b].d;
      uint32_t qh;
      std::memcpy(&qh, rows[k][b].qh, 4);
      for (int i = 0; i < 4; ++i) {
        uint8_t bits = 0;
        for (int s = 0; s < 4; ++s) {
          bits |= static_cast<uint8_t>(((qh >> (8 * s + i)) & 1) << (2 * s));
          bits |= static_cast<uint8_t>(((qh >> (8 * s + 4 + i)) & 1) << (2 * s + 1));
        }
        out[b].qh[4 * k + i] = bits;
      }
    }
    pack_nibbles(rows, b, out[b].qs);
  }
}

void pack_q8_0_group(const BlockQ8_0* const* rows, int64_t n_blocks, PackedQ8_0* out) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    for (int k = 0; k < kPackRows; ++k) {
      out[b].d[k] = rows[k][b].d;
      for (int s = 0; s < 8; ++s) {
        for (int i = 0; i < 4; ++i) out[b].qs[s][4 * k + i] = rows[k][b].qs[4 * s + i];
      }
    }
  }
}

// ---- portable kernels: the reference arithmetic --------------------------------------------

int32_t dot4(const uint8_t* w4, const int8_t* a4) {
  return w4[0] * a4[0] + w4[1] * a4[1] + w4[2] * a4[2] + w4[3] * a4[3];
}

template <int R>
void packed_q4k_portable(int64_t n_in, const void* group, const void* acts, size_t stride,
                         float* out) {
  const auto* p = static_cast<const PackedQ4K*>(group);
  for (int r = 0; r < R; ++r) {
    const auto* a =
        reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(acts) + r * stride);
    float acc[kPackRows] = {};
    for (int64_t b = 0; b < n_in / kQKK; ++b) {
      const PackedQ4K& blk = p[b];
      int32_t sumi[kPackRows] = {};
      for (int j = 0; j < 8; ++j) {
        for (int k = 0; k < kPackRows; ++k) {
          int32_t isum = 0;
          for (int s = 0; s < 4; ++s) {
            uint8_t lo[4], hi[4];
            for (int i = 0; i < 4; ++i) {
              lo[i] = blk.qs[j][s][4 * k + i] & 0xF;
              hi[i] = blk.qs[j][s][4 * k + i] >> 4;
            }
            isum += dot4(lo, a[b].qs + 32 * j + 8 * s);
            isum += dot4(hi, a[b].qs + 32 * j + 8 * s + 4);
          }
          sumi[k] += isum * blk.sc[j][k];
        }
      }
      for (int k = 0; k < kPackRows; ++k) {
        int32_t msum = 0;
        for (int j = 0; j < 8; ++j) {
          msum += blk.mins[j / 2][k][j % 2] * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
        }
        const float da = a[b].d;
        acc[k] = std::fma(static_cast<float>(sumi[k]), fp16_to_fp32(blk.d[k]) * da, acc[k]);
        acc[k] = std::fma(-static_cast<float>(msum), fp16_to_fp32(blk.dmin[k]) * da, acc[k]);
      }
    }
    std::memcpy(out + r * kPackRows, acc, sizeof(acc));
  }
}

template <int R>
void packed_q6k_portable(int64_t n_in, const void* group, const void* acts, size_t stride,
                         float* out) {
  const auto* p = static_cast<const PackedQ6K*>(group);
  for (int r = 0; r < R; ++r) {
    const auto* a =
        reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(acts) + r * stride);
    float acc[kPackRows] = {};
    for (int64_t b = 0; b < n_in / kQKK; ++b) {
      const PackedQ6K& blk = p[b];
      int32_t sumi[kPackRows] = {};
      for (int j = 0; j < 16; ++j) {
        for (int k = 0; k < kPackRows; ++k) {
          int32_t isum = 0;
          for (int s = 0; s < 2; ++s) {
            uint8_t lo[4], hi[4];
            for (int i = 0; i < 4; ++i) {
              const uint8_t bits = blk.ql[j][s][4 * k + i], high = blk.qh[j][4 * k + i];
              const int lo_shift = s == 0 ? 4 : 0;  // where the 2-bit high of each quant sits
              lo[i] = static_cast<uint8_t>((bits & 0xF) | (((high >> lo_shift) & 3) << 4));
              hi[i] = static_cast<uint8_t>((bits >> 4) | (((high >> (lo_shift + 2)) & 3) << 4));
            }
            isum += dot4(lo, a[b].qs + 16 * j + 8 * s);
            isum += dot4(hi, a[b].qs + 16 * j + 8 * s + 4);
          }
          isum -= 32 * a[b].bsums[j];
          sumi[k] += isum * blk.sc[j][k];
        }
      }
      for (int k = 0; k < kPackRows; ++k) {
        acc[k] = std::fma(static_cast<float>(sumi[k]), fp16_to_fp32(blk.d[k]) * a[b].d, acc[k]);
      }
    }
    std::memcpy(out + r * kPackRows, acc, sizeof(acc));
  }
}

// Sum of the 32 activation quants of a block (the offset of Q4_0 / Q5_0 multiplies it).
int32_t act_sum(const BlockQ8_0& a) {
  int32_t sum = 0;
  for (int j = 0; j < kQK; ++j) sum += a.qs[j];
  return sum;
}

// The legacy formats share one shape: per 32-quant block and row, an exact integer dot (with
// the offset folded in as offset * activation sum), then acc = fma(isum, d_w * d_a, acc), plus
// fma(m_w, s_a, acc) for Q4_1.
template <typename Packed, typename Act>
void packed_legacy_portable(int64_t n_in, const void* group, const void* acts, size_t, float* out) {
  const auto* p = static_cast<const Packed*>(group);
  const auto* a = static_cast<const Act*>(acts);
  float acc[kPackRows] = {};
  for (int64_t b = 0; b < n_in / kQK; ++b) {
    const Packed& blk = p[b];
    int32_t isum[kPackRows] = {};
    for (int k = 0; k < kPackRows; ++k) {
      if constexpr (std::is_same_v<Packed, PackedQ8_0>) {
        for (int s = 0; s < 8; ++s) {
          for (int i = 0; i < 4; ++i) isum[k] += blk.qs[s][4 * k + i] * a[b].qs[4 * s + i];
        }
      } else {
        for (int s = 0; s < 4; ++s) {
          for (int i = 0; i < 4; ++i) {
            int lo = blk.qs[s][4 * k + i] & 0xF, hi = blk.qs[s][4 * k + i] >> 4;
            if constexpr (std::is_same_v<Packed, PackedQ5_0>) {
              lo |= ((blk.qh[4 * k + i] >> (2 * s)) & 1) << 4;
              hi |= ((blk.qh[4 * k + i] >> (2 * s + 1)) & 1) << 4;
            }
            isum[k] += lo * a[b].qs[8 * s + i] + hi * a[b].qs[8 * s + 4 + i];
          }
        }
      }
    }
    if constexpr (std::is_same_v<Packed, PackedQ4_0> || std::is_same_v<Packed, PackedQ5_0>) {
      const int32_t offset = (std::is_same_v<Packed, PackedQ4_0> ? 8 : 16) * act_sum(a[b]);
      for (int k = 0; k < kPackRows; ++k) isum[k] -= offset;
    }
    const float da = fp16_to_fp32(a[b].d);
    for (int k = 0; k < kPackRows; ++k) {
      acc[k] = std::fma(static_cast<float>(isum[k]), fp16_to_fp32(blk.d[k]) * da, acc[k]);
      if constexpr (std::is_same_v<Packed, PackedQ4_1>) {
        acc[k] = std::fma(fp16_to_fp32(blk.m[k]), fp16_to_fp32(a[b].s), acc[k]);
      }
    }
  }
  std::memcpy(out, acc, sizeof(acc));
}

template <void (*K)(int64_t, const void*, const void*, size_t, float*)>
void one_row_at_a_time(int64_t n_in, const void* group, const void* acts, size_t stride, int n_acts,
                       float* out) {
  for (int r = 0; r < n_acts; ++r) {
    K(n_in, group, static_cast<const uint8_t*>(acts) + r * stride, stride, out + r * kPackRows);
  }
}

}  // namespace

bool packable(DType type, int64_t n_out, int64_t n_in) {
  switch (type) {
    case DType::kQ4_K:
    case DType::kQ6_K:
      return n_out % kPackRows == 0 && n_in % kQKK == 0;
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ8_0:
      return n_out % kPackRows == 0 && n_in % kQK == 0;
    default:
      return false;
  }
}

size_t packed_group_bytes(DType type, int64_t n_in) {
  // Every packed layout is exactly eight GGUF rows except Q4_K (unpacked scales).
  if (type == DType::kQ4_K) return static_cast<size_t>(n_in / kQKK) * sizeof(PackedQ4K);
  return row_bytes(type, n_in) * kPackRows;
}

// A decode pass streams every packed matrix once; with 4 KiB pages that is a TLB miss every
// 4 KiB and hardware prefetch streams that stop at each page boundary. Large allocations come
// fresh from mmap, so asking for transparent huge pages before the first write gets 2 MiB pages
// for the aligned interior (THP is often in "madvise" mode). Only a hint: failure is harmless.
static void advise_huge_pages(void* p, size_t bytes) {
  if (std::getenv("SALVO_NO_HUGEPAGES") != nullptr) return;
  constexpr uintptr_t kHuge = 2u << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

size_t packed_bytes(DType type, int64_t n_out, int64_t n_in) {
  return packed_group_bytes(type, n_in) * static_cast<size_t>(n_out / kPackRows);
}

// Groups [begin, end) of a packed matrix of `type` and width n_in into buf, group g's row k
// at row(g, k).
template <typename RowOf>
static void pack_groups(DType type, int64_t n_in, const RowOf& row, int64_t begin, int64_t end,
                        uint8_t* buf) {
  const size_t group_bytes = packed_group_bytes(type, n_in);
  const int64_t n_sb = n_in / kQKK, n_blocks = n_in / kQK;
  for (int64_t g = begin; g < end; ++g) {
    const uint8_t* rows[kPackRows];
    for (int k = 0; k < kPackRows; ++k) rows[k] = row(g, k);
    uint8_t* dst = buf + g * group_bytes;
    switch (type) {
      case DType::kQ4_K:
        pack_q4k_group(reinterpret_cast<const BlockQ4_K* const*>(rows), n_sb,
                       reinterpret_cast<PackedQ4K*>(dst));
        break;
      case DType::kQ6_K:
        pack_q6k_group(reinterpret_cast<const BlockQ6_K* const*>(rows), n_sb,
                       reinterpret_cast<PackedQ6K*>(dst));
        break;
      case DType::kQ4_0:
        pack_q4_0_group(reinterpret_cast<const BlockQ4_0* const*>(rows), n_blocks,
                        reinterpret_cast<PackedQ4_0*>(dst));
        break;
      case DType::kQ4_1:
        pack_q4_1_group(reinterpret_cast<const BlockQ4_1* const*>(rows), n_blocks,
                        reinterpret_cast<PackedQ4_1*>(dst));
        break;
      case DType::kQ5_0:
        pack_q5_0_group(reinterpret_cast<const BlockQ5_0* const*>(rows), n_blocks,
                        reinterpret_cast<PackedQ5_0*>(dst));
        break;
      default:
        pack_q8_0_group(reinterpret_cast<const BlockQ8_0* const*>(rows), n_blocks,
                        reinterpret_cast<PackedQ8_0*>(dst));
    }
  }
}

static std::unique_ptr<uint8_t[]> packed_buffer(DType type, int64_t n_out, int64_t n_in) {
  const size_t bytes = packed_bytes(type, n_out, n_in);
  std::unique_ptr<uint8_t[]> buf(new uint8_t[bytes]);
  advise_huge_pages(buf.get(), bytes);
  return buf;
}

std::unique_ptr<uint8_t[]> pack_matrix(const WeightView& w, ThreadPool* pool,
                                       const std::function<void(const void*, size_t)>& done_rows) {
  SALVO_CHECK(packable(w.type, w.n_out, w.n_in));
  std::unique_ptr<uint8_t[]> buf = packed_buffer(w.type, w.n_out, w.n_in);
  const size_t row_stride = row_bytes(w.type, w.n_in);
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto row = [&](int64_t g, int k) { return src + (g * kPackRows + k) * row_stride; };
  const int64_t n_groups = w.n_out / kPackRows;
  if (pool != nullptr) {
    pool->parallel_for(n_groups, [&](int, int64_t begin, int64_t end) {
      pack_groups(w.type, w.n_in, row, begin, end, buf.get());
    });
  } else if (!done_rows) {
    pack_groups(w.type, w.n_in, row, 0, n_groups, buf.get());
  } else {
    // Slices of about 1 MiB, each handed back as soon as it is packed.
    const int64_t slice = std::max<int64_t>(1, (1 << 20) / (row_stride * kPackRows));
    for (int64_t g = 0; g < n_groups; g += slice) {
      const int64_t end = std::min(n_groups, g + slice);
      pack_groups(w.type, w.n_in, row, g, end, buf.get());
      done_rows(src + g * kPackRows * row_stride, (end - g) * kPackRows * row_stride);
    }
  }
  return buf;
}

std::unique_ptr<uint8_t[]> pack_rows(const WeightView& w, std::span<const int32_t> ids,
                                     const std::function<void()>& done) {
  const int64_t n_out = static_cast<int64_t>(ids.size());
  SALVO_CHECK(packable(w.type, n_out, w.n_in));
  std::unique_ptr<uint8_t[]> buf = packed_buffer(w.type, n_out, w.n_in);
  const size_t row_stride = row_bytes(w.type, w.n_in);
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto row = [&](int64_t g, int k) {
    const int32_t id = ids[g * kPackRows + k];
    SALVO_CHECK(id >= 0 && id < w.n_out);
    return src + static_cast<size_t>(id) * row_stride;
  };
  const int64_t n_groups = n_out / kPackRows;
  const int64_t slice = std::max<int64_t>(1, (1 << 20) / (row_stride * kPackRows));
  for (int64_t g = 0; g < n_groups; g += slice) {
    pack_groups(w.type, w.n_in, row, g, std::min(n_groups, g + slice), buf.get());
    if (done) done();
  }
  return buf;
}

bool unpack_row(const WeightView& w, int64_t row, void* dst) {
  if (w.packed == nullptr || row < 0 || row >= w.n_out) return false;
  const int64_t n_blocks = w.n_in / kQK;
  const int k = static_cast<int>(row % kPackRows);
  const uint8_t* group = static_cast<const uint8_t*>(w.packed) +
                         (row / kPackRows) * packed_group_bytes(w.type, w.n_in);
  // The nibbles of row k as a GGUF block's qs: quant e < 16 low, e >= 16 high.
  auto unpack_nibbles = [k](const uint8_t(*qs)[kPackRows * 4], uint8_t* out) {
    uint8_t q[kQK];
    for (int s = 0; s < 4; ++s) {
      for (int i = 0; i < 4; ++i) {
        q[8 * s + i] = qs[s][4 * k + i] & 0xF;
        q[8 * s + 4 + i] = qs[s][4 * k + i] >> 4;
      }
    }
    for (int j = 0; j < 16; ++j) out[j] = static_cast<uint8_t>(q[j] | (q[j + 16] << 4));
  };
  switch (w.type) {
    case DType::kQ4_0: {
      const auto* p = reinterpret_cast<const PackedQ4_0*>(group);
      auto* out = static_cast<BlockQ4_0*>(dst);
      for (int64_t b = 0; b < n_blocks; ++b) {
        out[b].d = p[b].d[k];
        unpack_nibbles(p[b].qs, out[b].qs);
      }
      return true;
    }
    case DType::kQ4_1: {
      const auto* p = reinterpret_cast<const PackedQ4_1*>(group);
      auto* out = static_cast<BlockQ4_1*>(dst);
      for (int64_t b = 0; b < n_blocks; ++b) {
        out[b].d = p[b].d[k];
        out[b].m = p[b].m[k];
        unpack_nibbles(p[b].qs, out[b].qs);
      }
      return true;
    }
    case DType::kQ5_0: {
      const auto* p = reinterpret_cast<const PackedQ5_0*>(group);
      auto* out = static_cast<BlockQ5_0*>(dst);
      for (int64_t b = 0; b < n_blocks; ++b) {
        out[b].d = p[b].d[k];
        unpack_nibbles(p[b].qs, out[b].qs);
        uint32_t qh = 0;
        for (int i = 0; i < 4; ++i) {
          const uint32_t bits = p[b].qh[4 * k + i];
          for (int s = 0; s < 4; ++s) {
            qh |= ((bits >> (2 * s)) & 1) << (8 * s + i);
            qh |= ((bits >> (2 * s + 1)) & 1) << (8 * s + 4 + i);
          }
        }
        std::memcpy(out[b].qh, &qh, 4);
      }
      return true;
    }
    case DType::kQ8_0: {
      const auto* p = reinterpret_cast<const PackedQ8_0*>(group);
      auto* out = static_cast<BlockQ8_0*>(dst);
      for (int64_t b = 0; b < n_blocks; ++b) {
        out[b].d = p[b].d[k];
        for (int s = 0; s < 8; ++s) {
          for (int i = 0; i < 4; ++i) out[b].qs[4 * s + i] = p[b].qs[s][4 * k + i];
        }
      }
      return true;
    }
    default:
      return false;
  }
}

void fill_portable_packed(CpuKernels& k) {
  // One row at a time inside, so any number of rows per call gives the same work.
  const auto set = [&k](WeightKind kind, PackedGroupFn kernel) {
    k.packed[static_cast<int>(kind)] = kernel;
    k.packed_rows[static_cast<int>(kind)] = kMaxPackedActs;
  };
  set(WeightKind::kQ4_K, one_row_at_a_time<packed_q4k_portable<1>>);
  set(WeightKind::kQ6_K, one_row_at_a_time<packed_q6k_portable<1>>);
  set(WeightKind::kQ4_0, one_row_at_a_time<packed_legacy_portable<PackedQ4_0, BlockQ8_0>>);
  set(WeightKind::kQ4_1, one_row_at_a_time<packed_legacy_portable<PackedQ4_1, BlockQ8_1>>);
  set(WeightKind::kQ5_0, one_row_at_a_time<packed_legacy_portable<PackedQ5_0, BlockQ8_0>>);
  set(WeightKind::kQ8_0, one_row_at_a_time<packed_legacy_portable<PackedQ8_0, BlockQ8_0>>);
}

}  // namespace salvo::cpu
