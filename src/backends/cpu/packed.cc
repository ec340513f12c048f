// Repacking of Q4_K / Q6_K matrices into the eight-row layouts of packed.h, and the portable
// kernels, which define the arithmetic the SIMD kernels reproduce bit for bit.
#include "backends/cpu/packed.h"

#include <cmath>
#include <cstring>

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
      float sumf[kPackRows] = {};
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
          sumf[k] = std::fma(static_cast<float>(isum), static_cast<float>(blk.sc[j][k]), sumf[k]);
        }
      }
      for (int k = 0; k < kPackRows; ++k) {
        int32_t msum = 0;
        for (int j = 0; j < 8; ++j) {
          msum += blk.mins[j / 2][k][j % 2] * (a[b].bsums[2 * j] + a[b].bsums[2 * j + 1]);
        }
        const float da = a[b].d;
        acc[k] = std::fma(sumf[k], fp16_to_fp32(blk.d[k]) * da, acc[k]);
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
      float sumf[kPackRows] = {};
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
          sumf[k] = std::fma(static_cast<float>(isum), static_cast<float>(blk.sc[j][k]), sumf[k]);
        }
      }
      for (int k = 0; k < kPackRows; ++k) {
        acc[k] = std::fma(sumf[k], fp16_to_fp32(blk.d[k]) * a[b].d, acc[k]);
      }
    }
    std::memcpy(out + r * kPackRows, acc, sizeof(acc));
  }
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
  return (type == DType::kQ4_K || type == DType::kQ6_K) && n_out % kPackRows == 0 &&
         n_in % kQKK == 0;
}

size_t packed_group_bytes(DType type, int64_t n_in) {
  const size_t n_sb = static_cast<size_t>(n_in / kQKK);
  return n_sb * (type == DType::kQ4_K ? sizeof(PackedQ4K) : sizeof(PackedQ6K));
}

size_t packed_bytes(DType type, int64_t n_out, int64_t n_in) {
  return packed_group_bytes(type, n_in) * static_cast<size_t>(n_out / kPackRows);
}

std::unique_ptr<uint8_t[]> pack_matrix(const WeightView& w, ThreadPool* pool) {
  SALVO_CHECK(packable(w.type, w.n_out, w.n_in));
  std::unique_ptr<uint8_t[]> buf(new uint8_t[packed_bytes(w.type, w.n_out, w.n_in)]);
  const size_t row_stride = row_bytes(w.type, w.n_in);
  const size_t group_bytes = packed_group_bytes(w.type, w.n_in);
  const int64_t n_sb = w.n_in / kQKK;
  const auto* src = static_cast<const uint8_t*>(w.data);
  auto pack = [&](int, int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const uint8_t* rows[kPackRows];
      for (int k = 0; k < kPackRows; ++k) rows[k] = src + (g * kPackRows + k) * row_stride;
      uint8_t* dst = buf.get() + g * group_bytes;
      if (w.type == DType::kQ4_K) {
        pack_q4k_group(reinterpret_cast<const BlockQ4_K* const*>(rows), n_sb,
                       reinterpret_cast<PackedQ4K*>(dst));
      } else {
        pack_q6k_group(reinterpret_cast<const BlockQ6_K* const*>(rows), n_sb,
                       reinterpret_cast<PackedQ6K*>(dst));
      }
    }
  };
  const int64_t n_groups = w.n_out / kPackRows;
  if (pool != nullptr) {
    pool->parallel_for(n_groups, pack);
  } else {
    pack(0, 0, n_groups);
  }
  return buf;
}

void fill_portable_packed(CpuKernels& k) {
  k.packed[static_cast<int>(WeightKind::kQ4_K)] = one_row_at_a_time<packed_q4k_portable<1>>;
  k.packed[static_cast<int>(WeightKind::kQ6_K)] = one_row_at_a_time<packed_q6k_portable<1>>;
}

}  // namespace salvo::cpu
