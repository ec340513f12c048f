// Element-wise and per-row kernels: RMSNorm, RoPE, gated activations, residual add, embedding
// lookup, row gather, hidden-state capture and argmax.
#include <cuda_fp16.h>

#include <cfloat>

#include "backends/cuda/act.cuh"
#include "backends/cuda/dequant.cuh"
#include "backends/cuda/kernels.h"
#include "backends/cuda/launch.cuh"
#include "backends/cuda/q8.cuh"
#include "backends/cuda/rope.cuh"
#include "util/check.h"

namespace salvo::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// Sum over a block of kT threads; every thread gets the result.
template <int kT>
__device__ float block_sum(float v) {
  __shared__ float partial[kT / 32];
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.0f;
#pragma unroll
  for (int i = 0; i < kT / 32; ++i) total += partial[i];
  __syncthreads();  // partial may be reused by the caller's next block_sum
  return total;
}

// RMSNorm of one row per block, with the residual add (h non-null: x += h first) and the int8
// copy of the output (q.q non-null) fused in: every norm of a pass is this kernel. A decode step
// has one row, so the kernel is a latency chain: each thread loads its (at most kMaxPerThread)
// elements at once into registers before it writes anything (x, h and out may alias, which would
// otherwise order every load after the previous store), and the block is as wide as the row needs.
// With dim a multiple of 32, a warp's 32 elements of one turn are one quantization block.
constexpr int kMaxPerThread = 8;
template <int kT>
__global__ void __launch_bounds__(kT)
    rms_norm_kernel(float* x, const float* h, const float* w, float* out, int dim, float eps,
                    Q8Out q, bool early_w) {
  const int64_t row = blockIdx.x;
  float* xr = x + row * dim;
  float* yr = out + row * dim;
  float v[kMaxPerThread], wv[kMaxPerThread];  // the weights load with x, not after the sum
  // The norm's weights are never a kernel's output: with early_w they load before the wait,
  // while the kernel before this one still runs.
  auto load_w = [&] {
#pragma unroll
    for (int j = 0; j < kMaxPerThread; ++j) {
      const int i = threadIdx.x + j * kT;
      wv[j] = i < dim ? w[i] : 0.0f;
    }
  };
  if (early_w) load_w();
  pdl_enter();
  if (!early_w) load_w();
#pragma unroll
  for (int j = 0; j < kMaxPerThread; ++j) {
    const int i = threadIdx.x + j * kT;
    v[j] = 0.0f;
    if (i < dim) v[j] = h != nullptr ? xr[i] + h[row * dim + i] : xr[i];
  }
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxPerThread; ++j) {
    const int i = threadIdx.x + j * kT;
    if (i < dim && h != nullptr) xr[i] = v[j];
    ss += v[j] * v[j];
  }
  for (int i = threadIdx.x + kMaxPerThread * kT; i < dim; i += kT) {  // rows wider than 8 kT
    const float t = h != nullptr ? xr[i] + h[row * dim + i] : xr[i];
    if (h != nullptr) xr[i] = t;
    ss += t * t;
  }
  const float inv = rsqrtf(block_sum<kT>(ss) / static_cast<float>(dim) + eps);
  auto emit = [&](int i, float xi, float wi) {
    const float y = xi * inv * wi;
    yr[i] = y;
    if (q.q != nullptr) {
      quantize_block_warp(y, threadIdx.x % 32, q.q + row * dim + i - threadIdx.x % 32,
                          q.meta + static_cast<int64_t>(i / 32) * q.meta_stride + row);
    }
    if (q.h != nullptr) q.h[half_frag_index(row, i, dim)] = __half_as_ushort(__float2half_rn(y));
  };
#pragma unroll
  for (int j = 0; j < kMaxPerThread; ++j) {
    const int i = threadIdx.x + j * kT;
    if (i < dim) emit(i, v[j], wv[j]);
  }
  for (int i = threadIdx.x + kMaxPerThread * kT; i < dim; i += kT) emit(i, xr[i], w[i]);
}

// SALVO_CUDA_NORM_EARLY=0: the weights after the wait, for A/B runs. Session 59 on an H100 (norm
// own time a launch, with against without): random 7B 4.33 against 4.43 us, random 1.5B 2.58
// against 2.88. (128 or 256 threads of 16 elements each instead of about 4, measured there too,
// lost: random 7B tg128 368 against 384 tok/s, 1.5B 827 against 884.)
bool norm_early_w() {
  static const bool on = env_on("SALVO_CUDA_NORM_EARLY");
  return on;
}

// The norm kernel's width for a row of dim elements: about four elements a thread.
void launch_norm(float* x, const float* h, const float* w, float* out, int64_t n_rows, int dim,
                 float eps, const Q8Out& q, cudaStream_t stream) {
  if (n_rows == 0) return;
  const unsigned grid = static_cast<unsigned>(n_rows);
  const bool early = norm_early_w();
  if (dim <= 4 * 64) {
    launch(rms_norm_kernel<64>, grid, 64, 0, stream, x, h, w, out, dim, eps, q, early);
  } else if (dim <= 4 * 256) {
    launch(rms_norm_kernel<256>, grid, 256, 0, stream, x, h, w, out, dim, eps, q, early);
  } else if (dim <= 4 * 512) {
    launch(rms_norm_kernel<512>, grid, 512, 0, stream, x, h, w, out, dim, eps, q, early);
  } else {
    launch(rms_norm_kernel<1024>, grid, 1024, 0, stream, x, h, w, out, dim, eps, q, early);
  }
}

// Rotates pair i of one head (v: the head's head_dim values) at position pos.
__device__ __forceinline__ void rope_pair(float* v, int i, int half, float pos, float theta_scale,
                                          bool neox) {
  const int a = neox ? i : 2 * i;
  const int b = neox ? i + half : 2 * i + 1;
  rope_rotate(v[a], v[b], i, pos, theta_scale, v[a], v[b]);
}

// One thread per (row, head, rotated pair).
__global__ void rope_kernel(float* x, const int32_t* positions, int64_t n_rows, int n_heads,
                            int head_dim, int n_rot, float theta_scale, bool neox) {
  pdl_enter();
  const int half = n_rot / 2;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= n_rows * n_heads * half) return;
  const int i = static_cast<int>(idx % half);
  const int64_t rh = idx / half;  // row * n_heads + head
  const int64_t row = rh / n_heads;
  rope_pair(x + rh * head_dim, i, half, static_cast<float>(positions[row]), theta_scale, neox);
}

// One block per (batch row, head) of q and k: the head's pairs (after its RMSNorm, with
// q_norm / k_norm); the blocks of the K heads then store their head's K and the matching V slice
// into the row's cache slot.
constexpr int kRopeStoreThreads = 64;
__global__ void __launch_bounds__(kRopeStoreThreads)
    rope_store_kv_kernel(RopeStoreParams p, float theta_scale) {
  pdl_enter();
  const int r = blockIdx.x, head = blockIdx.y;
  const int half = p.n_rot / 2;
  const bool is_k = head >= p.n_head;
  float* vec = is_k ? p.k + static_cast<int64_t>(r) * p.kv.k_width + (head - p.n_head) * p.head_dim
                    : p.q + (static_cast<int64_t>(r) * p.n_head + head) * p.head_dim;
  const float pos = static_cast<float>(p.batch.pos[r]);
  const float* nw = is_k ? p.k_norm : p.q_norm;
  if (nw != nullptr) {  // uniform over the block
    float ss = 0.0f;
    for (int d = threadIdx.x; d < p.head_dim; d += kRopeStoreThreads) ss += vec[d] * vec[d];
    const float inv =
        rsqrtf(block_sum<kRopeStoreThreads>(ss) / static_cast<float>(p.head_dim) + p.norm_eps);
    for (int d = threadIdx.x; d < p.head_dim; d += kRopeStoreThreads) vec[d] = vec[d] * inv * nw[d];
    __syncthreads();  // a RoPE pair's two values come from different threads
  }
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    rope_pair(vec, i, half, pos, theta_scale, p.mode == RopeMode::kRopeNeox);
  }
  if (!is_k) return;  // uniform over the block
  __syncthreads();
  const int kh = head - p.n_head;
  const int64_t slot =
      static_cast<int64_t>(p.batch.seq[r]) * p.kv.capacity + static_cast<int64_t>(p.batch.slot[r]);
  for (int d = threadIdx.x; d < p.head_dim; d += blockDim.x) {
    p.kv.k[slot * p.kv.k_width + kh * p.head_dim + d] = __half_as_ushort(__float2half_rn(vec[d]));
  }
  const int vw = p.kv.v_width / p.n_head_kv;
  const float* v = p.v + static_cast<int64_t>(r) * p.kv.v_width + kh * vw;
  for (int d = threadIdx.x; d < vw; d += blockDim.x)
    p.kv.v[slot * p.kv.v_width + kh * vw + d] = __half_as_ushort(__float2half_rn(v[d]));
}

__global__ void silu_mul_kernel(float* gate, const float* up, int64_t n) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) gate[i] = silu_times(gate[i], up[i]);
}

__global__ void gelu_tanh_mul_kernel(float* gate, const float* up, int64_t n) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) gate[i] = gelu_tanh_times(gate[i], up[i]);
}

// A warp per 32 consecutive elements, which are one quantization block (width % 32 == 0).
template <GatedAct A>
__global__ void gated_act_q8_kernel(float* gate, const float* up, int64_t n, int width, Q8Out q) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i - threadIdx.x % 32 >= n) return;  // the whole warp is past the end
  const float v =
      A == GatedAct::kSilu ? silu_times(gate[i], up[i]) : gelu_tanh_times(gate[i], up[i]);
  gate[i] = v;
  const int64_t row = i / width, b = (i % width) / 32;
  if (q.h != nullptr)
    q.h[half_frag_index(row, i % width, width)] = __half_as_ushort(__float2half_rn(v));
  if (q.q == nullptr) return;
  quantize_block_warp(v, threadIdx.x % 32, q.q + i - threadIdx.x % 32,
                      q.meta + b * q.meta_stride + row);
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) x[i] += y[i];
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) x[i] *= s;
}

// One block per token; a thread per 16-element chunk of the row.
template <DType T>
__global__ void embed_kernel(const uint8_t* table, int64_t row_bytes, int64_t dim,
                             const int32_t* tokens, float* out) {
  pdl_enter();
  const uint8_t* row = table + static_cast<int64_t>(tokens[blockIdx.x]) * row_bytes;
  float* y = out + static_cast<int64_t>(blockIdx.x) * dim;
  for (int c = threadIdx.x; c < dim / 16; c += kThreads) {
    float w[16];
    int a, b;
    load_chunk<T>(row, c, w, a, b);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      y[a + i] = w[i];
      y[b + i] = w[8 + i];
    }
  }
}

__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int dim, float* out) {
  pdl_enter();
  const float* src = x + static_cast<int64_t>(rows[blockIdx.x]) * dim;
  float* dst = out + static_cast<int64_t>(blockIdx.x) * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) dst[i] = src[i];
}

__global__ void store_hidden_kernel(const float* x, const float* h, int dim, int slot, int n_slots,
                                    float* out) {
  pdl_enter();
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  const float* hr = h + r * dim;
  float* o = out + (r * n_slots + slot) * dim;
  for (int i = threadIdx.x; i < dim; i += kThreads) o[i] = xr[i] + hr[i];
}

// Blocks per row of argmax: a 151936-word row read by one block is a single SM's worth of
// bandwidth (tens of microseconds); split, each block takes a contiguous chunk and the last one
// to finish picks among the chunks' winners in chunk order.
constexpr int kArgmaxBlocks = 32;

// The best (largest, then lowest index) of this thread's and the block's candidates.
__device__ void better(float& best, int& best_i, float v, int j) {
  if (v > best || (v == best && j < best_i)) best = v, best_i = j;
}

__global__ void argmax_kernel(const float* logits, int n_vocab, int32_t* out, float* part_val,
                              int* part_idx, int* counts) {
  pdl_enter();
  const int row = blockIdx.y, chunk = blockIdx.x;
  const float* r = logits + static_cast<int64_t>(row) * n_vocab;
  const int per = (n_vocab + kArgmaxBlocks - 1) / kArgmaxBlocks;
  const int begin = chunk * per, end = min(n_vocab, begin + per);
  float best = -FLT_MAX;
  int best_i = n_vocab;  // beyond any index: loses every tie
  for (int i = begin + threadIdx.x; i < end; i += kThreads) {
    if (r[i] > best) best = r[i], best_i = i;
  }
  for (int off = 16; off > 0; off /= 2) {
    better(best, best_i, __shfl_xor_sync(0xffffffffu, best, off),
           __shfl_xor_sync(0xffffffffu, best_i, off));
  }
  __shared__ float vals[kThreads / 32];
  __shared__ int idxs[kThreads / 32];
  if (threadIdx.x % 32 == 0) vals[threadIdx.x / 32] = best, idxs[threadIdx.x / 32] = best_i;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int k = 1; k < kThreads / 32; ++k) better(best, best_i, vals[k], idxs[k]);
  const int slot = row * kArgmaxBlocks + chunk;
  part_val[slot] = best;
  part_idx[slot] = best_i;
  __threadfence();
  if (atomicAdd(&counts[row], 1) != kArgmaxBlocks - 1) return;  // not the last chunk done
  counts[row] = 0;                                              // ready for the next call
  best = -FLT_MAX, best_i = n_vocab;
  for (int c = 0; c < kArgmaxBlocks; ++c) {  // chunk order; L1 is not coherent: __ldcg
    better(best, best_i, __ldcg(part_val + row * kArgmaxBlocks + c),
           __ldcg(part_idx + row * kArgmaxBlocks + c));
  }
  out[row] = best_i;
}

struct EmbedLaunch {
  const void* table;
  int64_t dim;
  const int32_t* tokens;
  int64_t n;
  float* out;
  cudaStream_t stream;
  template <DType T>
  void operator()() const {
    const int64_t row_bytes = dim / ChunkTraits<T>::kChunks / 16 * ChunkTraits<T>::kBlockBytes;
    launch(embed_kernel<T>, static_cast<unsigned>(n), kThreads, 0, stream,
           static_cast<const uint8_t*>(table), row_bytes, dim, tokens, out);
  }
};

// Activation quantization (quantize_rows): one warp per 32-element block of a row.
__global__ void quantize_kernel(const float* x, int64_t n_rows, int64_t n_in, int8_t* q,
                                Q8Meta* meta, int64_t meta_stride) {
  pdl_enter();
  const int64_t n_blocks = n_in / 32;
  const int64_t id = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (id >= n_rows * n_blocks) return;
  const int64_t r = id / n_blocks, b = id % n_blocks;
  quantize_block_warp(x[r * n_in + 32 * b + lane], lane, q + r * n_in + 32 * b,
                      meta + b * meta_stride + r);
}

}  // namespace

void rms_norm(const float* x, const float* w, float* out, int64_t n_rows, int dim, float eps,
              cudaStream_t stream) {
  // x is read-only here (h is null); the kernel takes it mutable for the residual form.
  launch_norm(const_cast<float*>(x), nullptr, w, out, n_rows, dim, eps, {}, stream);
}

void add_rms_norm(float* x, const float* h, const float* w, float* out, int64_t n_rows, int dim,
                  float eps, cudaStream_t stream) {
  launch_norm(x, h, w, out, n_rows, dim, eps, {}, stream);
}

void rope(float* x, const int32_t* positions, int64_t n_rows, int n_heads, int head_dim, int n_rot,
          float base, RopeMode mode, cudaStream_t stream) {
  const int64_t n = n_rows * n_heads * (n_rot / 2);
  if (n == 0) return;
  const float theta_scale = powf(base, -2.0f / static_cast<float>(n_rot));
  launch(rope_kernel, blocks_for(n), kThreads, 0, stream, x, positions, n_rows, n_heads, head_dim,
         n_rot, theta_scale, mode == RopeMode::kRopeNeox);
}

void quantize_rows(const float* x, int64_t n_rows, int64_t n_in, int8_t* q, Q8Meta* meta,
                   int64_t meta_stride, cudaStream_t stream) {
  SALVO_CHECK(n_in % 32 == 0 && meta_stride >= n_rows);
  const int64_t threads = n_rows * n_in;  // one per element
  if (threads > 0) {
    launch(quantize_kernel, blocks_for(threads), kThreads, 0, stream, x, n_rows, n_in, q, meta,
           meta_stride);
  }
}

void rms_norm_q8(float* x, const float* h, const float* w, float* out, int64_t n_rows, int dim,
                 float eps, const Q8Out& q, cudaStream_t stream) {
  launch_norm(x, h, w, out, n_rows, dim, eps, q, stream);
}

void gated_act_q8(GatedAct act, float* gate, const float* up, int64_t n_rows, int width,
                  const Q8Out& q, cudaStream_t stream) {
  const int64_t n = n_rows * width;
  if (n == 0) return;
  if (act == GatedAct::kSilu) {
    launch(gated_act_q8_kernel<GatedAct::kSilu>, blocks_for(n), kThreads, 0, stream, gate, up, n,
           width, q);
  } else {
    launch(gated_act_q8_kernel<GatedAct::kGeluTanh>, blocks_for(n), kThreads, 0, stream, gate, up,
           n, width, q);
  }
}

void rope_store_kv(const RopeStoreParams& p, cudaStream_t stream) {
  if (p.batch.n_rows == 0) return;
  const float theta_scale = rope_theta_scale(p.base, p.n_rot);
  const dim3 grid(static_cast<unsigned>(p.batch.n_rows),
                  static_cast<unsigned>(p.n_head + p.n_head_kv));
  launch(rope_store_kv_kernel, grid, kRopeStoreThreads, 0, stream, p, theta_scale);
}

bool rope_in_epilogue(int64_t n_rows) {
  static const int max_rows = env_int("SALVO_CUDA_ROPE_ROWS", 16);
  return n_rows <= max_rows;
}

void silu_mul(float* gate, const float* up, int64_t n, cudaStream_t stream) {
  if (n > 0) launch(silu_mul_kernel, blocks_for(n), kThreads, 0, stream, gate, up, n);
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n, cudaStream_t stream) {
  if (n > 0) launch(gelu_tanh_mul_kernel, blocks_for(n), kThreads, 0, stream, gate, up, n);
}

void add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n > 0) launch(add_kernel, blocks_for(n), kThreads, 0, stream, x, y, n);
}

void scale(float* x, float s, int64_t n, cudaStream_t stream) {
  if (n > 0) launch(scale_kernel, blocks_for(n), kThreads, 0, stream, x, s, n);
}

void embed(DType type, const void* table, int64_t dim, const int32_t* tokens, int64_t n, float* out,
           cudaStream_t stream) {
  if (n == 0) return;
  dispatch_weight_type(type, EmbedLaunch{table, dim, tokens, n, out, stream});
}

void gather_rows(const float* x, const int32_t* rows, int64_t n, int dim, float* out,
                 cudaStream_t stream) {
  if (n > 0)
    launch(gather_rows_kernel, static_cast<unsigned>(n), kThreads, 0, stream, x, rows, dim, out);
}

void store_hidden(const float* x, const float* h, int64_t n_rows, int dim, int slot, int n_slots,
                  float* out, cudaStream_t stream) {
  if (n_rows > 0) {
    launch(store_hidden_kernel, static_cast<unsigned>(n_rows), kThreads, 0, stream, x, h, dim, slot,
           n_slots, out);
  }
}

size_t argmax_scratch_bytes(int64_t n_rows) {
  return static_cast<size_t>(n_rows) *
         (sizeof(int) + kArgmaxBlocks * (sizeof(float) + sizeof(int)));
}

void argmax(const float* logits, int64_t n_rows, int n_vocab, int32_t* out, void* scratch,
            size_t scratch_bytes, cudaStream_t stream) {
  if (n_rows == 0) return;
  // The layout follows the scratch's capacity, not n_rows: the counts must stay where the last
  // call (of any row count) left them at 0; a grown buffer is a new, zeroed one.
  const int64_t cap = static_cast<int64_t>(scratch_bytes / argmax_scratch_bytes(1));
  SALVO_CHECK(cap >= n_rows);
  int* counts = static_cast<int*>(scratch);
  float* part_val = reinterpret_cast<float*>(counts + cap);
  int* part_idx = reinterpret_cast<int*>(part_val + cap * kArgmaxBlocks);
  launch(argmax_kernel, dim3(kArgmaxBlocks, static_cast<unsigned>(n_rows)), kThreads, 0, stream,
         logits, n_vocab, out, part_val, part_idx, counts);
}

}  // namespace salvo::cuda
