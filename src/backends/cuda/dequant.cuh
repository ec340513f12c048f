// Dequantization of one "chunk" of a weight row on the GPU: 16 weights that a lane turns into
// floats at once, laid out as two runs of 8 consecutive elements (offsets a and b in the row).
// Every block format splits into such chunks: a 32-element block holds two, a 256-element
// k-quant super-block sixteen. The arithmetic mirrors backends/cpu/dequant.cc (itself ggml's).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "quant/types.h"

namespace salvo::cuda {

template <DType T>
struct ChunkTraits;
// chunk_bytes: bytes of one block; chunks: chunks per block.
template <>
struct ChunkTraits<DType::kF32> {
  static constexpr int kBlockBytes = 64, kChunks = 1;
};
template <>
struct ChunkTraits<DType::kF16> {
  static constexpr int kBlockBytes = 32, kChunks = 1;
};
template <>
struct ChunkTraits<DType::kBF16> {
  static constexpr int kBlockBytes = 32, kChunks = 1;
};
template <>
struct ChunkTraits<DType::kQ4_0> {
  static constexpr int kBlockBytes = 18, kChunks = 2;
};
template <>
struct ChunkTraits<DType::kQ4_1> {
  static constexpr int kBlockBytes = 20, kChunks = 2;
};
template <>
struct ChunkTraits<DType::kQ5_0> {
  static constexpr int kBlockBytes = 22, kChunks = 2;
};
template <>
struct ChunkTraits<DType::kQ8_0> {
  static constexpr int kBlockBytes = 34, kChunks = 2;
};
template <>
struct ChunkTraits<DType::kQ4_K> {
  static constexpr int kBlockBytes = 144, kChunks = 16;
};
template <>
struct ChunkTraits<DType::kQ5_K> {
  static constexpr int kBlockBytes = 176, kChunks = 16;
};
template <>
struct ChunkTraits<DType::kQ6_K> {
  static constexpr int kBlockBytes = 210, kChunks = 16;
};

__device__ __forceinline__ float half_at(const uint8_t* p) {
  return __half2float(*reinterpret_cast<const __half*>(p));
}

// 8 bytes from a 2-byte aligned address (the legacy blocks are 18/20/22/34 bytes long).
__device__ __forceinline__ void load8_a2(const uint8_t* p, uint8_t q[8]) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint16_t v = s[i];
    q[2 * i] = v & 0xFF;
    q[2 * i + 1] = v >> 8;
  }
}

// 8 bytes from an 8-byte aligned address.
__device__ __forceinline__ void load8_a8(const uint8_t* p, uint8_t q[8]) {
  const uint2 v = *reinterpret_cast<const uint2*>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    q[i] = (v.x >> (8 * i)) & 0xFF;
    q[4 + i] = (v.y >> (8 * i)) & 0xFF;
  }
}

// ggml's get_scale_min_k4: the j-th 6-bit scale and minimum of a Q4_K/Q5_K super-block.
__device__ __forceinline__ void scale_min_k4(int j, const uint8_t* q, int& d, int& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Chunk c of a row: w[0..8) are elements [a, a+8), w[8..16) elements [b, b+8).
template <DType T>
__device__ __forceinline__ void load_chunk(const uint8_t* row, int c, float w[16], int& a, int& b) {
  using Tr = ChunkTraits<T>;
  const int blk = c / Tr::kChunks, part = c % Tr::kChunks;
  const uint8_t* base = row + static_cast<int64_t>(blk) * Tr::kBlockBytes;
  if constexpr (T == DType::kF32) {
    a = 16 * c;
    b = a + 8;
    const float4* f = reinterpret_cast<const float4*>(base);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 v = f[i];
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (T == DType::kF16 || T == DType::kBF16) {
    a = 16 * c;
    b = a + 8;
    const uint4* p = reinterpret_cast<const uint4*>(base);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const uint4 v = p[i];
      const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const uint16_t lo = u[j] & 0xFFFF, hi = u[j] >> 16;
        if constexpr (T == DType::kF16) {
          w[8 * i + 2 * j] = __half2float(__ushort_as_half(lo));
          w[8 * i + 2 * j + 1] = __half2float(__ushort_as_half(hi));
        } else {
          w[8 * i + 2 * j] = __uint_as_float(static_cast<uint32_t>(lo) << 16);
          w[8 * i + 2 * j + 1] = __uint_as_float(static_cast<uint32_t>(hi) << 16);
        }
      }
    }
  } else if constexpr (T == DType::kQ4_0 || T == DType::kQ4_1 || T == DType::kQ5_0) {
    // qs[j] holds element j (low nibble) and j + 16 (high nibble); part p covers j in [8p, 8p+8).
    a = blk * 32 + 8 * part;
    b = a + 16;
    const float d = half_at(base);
    uint8_t q[8];
    if constexpr (T == DType::kQ4_0) {
      load8_a2(base + 2 + 8 * part, q);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        w[i] = static_cast<float>((q[i] & 0x0F) - 8) * d;
        w[8 + i] = static_cast<float>((q[i] >> 4) - 8) * d;
      }
    } else if constexpr (T == DType::kQ4_1) {
      const float m = half_at(base + 2);
      load8_a2(base + 4 + 8 * part, q);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        w[i] = static_cast<float>(q[i] & 0x0F) * d + m;
        w[8 + i] = static_cast<float>(q[i] >> 4) * d + m;
      }
    } else {
      const uint32_t qh =
          reinterpret_cast<const uint16_t*>(base + 2)[0] |
          (static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(base + 2)[1]) << 16);
      load8_a2(base + 6 + 8 * part, q);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const int j = 8 * part + i;
        const int h0 = ((qh >> j) << 4) & 0x10;
        const int h1 = (qh >> (j + 12)) & 0x10;
        w[i] = static_cast<float>(((q[i] & 0x0F) | h0) - 16) * d;
        w[8 + i] = static_cast<float>(((q[i] >> 4) | h1) - 16) * d;
      }
    }
  } else if constexpr (T == DType::kQ8_0) {
    a = blk * 32 + 16 * part;
    b = a + 8;
    const float d = half_at(base);
    uint8_t q[8];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      load8_a2(base + 2 + 16 * part + 8 * h, q);
#pragma unroll
      for (int i = 0; i < 8; ++i) w[8 * h + i] = static_cast<float>(static_cast<int8_t>(q[i])) * d;
    }
  } else if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) {
    // 64-element group j: qs[32j + l] holds element 64j + l (low) and 64j + 32 + l (high).
    const int j = part / 4, l0 = 8 * (part % 4);
    a = blk * 256 + 64 * j + l0;
    b = a + 32;
    const float d = half_at(base), dmin = half_at(base + 2);
    const uint8_t* scales = base + 4;
    int sc, m;
    scale_min_k4(2 * j, scales, sc, m);
    const float d1 = d * sc, m1 = dmin * m;
    scale_min_k4(2 * j + 1, scales, sc, m);
    const float d2 = d * sc, m2 = dmin * m;
    uint8_t q[8];
    if constexpr (T == DType::kQ4_K) {
      load8_a8(base + 16 + 32 * j + l0, q);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        w[i] = d1 * static_cast<float>(q[i] & 0xF) - m1;
        w[8 + i] = d2 * static_cast<float>(q[i] >> 4) - m2;
      }
    } else {
      uint8_t qh[8];
      load8_a8(base + 48 + 32 * j + l0, q);
      load8_a8(base + 16 + l0, qh);
      const int u1 = 1 << (2 * j), u2 = 2 << (2 * j);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        w[i] = d1 * static_cast<float>((q[i] & 0xF) + (qh[i] & u1 ? 16 : 0)) - m1;
        w[8 + i] = d2 * static_cast<float>((q[i] >> 4) + (qh[i] & u2 ? 16 : 0)) - m2;
      }
    }
  } else if constexpr (T == DType::kQ6_K) {
    // Half n of the super-block (128 elements): ql[64n + 8k + i] (k < 8) holds, for k < 4,
    // elements l and l + 64 (l = 8k + i), and for k >= 4 elements l + 32 and l + 96
    // (l = 8(k-4) + i); the high bits sit in qh[32n + l] at shifts 0/4 resp. 2/6.
    const int n = part / 8, k = part % 8, l0 = 8 * (k % 4);
    const bool upper = k >= 4;
    a = blk * 256 + 128 * n + l0 + (upper ? 32 : 0);
    b = a + 64;
    const float d = half_at(base + 208);
    const int8_t* sc = reinterpret_cast<const int8_t*>(base + 192) + 8 * n;
    const int is = l0 / 16;
    const float d1 = d * sc[is + (upper ? 2 : 0)], d2 = d * sc[is + (upper ? 6 : 4)];
    const int s1 = upper ? 2 : 0, s2 = upper ? 6 : 4;
    uint8_t ql[8], qh[8];
    load8_a2(base + 64 * n + 8 * k, ql);
    load8_a2(base + 128 + 32 * n + l0, qh);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int q1 = ((ql[i] & 0xF) | (((qh[i] >> s1) & 3) << 4)) - 32;
      const int q2 = ((ql[i] >> 4) | (((qh[i] >> s2) & 3) << 4)) - 32;
      w[i] = d1 * static_cast<float>(q1);
      w[8 + i] = d2 * static_cast<float>(q2);
    }
  }
}

// Calls f.template operator()<T>() with the static type of a runtime dtype; the one place the
// CUDA code turns a DType into a template argument. Returns false for unsupported types.
template <typename F>
bool dispatch_weight_type(DType type, F&& f) {
  switch (type) {
    case DType::kF32:
      f.template operator()<DType::kF32>();
      return true;
    case DType::kF16:
      f.template operator()<DType::kF16>();
      return true;
    case DType::kBF16:
      f.template operator()<DType::kBF16>();
      return true;
    case DType::kQ4_0:
      f.template operator()<DType::kQ4_0>();
      return true;
    case DType::kQ4_1:
      f.template operator()<DType::kQ4_1>();
      return true;
    case DType::kQ5_0:
      f.template operator()<DType::kQ5_0>();
      return true;
    case DType::kQ8_0:
      f.template operator()<DType::kQ8_0>();
      return true;
    case DType::kQ4_K:
      f.template operator()<DType::kQ4_K>();
      return true;
    case DType::kQ5_K:
      f.template operator()<DType::kQ5_K>();
      return true;
    case DType::kQ6_K:
      f.template operator()<DType::kQ6_K>();
      return true;
    default:
      return false;
  }
}

}  // namespace salvo::cuda
