// Host entry points of the CUDA kernels. Each validates nothing itself (the callers own the
// shapes: CudaModel checks them at load), fills a POD params struct and launches a template on
// the given stream. Pointers are device pointers; activations are row-major float32
// [n_rows, width], weights stay in their GGUF block formats.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "models/config.h"
#include "quant/types.h"
#include "util/status.h"

namespace salvo::cuda {

// Rows of activations one matmul launch carries; larger batches (prefill) are cut into pieces
// of this many rows, which gives every row the same arithmetic whatever the batch size.
inline constexpr int kMatmulMaxRows = 64;

// Activations quantized for the integer (tensor-core) matmul, like ggml's q8_1: per row and
// 32-element block, int8 quants q = round(x / d) with d = max|x| / 127, and a Q8Meta. The
// metadata is stored block-major ([n_in / 32][meta_stride]) so that the kernel reads the
// entries of neighbouring rows together.
struct alignas(8) Q8Meta {
  float d;
  int16_t sum_lo, sum_hi;  // sums of the quants of elements [0, 16) and [16, 32) of the block
};
// The converted forms of a matmul input: the int8 form of the integer variants and the fp16
// fragments of kHalf (half_frag_index's layout; h null: none).
struct Q8Rows {
  const int8_t* q = nullptr;     // [n_rows, n_in]
  const Q8Meta* meta = nullptr;  // [n_in / 32][meta_stride]
  int64_t meta_stride = 0;       // >= n_rows
  const uint16_t* h = nullptr;   // fp16 B fragments of n_rows rounded up to 8
};
// Where a fused kernel writes the int8 form of its output (quantize_rows' layout; q null: none)
// and its fp16 fragments (h null: none).
struct Q8Out {
  int8_t* q = nullptr;
  Q8Meta* meta = nullptr;
  int64_t meta_stride = 0;
  uint16_t* h = nullptr;
};
// Where element k of row r of an [n_rows, n_in] input sits in kHalf's fp16 activations: the B
// fragments of mma.m16n8k16 for 8 rows at a time, [r / 8][k / 32][lane][8 halves], so that a
// lane reads the registers of two k16 steps as one 16-byte load. n_in a multiple of 32.
__host__ __device__ inline int64_t half_frag_index(int64_t r, int64_t k, int64_t n_in) {
  const int64_t kk = k % 32, j = kk % 16;
  const int64_t lane = 4 * (r % 8) + (j % 8) / 2;
  return (((r / 8) * (n_in / 32) + k / 32) * 32 + lane) * 8 + 4 * (kk / 16) + 2 * (j / 8) + j % 2;
}
// The rows of fragments a kHalf matmul of n rows reads: each launch of up to kMatmulMaxRows
// rows loads every 8-row n tile of its width (8, 16, 32 or 64 rows), written or not.
inline int64_t half_frag_rows(int64_t n) {
  if (n <= 8) return 8;
  if (n <= 16) return 16;
  if (n <= 32) return 32;
  return (n + 63) / 64 * 64;
}
// Writes x [n_rows, n_in] as kHalf's fp16 fragments (rows up to the next multiple of 8 as 0).
void half_frags(const float* x, int64_t n_rows, int64_t n_in, uint16_t* h, cudaStream_t stream);
// Quantizes x [n_rows, n_in] (n_in a multiple of 32); row r's result depends on row r alone.
void quantize_rows(const float* x, int64_t n_rows, int64_t n_in, int8_t* q, Q8Meta* meta,
                   int64_t meta_stride, cudaStream_t stream);

struct MatmulParams;
enum class GatedAct { kSilu, kGeluTanh };

// The matmul kernel families, selectable per call (benchmarks, tests) or for a whole run with
// SALVO_CUDA_MATMUL=<name>; kAuto picks the default of the weight type (a table in matmul.cu).
enum class MatmulVariant : int {
  kAuto,
  kFloat,  // fp32 activations, weights dequantized to float, scalar FMA (every type)
  kMma,    // int8 activations (Q8Rows), int8 tensor-core mma.sync (block-quantized types)
  kQ8,     // kMma's arithmetic, bit for bit, with dp4a instead of the tensor cores up to 8 rows
  // Q4_K / Q6_K repacked at upload (pack_half_weights), dequantized to fp16 in registers and
  // multiplied on the fp16 tensor cores with fp16 activations (Q8Rows::h): the same
  // instructions per weight at 1 to 64 rows. Only a matrix uploaded that way takes it (never a
  // kAuto choice): MatmulParams::variant says so.
  kHalf,
};
const char* variant_name(MatmulVariant v);
// True for the variants that read int8 activations (MatmulParams::xq).
inline bool variant_takes_q8(MatmulVariant v) {
  return v == MatmulVariant::kMma || v == MatmulVariant::kQ8;
}
// kAuto for a name no variant has.
MatmulVariant variant_from_name(const char* name);
bool variant_supports(MatmulVariant v, DType type);
// The variant a matrix's calls take: its own, else kAuto's choice for its type.
MatmulVariant variant_of(const MatmulParams& p);
// The variant a kAuto call uses for this type (SALVO_CUDA_MATMUL, else the default table).
MatmulVariant resolve_variant(MatmulVariant requested, DType type);

// The batch as the attention kernels see it (device arrays of n_rows entries, n_seq for
// committed). Row k is visible to row q of the same sequence iff k <= q <= subtree_end[k].
struct BatchView {
  int n_rows = 0;
  const int32_t* seq = nullptr;
  const int32_t* pos = nullptr;
  const int32_t* slot = nullptr;  // cache slot of the row's K/V (behind the committed ones)
  const int32_t* subtree_end = nullptr;
  const int32_t* committed = nullptr;  // [n_seq] committed rows per sequence
  // [n_rows] committed rows of each row's sequence (committed[seq[r]]), or null: one dependent
  // load less at the start of the attention kernel.
  const int32_t* row_committed = nullptr;
};

// One layer of the device KV cache: [n_seq][capacity][width] fp16 values (bits) for K and for V.
// Attention multiplies K and V as fp16 on the tensor cores, so a cache of floats gave the same
// bits at twice the bytes (the host cache holds halves too).
struct KvLayerView {
  uint16_t* k = nullptr;
  uint16_t* v = nullptr;
  int capacity = 0, k_width = 0, v_width = 0;
};

// A kHalf matmul of Q, K or V that applies RoPE and stores K / V in the cache itself
// (MatmulParams::role; Q's and K's rows packed by rope_row_order): the bits of the plain launch
// followed by rope_store_kv.
enum class HalfRole : int { kPlain, kRopeQ, kRopeK, kStoreV };
struct RopeEpilogue {
  BatchView batch;  // the launch's rows
  KvLayerView kv;
  int head_dim = 0, n_rot = 0;
  float theta_scale = 1.0f;  // rope_theta_scale(base, n_rot)
  bool neox = false;
  // false: Q and K go to y in the heads' order unrotated and V to y, for rope_store_kv (wider
  // launches: one lane rotating 2 NT pairs in turn cost more than the separate kernel).
  bool rotate = true;
};
// The per-pair factor of the rotation angles, base^(-2 / n_rot): rope_store_kv's and the
// epilogue's angles come from this one expression.
inline float rope_theta_scale(float base, int n_rot) {
  return powf(base, -2.0f / static_cast<float>(n_rot));
}
// Whether a launch of n rows rotates and stores in its epilogue (RopeEpilogue::rotate). Session
// 30 on the H200, random 1.5B, plain / fused launches: 1 row 1.277 / 1.260 ms, 8 rows 1.408 /
// 1.402, 16 rows 1.741 / 1.750, 64 rows 4.58 / 4.91, when a lane's angle chains ran in turn. With
// them side by side, session 61 on an H100 (random 7B, 16-row pass at a 512-token context, up to
// 8 / up to 16 rows): 3.532 / 3.495 ms. Up to SALVO_CUDA_ROPE_ROWS rows (default 16; read once).
bool rope_in_epilogue(int64_t n_rows);
// For the rows of a Q or K matrix (n_heads heads of head_dim rows) in the order the kHalf
// epilogue of kRopeQ / kRopeK wants: each 16-row tile of a head holds the first elements of 8
// rotation pairs in rows 0-7 and their partners in rows 8-15 (pairs past n_rot: consecutive
// elements, not rotated), so an mma lane holds both halves of its pairs. order[r] = the source
// row of row r. Needs head_dim % 16 == 0 and an even n_rot <= head_dim.
bool rope_rows_supported(int head_dim, int n_rot);
std::vector<int> rope_row_order(int n_heads, int head_dim, int n_rot, bool neox);

struct MatmulParams {
  DType type = DType::kF32;
  const void* w = nullptr;  // [n_out rows of row_bytes(type, n_in)]
  int64_t n_out = 0, n_in = 0;
  const float* x = nullptr;  // [n_rows, n_in]
  int64_t n_rows = 0;
  float* y = nullptr;           // [n_rows, n_out]
  const float* bias = nullptr;  // [n_out] or null
  MatmulVariant variant = MatmulVariant::kAuto;
  // x quantized by quantize_rows, for the kMma variant; when null, matmul() quantizes x into
  // a scratch buffer of its own (which allocates, so not inside a graph capture).
  Q8Rows xq;
  // w is in the tiled layout of tile_weights() (the integer variants only).
  bool tiled = false;
  // kHalf: the factor of the packed scales (pack_half_weights), applied to the fp32 sums.
  float half_scale = 1.0f;
  // kHalf, w from pack_half_gated (gate and up of a feed-forward, n_out = 2 n_ff, no bias): y
  // [n_rows, n_ff] = gated_act(gate, up) and its fp16 fragments to gated_h, in the matmul's own
  // launch, with the bits of the two matrices' launch followed by gated_act_q8.
  bool gated = false;
  GatedAct gated_act = GatedAct::kSilu;
  uint16_t* gated_h = nullptr;
  // kHalf: what the epilogue does with the sums (HalfRole); rope: its batch, cache and RoPE.
  HalfRole role = HalfRole::kPlain;
  RopeEpilogue rope = {};
};

// The tiled weight layout of the integer variants, for the block-quantized types with one
// block per kernel unit (Q4_K, Q5_K, Q6_K): the rows in tiles of 32 (the last padded), and in
// each tile block b of its 32 rows stored together, [tile][block][32 rows][block bytes]. The
// GEMV's warps copy one block of a tile's 32 rows at a time, which the row-major layout spreads
// over 32 pieces a row apart; tiled, it is one contiguous run (bench/gemv_pattern.cu: the 7B
// gate/up copy pattern at 3460 against 2962 GB/s). The arithmetic is the same: the same bits.
bool tiled_layout_supported(DType type);
// The bytes of w [n_out rows of row_bytes(type, n_in)] in the tiled layout (n_out rounded up to
// 32 rows; the padding rows are zero and never read).
std::vector<uint8_t> tile_weights(DType type, const void* w, int64_t n_out, int64_t n_in);

// True for the weight types the matmul and embedding kernels read.
bool weight_type_supported(DType type);
// y = x W^T (+ bias). Each weight chunk is read once per launch for all (up to 64) rows, and the
// value of y[r, o] does not depend on how many rows share the launch (row invariance).
void matmul(const MatmulParams& p, cudaStream_t stream);
// The integer paths alone (variants kMma, kQ8): x given as p.xq (p.x unused); launches of up
// to dp4a_rows (<= 8) rows run the dp4a kernel, which gives the same bits as the mma kernel.
void matmul_mma(const MatmulParams& p, int dp4a_rows, cudaStream_t stream);
// The split-k scratch of a stream (matmul_mma's narrow matrices): allocates, so call it before
// capturing a graph on the stream (an uncaptured launch allocates it when first needed).
Status matmul_prepare(cudaStream_t stream);
// Frees it (before the stream is destroyed).
void matmul_release(cudaStream_t stream);
// matmul_mma for up to 3 matrices of one type and width over the same activations (p.xq) in one
// launch (Q/K/V, gate/up). Each matrix's values depend on its own shape and the group's.
void matmul_mma_group(const MatmulParams* parts, int n_parts, int dp4a_rows, cudaStream_t stream);
// y_i = x W_i^T for parts[0..n_parts): one launch where their variant reads int8 activations and
// they share the type and width, else one matmul() each.
void matmul_group(MatmulParams* parts, int n_parts, cudaStream_t stream);
bool mma_supports(DType type);

// kHalf (matmul_half.cu). SALVO_CUDA_HALF=0 keeps the integer kernels for every matrix.
bool half_enabled();
// Whether a matrix of this type and shape can take kHalf (Q4_K, Q6_K; n_in % 256 == 0).
bool half_supported(DType type, int64_t n_out, int64_t n_in);
// The kHalf layout of w [n_out rows of row_bytes(type, n_in)]: per 16 output rows (the last
// padded with zero rows) and 256-element super-block one chunk, the weights in mma A-fragment
// order with their scales (matmul_half.cu says how). *scale: the matrix's
// MatmulParams::half_scale (the scales are stored times its inverse, a power of two). compact:
// the GGUF's scale bytes and fp16 d (4.625 bits a Q4_K weight, 6.56 a Q6_K one) instead of the
// fp16 products (5.0, 7.0); the kernels read the layout that half_compact() names, so only
// host-side tests pass anything else.
bool half_compact();  // SALVO_HALF_COMPACT=1 (an A/B form until measured on a GPU)
std::vector<uint8_t> pack_half_weights(DType type, const void* w, int64_t n_out, int64_t n_in,
                                       float* scale, bool compact = half_compact());
// The bytes of pack_half_weights' layout of an [n_out, n_in] matrix of this type.
int64_t half_packed_bytes(DType type, int64_t n_out, int64_t n_in, bool compact = half_compact());
// Whether gate and up [n_ff, n_in] of this type can be packed as one gated matrix.
bool half_gated_supported(DType type, int64_t n_ff, int64_t n_in);
// gate's and up's rows interleaved by eight (each 16-row tile: 8 of gate, the same 8 of up, so
// an mma lane holds both halves of its outputs), then pack_half_weights.
std::vector<uint8_t> pack_half_gated(DType type, const void* gate, const void* up, int64_t n_ff,
                                     int64_t n_in, float* scale);
// kHalf's split scratch of a stream (matmul_prepare / matmul_release call these).
Status half_prepare(cudaStream_t stream);
void half_release(cudaStream_t stream);
// matmul() of kHalf matrices; parts (up to 3, one width, the same p.xq.h) share a launch. Their
// types may differ (a Q6_K V beside Q4_K Q and K): each block runs its own part's format.
void matmul_half_group(const MatmulParams* parts, int n_parts, cudaStream_t stream);
// Whether kHalf matrices of different types share a launch (SALVO_HALF_MIXED=0: one launch per
// type, for A/B runs).
bool half_mixed_enabled();
// Whether a and b may share a matmul_half_group launch: both kHalf over the same width with fp16
// inputs, of one type or (half_mixed_enabled) of two.
bool half_shares_launch(const MatmulParams& a, const MatmulParams& b);

void rms_norm(const float* x, const float* w, float* out, int64_t n_rows, int dim, float eps,
              cudaStream_t stream);
// x += h; out = rms_norm(x) * w (out may alias h).
void add_rms_norm(float* x, const float* h, const float* w, float* out, int64_t n_rows, int dim,
                  float eps, cudaStream_t stream);
// The fused forms, each with the int8 copy of its output for the next matmul (quantize_rows'
// bits; dim a multiple of 32). h null: out = rms_norm(x) * w, x unchanged; else x += h first.
void rms_norm_q8(float* x, const float* h, const float* w, float* out, int64_t n_rows, int dim,
                 float eps, const Q8Out& q, cudaStream_t stream);
// gate = act(gate) * up over [n_rows, width] (width a multiple of 32), and its int8 copy.
void gated_act_q8(GatedAct act, float* gate, const float* up, int64_t n_rows, int width,
                  const Q8Out& q, cudaStream_t stream);
void rope(float* x, const int32_t* positions, int64_t n_rows, int n_heads, int head_dim, int n_rot,
          float base, RopeMode mode, cudaStream_t stream);
void silu_mul(float* gate, const float* up, int64_t n, cudaStream_t stream);
void gelu_tanh_mul(float* gate, const float* up, int64_t n, cudaStream_t stream);
void add(float* x, const float* y, int64_t n, cudaStream_t stream);  // x += y
void scale(float* x, float s, int64_t n, cudaStream_t stream);
// out[i] = dequantized row tokens[i] of table ([n_vocab, dim]): [n, dim].
void embed(DType type, const void* table, int64_t dim, const int32_t* tokens, int64_t n, float* out,
           cudaStream_t stream);
// out[j] = x[rows[j]]: [n, dim].
void gather_rows(const float* x, const int32_t* rows, int64_t n, int dim, float* out,
                 cudaStream_t stream);
// out[r, slot] = x[r] + h[r] for out [n_rows, n_slots, dim]: a block's output (the residual x
// plus the block's last h, which the next block's fused add has not added yet) as a hidden state.
void store_hidden(const float* x, const float* h, int64_t n_rows, int dim, int slot, int n_slots,
                  float* out, cudaStream_t stream);
// out[r] = index of the largest logit of row r (the lowest index on ties).
// scratch: scratch_bytes >= argmax_scratch_bytes(n_rows), zero before the first call (each call
// leaves it so), the same scratch_bytes in every call on that scratch.
size_t argmax_scratch_bytes(int64_t n_rows);
void argmax(const float* logits, int64_t n_rows, int n_vocab, int32_t* out, void* scratch,
            size_t scratch_bytes, cudaStream_t stream);

// ids / values [n_rows, k] = each row's k largest logits, the set ops::top_logits selects (larger
// first, ties to the lower index, NaN lowest), in id order within a row. k <= n_vocab.
// scratch: scratch_bytes >= top_logits_scratch_bytes(n_rows, n_vocab, k).
size_t top_logits_scratch_bytes(int64_t n_rows, int n_vocab, int k);
void top_logits(const float* logits, int64_t n_rows, int n_vocab, int k, int32_t* ids,
                float* values, void* scratch, size_t scratch_bytes, cudaStream_t stream);

// Writes the batch rows' K ([n_rows, k_width]) and V into their slots.
void store_kv(const BatchView& batch, const KvLayerView& kv, const float* k, const float* v,
              cudaStream_t stream);

// RoPE on q [n_rows, n_head * head_dim] and k (in place), then the rows' K and V into their
// cache slots: rope() twice and store_kv() in one launch.
struct RopeStoreParams {
  BatchView batch;
  KvLayerView kv;
  float *q = nullptr, *k = nullptr;
  const float* v = nullptr;
  int n_head = 0, n_head_kv = 0, head_dim = 0, n_rot = 0;
  float base = 10000.0f;
  RopeMode mode = RopeMode::kRopeNorm;
  // Each head's RMSNorm before its RoPE (a DFlash drafter's q and k norms; null: none), so the
  // two norms need no launches of their own. n_head may be 0 (k alone: observe's context rows).
  const float *q_norm = nullptr, *k_norm = nullptr;
  float norm_eps = 0.0f;
};
void rope_store_kv(const RopeStoreParams& p, cudaStream_t stream);

struct AttentionParams {
  BatchView batch;
  KvLayerView kv;
  const float* q = nullptr;  // [n_rows, n_head * head_dim], RoPE applied
  float* out = nullptr;      // [n_rows, n_head * head_dim_v]
  int n_head = 0, n_head_kv = 0, head_dim = 0, head_dim_v = 0;
  float scale = 1.0f;
  int window = 0;  // sliding window in positions; 0 = unlimited
  // Every batch row sees every batch row of its sequence (a DFlash block, non-causal) instead
  // of only its ancestors; the window must be 0.
  bool block_visible = false;
  // Scratch of attention_scratch_bytes(): [rows of a launch, n_head,
  // attention_splits(kv.capacity), 2 + head_dim_v] floats.
  float* partial = nullptr;
  // [n_rows, n_head] split counts, 0 before the first call (each call leaves them 0): a buffer
  // of their own, as the partials' layout changes with n_rows.
  int* split_counts = nullptr;
  // Also the int8 form of out for the output projection (head_dim_v a multiple of 32).
  Q8Out out_q8;
  // Rows a launch takes, when fewer than attention_rows_per_launch() (0: that many; the tests
  // use it to check that the split into launches keeps the bits).
  int rows_per_launch = 0;
  int row_base = 0;     // the launch's first batch row: attention() sets it
  int launch_rows = 0;  // the launch's rows: attention() sets it
  int group = 0;        // query heads a block (of one K/V head): attention() sets it
  int n_splits = 0;     // attention_splits(kv.capacity): attention() sets it
  // Blocks of a thread-block cluster along the splits (attention() sets it from
  // SALVO_CUDA_ATTENTION_CLUSTER; 0: none): rows whose keys span 2 to `cluster` splits merge them
  // through distributed shared memory instead of partials in global memory and a count.
  int cluster = 0;
  // What loads before the PDL wait (attention() sets it from SALVO_CUDA_ATTENTION_EARLY): 0
  // nothing, 1 the rows' metadata (host-written), 2 that and an L2 prefetch of the committed K/V
  // rows the block will read (written by earlier steps, never by the kernel before this one).
  int early = 0;
  // Bytes of a later launch's weights (the feed-forward's, which start at l2_prefetch) that the
  // blocks ask into L2, spread over the grid, before their wait, while the attention chain keeps
  // HBM idle. Never read by the kernel; 0 for none (SALVO_CUDA_FFN_PREFETCH, cuda_model.cc).
  const void* l2_prefetch = nullptr;
  int64_t l2_prefetch_bytes = 0;
};
// Key splits of the attention kernel for a cache of `capacity` slots (the grid covers every key
// a row could see, so a captured graph stays valid as the context grows).
int attention_splits(int capacity);
// A wide pass at a long context runs in launches of at most this many rows, so that its
// partials fit kAttentionScratchBudget (a 512-row prefill chunk at a 32K context on the 7B shape
// would otherwise take 1.9 GB, now 64 MB in 29 launches); a decode step and a 16-node
// verification stay one launch up to that context (18 rows a launch there).
constexpr size_t kAttentionScratchBudget = size_t{64} << 20;
int attention_rows_per_launch(int n_head, int capacity, int head_dim_v);
// The partials of min(n_rows, attention_rows_per_launch()) rows.
size_t attention_scratch_bytes(int n_rows, int n_head, int capacity, int head_dim_v);
// Softmax attention of every row over the committed rows of its sequence plus its ancestors in
// the batch; heads up to 256 wide, head_dim a multiple of 4. Q, K, V and the probabilities go
// through the fp16 tensor cores (fp32 scores and sums).
void attention(const AttentionParams& p, cudaStream_t stream);

// Moves slot from[j] to slot to[j] of one sequence, in order j = 0, 1, ... (from[j] >= to[j],
// both increasing), in every layer: KvCache::commit on the device.
// k, v: the cache base of the sequence in layer 0; layer_stride: values between layers.
void commit_kv(uint16_t* k, uint16_t* v, int64_t k_layer_stride, int64_t v_layer_stride,
               int n_layer, int k_width, int v_width, const int32_t* from, const int32_t* to,
               int n_moves, cudaStream_t stream);

// The DFlash drafter's per-depth candidates (dflash.cu).
inline constexpr int kMaxTopCandidates = 16;
// For each row of logits [n_rows, n_vocab]: the k (<= kMaxTopCandidates) largest logits among
// ids below n_tokens, best first, ties to the lower id, as ids [n_rows, k] and log-probabilities
// [n_rows, k] (log-softmax over the whole row). Slots beyond n_tokens get id 0 and -inf.
// scratch: top_candidates_scratch_bytes(n_rows) of device memory (the chunks' lists). id_map
// (device, [n_vocab], or null): the ids written are id_map[column] (a ranked head's rows).
size_t top_candidates_scratch_bytes(int n_rows);
void top_candidates(const float* logits, int n_rows, int n_vocab, int n_tokens, int k, int32_t* ids,
                    float* logprobs, void* scratch, cudaStream_t stream,
                    const int32_t* id_map = nullptr);
// The DFlash adapter for every parent a tree can give a depth's candidates: parent row r is the
// root (r = 0, children at depth 1) or candidate (r - 1) % k of depth 1 + (r - 1) / k (children
// one depth deeper). With ah [depths, hidden] (a_h y_d for d = 1..), ae [n_parents, hidden]
// (a_e E(parent)) read from ae_table [n_vocab, hidden] (fp16 bits) at the parents' ids
// (parents [n_parents]): ae [n_parents, hidden] = silu(ah[child depth - 1] + a_e E(parent)).
void adapter_activation(const float* ah, const uint16_t* ae_table, const int32_t* parents,
                        float* ae, int n_parents, int hidden, int k, cudaStream_t stream);
// out [n] = x [n] rounded to fp16 (bits).
void to_fp16(const float* x, int64_t n, uint16_t* out, cudaStream_t stream);
// bu [n_parents, dim] (b a) becomes u = y[child depth] + bu, y [block rows, dim]; then
// scores[r, i] = u[r] . cand_rows[(child depth - 1) * k + i], cand_rows [depths * k, dim] (the
// LM head rows of each depth's candidates).
void adapter_scores(const float* y, float* bu, const float* cand_rows, int n_parents, int dim,
                    int k, float* scores, cudaStream_t stream);

}  // namespace salvo::cuda
