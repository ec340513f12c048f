// The DFlash drafter on the GPU (dflash_runner.h). DeviceDflash holds the drafter's weights on
// the device (matrices as Q8_0, the adapter's included) and the target's device
// embedding and LM head, which it reads in place. Each sequence's DeviceDflashRunner keeps the
// drafter's context K/V ([capacity, kv_width] per layer, committed positions first) and runs
// a draft pass as one captured CUDA graph: the block [root, mask, ...] through the layers
// (every block row sees the context and the whole block), the LM head on depths 1..B-1, each
// depth's top candidates and, with an adapter, its scores of those candidates for every parent
// a tree can give them. The host waits once per draft and copies back a few hundred numbers.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "backends/cpu/quantize_acts.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_model.h"
#include "backends/cuda/device_memory.h"
#include "backends/cuda/device_pass.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/knobs.h"
#include "quant/fp16.h"
#include "quant/quantize.h"
#include "quant/types.h"

namespace salvo::cuda {
namespace {

// SALVO_DFLASH_FUSED_QK=0 keeps the q and k norms in launches of their own (A/B runs). By
// default they run inside rope_store_kv's launch: a draft pass loses two launches a layer (3.3 +
// 2.5 us in session 36's ncu) and observe() two of its three (k norm, RoPE and store). Same bits
// (cuda_ops_test); session 37 on the H200: draft 0.409 -> 0.399 ms.
bool fused_qk_norms() {
  static const bool on = env_on("SALVO_DFLASH_FUSED_QK");
  return on;
}

// SALVO_DFLASH_FUSED_ACT=0 keeps the gated activation in a launch of its own (A/B runs). By
// default a drafter layer's gate and up are one gated kHalf matrix whose launch applies the
// activation and writes the down projection's fp16 input, as the target's layers do (one launch
// a layer fewer: 2.5 us each in session 37's ncu). Same bits (GatedMatmulGivesTheUnfusedBits).
bool fused_drafter_act() {
  static const bool on = env_on("SALVO_DFLASH_FUSED_ACT");
  return on;
}

}  // namespace

// SALVO_DFLASH_CUDA_HALF=0 keeps the layers' matrices on the int8 kernel (A/B runs); by default
// they go to kHalf as Q6_K (DeviceDflash::upload_matrix).
bool dflash_half_layers() {
  static const bool on = env_on("SALVO_DFLASH_CUDA_HALF") && half_enabled();
  return on;
}

namespace {

struct DeviceDflashLayer {
  const float *attn_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr, *ffn_norm = nullptr;
  DeviceLinear q, k, v, o, down;
  DeviceGatedFfn ffn;  // gate and up, or their gated matrix (fused_drafter_act)
};

class DeviceDflash : public DflashDevice, public std::enable_shared_from_this<DeviceDflash> {
 public:
  Status upload(const DflashModel& m, const DeviceHeads& heads) {
    config = m.config();
    const DflashConfig& c = config;
    this->heads = heads;
    if (c.head_dim % 4 != 0 || c.head_dim > 256) {
      return Status::error("drafter head size " + std::to_string(c.head_dim) +
                           " does not fit the CUDA attention kernel (a multiple of 4, <= 256)");
    }
    if (c.has_adapter() && c.adapter_top_k > kMaxTopCandidates) {
      return Status::error("drafter adapter top_k " + std::to_string(c.adapter_top_k) +
                           " exceeds the CUDA runner's " + std::to_string(kMaxTopCandidates));
    }
    top_k = std::max(8, c.adapter_top_k);  // 8: the drafter's sibling cap (dflash_drafter.cc)
    SALVO_RETURN_IF_ERROR(upload_matrix(m.fc(), true, &fc.shape));
    SALVO_RETURN_IF_ERROR(upload_vector(m.hidden_norm(), &hidden_norm));
    SALVO_RETURN_IF_ERROR(upload_vector(m.mask_embd(), &mask_embd));
    SALVO_RETURN_IF_ERROR(upload_vector(m.output_norm(), &output_norm));
    for (const DflashLayer& l : m.layers()) {
      DeviceDflashLayer& d = layers.emplace_back();
      SALVO_RETURN_IF_ERROR(upload_vector(l.attn_norm, &d.attn_norm));
      SALVO_RETURN_IF_ERROR(upload_vector(l.q_norm, &d.q_norm));
      SALVO_RETURN_IF_ERROR(upload_vector(l.k_norm, &d.k_norm));
      SALVO_RETURN_IF_ERROR(upload_vector(l.ffn_norm, &d.ffn_norm));
      const std::pair<const WeightView*, DeviceLinear*> matrices[] = {
          {&l.q, &d.q}, {&l.k, &d.k}, {&l.v, &d.v}, {&l.o, &d.o}, {&l.down, &d.down}};
      for (const auto& [w, p] : matrices) {
        SALVO_RETURN_IF_ERROR(upload_matrix(*w, true, &p->shape, dflash_half_layers()));
      }
      if (fused_drafter_act() && d.down.shape.variant == MatmulVariant::kHalf &&
          l.gate.n_out == l.up.n_out && l.gate.n_in == l.up.n_in &&
          half_gated_supported(DType::kQ6_K, l.gate.n_out, l.gate.n_in)) {
        SALVO_RETURN_IF_ERROR(upload_gated(l.gate, l.up, &d.ffn.fused.shape));
      } else {
        SALVO_RETURN_IF_ERROR(upload_matrix(l.gate, true, &d.ffn.gate.shape, dflash_half_layers()));
        SALVO_RETURN_IF_ERROR(upload_matrix(l.up, true, &d.ffn.up.shape, dflash_half_layers()));
      }
    }
    if (m.has_adapter()) {
      SALVO_RETURN_IF_ERROR(upload_matrix(m.adapter_a_h(), true, &a_h.shape));
      SALVO_RETURN_IF_ERROR(upload_matrix(m.adapter_a_e(), true, &a_e.shape));
      SALVO_RETURN_IF_ERROR(upload_matrix(m.adapter_b(), true, &b.shape));
      SALVO_RETURN_IF_ERROR(build_ae_table());
    }
    if (!m.head_ids().empty() && ranked_head_enabled()) {
      SALVO_RETURN_IF_ERROR(build_ranked_head(m.head_ids()));
    }
    return Status();
  }

  Expected<std::unique_ptr<DflashRunner>> new_runner() const override;

  DflashConfig config;
  DeviceHeads heads;
  int top_k = 0;  // candidates a depth of small trees' passes (large ones: kMaxTopCandidates)
  DeviceLinear fc;
  DeviceLinear a_h, a_e, b;            // the adapter
  const uint16_t* ae_table = nullptr;  // [n_vocab, adapter_hidden] fp16: a_e E(t) for every t
  const float *hidden_norm = nullptr, *mask_embd = nullptr, *output_norm = nullptr;
  std::vector<DeviceDflashLayer> layers;
  // The LM head's rows of the drafter's best-ranked ids (DflashModel::head_ids), in the layout
  // the target's head takes, and those ids (w / ranked_ids null: none).
  MatmulParams ranked_head;
  const int32_t* ranked_ids = nullptr;

 private:
  // A drafter that ships token ranks drafts from a ranked head (draft_vocab.h) on the device as
  // on the CPU; SALVO_DFLASH_CUDA_RANKED=0 drafts from the target's whole head (for A/B). H200,
  // session 46, one window: code adapter:7 2317 against 2274 tok/s at the same 3.73 tokens a
  // pass, auto 2255 against 2165; small trees gain tokens a pass (the best-ranked 32768 ids
  // against the lowest 65536: code at 32 nodes 4.80 against session 44's 4.52), 64-node trees
  // draft the whole vocabulary's tokens (5.05 both).
  static bool ranked_head_enabled() { return env_on("SALVO_DFLASH_CUDA_RANKED"); }
  // Copies the rows `ids` of the target's row-major head (one download of the whole head, ~200
  // MB for Qwen2.5-1.5B, once per drafter), packed for kHalf where the target's head is.
  Status build_ranked_head(std::span<const int32_t> ids) {
    const MatmulParams& o = heads.output;
    if (o.tiled || o.variant == MatmulVariant::kHalf || o.w == nullptr) return Status();
    const size_t stride = row_bytes(o.type, o.n_in);
    std::vector<uint8_t> whole(stride * static_cast<size_t>(o.n_out));
    SALVO_RETURN_IF_ERROR(cuda_status(
        cudaMemcpy(whole.data(), o.w, whole.size(), cudaMemcpyDeviceToHost), "drafter head rows"));
    const int64_t n = static_cast<int64_t>(ids.size());
    std::vector<uint8_t> rows(stride * ids.size());
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(rows.data() + i * stride, whole.data() + static_cast<size_t>(ids[i]) * stride,
                  stride);
    }
    const bool half = heads.output_half.w != nullptr && half_supported(o.type, n, o.n_in);
    MatmulParams p = half ? heads.output_half : o;
    p.n_out = n;
    if (half) {
      const std::vector<uint8_t> packed =
          pack_half_weights(o.type, rows.data(), n, o.n_in, &p.half_scale);
      SALVO_RETURN_IF_ERROR(upload_bytes(packed.data(), packed.size(), &p.w));
    } else {
      SALVO_RETURN_IF_ERROR(upload_bytes(rows.data(), rows.size(), &p.w));
    }
    const void* d = nullptr;
    SALVO_RETURN_IF_ERROR(upload_bytes(ids.data(), ids.size() * sizeof(int32_t), &d));
    ranked_ids = static_cast<const int32_t*>(d);
    ranked_head = p;
    return Status();
  }
  // a_e E(t) for every token t, computed once as a draft pass would (the embedding row, its
  // int8 form, the Q8_0 matmul) and kept as fp16: a pass's parent rows are then a lookup in the
  // activation kernel instead of an embedding, a quantization and a 57-row matmul whose 16
  // output tiles kept 16 SMs busy (~35 of a ~450 us draft pass; H200, session 36's ncu). It
  // costs n_vocab x hidden x 2 bytes (the 1.5B with hidden 256: 78 MB).
  Status build_ae_table() {
    const int64_t n_vocab = heads.token_embd.n_out, ne = config.n_embd, H = config.adapter_hidden;
    constexpr int64_t kChunk = 1024;
    DeviceBuffer& table = storage_.emplace_back();
    SALVO_RETURN_IF_ERROR(table.reserve(static_cast<size_t>(n_vocab * H) * sizeof(uint16_t)));
    DeviceBuffer ids, emb, out, q, meta;
    SALVO_RETURN_IF_ERROR(ids.reserve(kChunk * sizeof(int32_t)));
    SALVO_RETURN_IF_ERROR(emb.reserve(kChunk * ne * sizeof(float)));
    SALVO_RETURN_IF_ERROR(out.reserve(kChunk * H * sizeof(float)));
    SALVO_RETURN_IF_ERROR(q.reserve(kChunk * ne));
    SALVO_RETURN_IF_ERROR(meta.reserve((kChunk * ne / 32 + kChunk) * sizeof(Q8Meta)));
    cudaStream_t stream = nullptr;
    SALVO_RETURN_IF_ERROR(cuda_status(cudaStreamCreate(&stream), "cudaStreamCreate"));
    Status st = matmul_prepare(stream);
    std::vector<int32_t> host(kChunk);
    for (int64_t v0 = 0; st.ok() && v0 < n_vocab; v0 += kChunk) {
      const int64_t n = std::min(kChunk, n_vocab - v0);
      for (int64_t i = 0; i < n; ++i) host[i] = static_cast<int32_t>(v0 + i);
      // Synchronous: host is rewritten by the next chunk.
      st = cuda_status(
          cudaMemcpy(ids.get(), host.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice),
          "adapter table ids");
      if (!st.ok()) break;
      embed(heads.token_embd.type, heads.token_embd.w, ne, ids.get<int32_t>(), n, emb.get<float>(),
            stream);
      linear(a_e, emb.get<float>(), static_cast<int>(n), out.get<float>(),
             {q.get<int8_t>(), meta.get<Q8Meta>()}, stream);
      to_fp16(out.get<float>(), n * H, table.get<uint16_t>() + v0 * H, stream);
      st = cuda_status(cudaStreamSynchronize(stream), "adapter table");
    }
    matmul_release(stream);
    cudaStreamDestroy(stream);
    ae_table = table.get<uint16_t>();
    return st;
  }
  Status upload_bytes(const void* host, size_t bytes, const void** device) {
    DeviceBuffer& buf = storage_.emplace_back();
    SALVO_RETURN_IF_ERROR(buf.reserve(bytes));
    SALVO_RETURN_IF_ERROR(
        cuda_status(cudaMemcpy(buf.get(), host, bytes, cudaMemcpyHostToDevice), "drafter upload"));
    *device = buf.get();
    return Status();
  }
  Status upload_vector(const std::vector<float>& v, const float** device) {
    const void* d = nullptr;
    SALVO_RETURN_IF_ERROR(upload_bytes(v.data(), v.size() * sizeof(float), &d));
    *device = static_cast<const float*>(d);
    return Status();
  }
  // The layers' matrices and fc (`compact`) go to the device as Q8_0, read by the int8
  // tensor-core kernel: as F16 through the float kernel they took ~0.45 ms of a 1.1 ms draft pass
  // (2 layers, 16 rows, H200 session 10). The CPU drafter keeps F16; the drafts differ by Q8_0's
  // rounding (cuda_dflash_test bounds the log-probabilities' error), which verification makes
  // harmless: the text is the target's either way. SALVO_DFLASH_CUDA_F16=1 keeps F16. The
  // adapter's F32 matrices go the same way: through the float kernel, which re-read every parent
  // row's input from L2 for each output row, they took 66 us of a ~0.5 ms draft pass (a_e and b
  // over 57 parents; H200, session 26's ncu).
  //
  // By default (dflash_half_layers) the layers' matrices go as Q6_K packed for kHalf, the
  // target's fp16 tensor-core kernels, whose 16-row tiles read each weight once (session 36's
  // ncu: the int8 kernel's 16-row launches of a layer took 58 us for its 19.6 MB, 0.34 TB/s, 40%
  // of the draft pass; session 37 on the H200: draft 0.409 -> 0.32 ms, code 2060 -> 2188 tok/s).
  // The rounding through Q6_K left tokens a pass as they were on the CPU (SALVO_DFLASH_Q6K, 16
  // code prompts: 3.653 against 3.636 in F16, same text) and on the H200 (3.62 either way).
  Status upload_matrix(const WeightView& w, bool compact, MatmulParams* p, bool half = false) {
    if (w.n_in % 16 != 0) {
      return Status::error("drafter matrix with " + std::to_string(w.n_in) +
                           " columns has no CUDA kernel (a multiple of 16 is needed)");
    }
    if (w.type != DType::kF16 && w.type != DType::kF32) {
      return Status::error("drafter matrices are F16 or F32 in memory");
    }
    p->n_out = w.n_out;
    p->n_in = w.n_in;
    const size_t n = static_cast<size_t>(w.n_out) * w.n_in;
    if (!compact) {
      p->type = w.type;
      return upload_bytes(w.data, n * (w.type == DType::kF32 ? sizeof(float) : sizeof(uint16_t)),
                          &p->w);
    }
    if (half && half_supported(DType::kQ6_K, w.n_out, w.n_in)) return upload_half(w, p);
    if (w.type == DType::kF16 && (keep_f16() || w.n_in % 32 != 0)) {
      p->type = DType::kF16;
      return upload_bytes(w.data, n * sizeof(uint16_t), &p->w);
    }
    std::vector<float> row(w.n_in);
    std::vector<uint16_t> f16;
    std::vector<BlockQ8_0> q8;
    const bool to_q8 = !keep_f16() && w.n_in % 32 == 0;
    if (to_q8) {
      q8.resize(n / 32);
    } else {
      f16.resize(n);
    }
    for (int64_t r = 0; r < w.n_out; ++r) {
      row_of(w, r, row.data());
      if (to_q8) {
        cpu::quantize_row_q8_0(row.data(), q8.data() + r * (w.n_in / 32), w.n_in);
      } else {
        for (int64_t i = 0; i < w.n_in; ++i) f16[r * w.n_in + i] = fp32_to_fp16(row[i]);
      }
    }
    p->type = to_q8 ? DType::kQ8_0 : DType::kF16;
    return to_q8 ? upload_bytes(q8.data(), q8.size() * sizeof(BlockQ8_0), &p->w)
                 : upload_bytes(f16.data(), f16.size() * sizeof(uint16_t), &p->w);
  }
  // Row r of an F16 or F32 matrix as floats.
  static void row_of(const WeightView& w, int64_t r, float* row) {
    for (int64_t i = 0; i < w.n_in; ++i) {
      const size_t at = static_cast<size_t>(r) * w.n_in + i;
      row[i] = w.type == DType::kF16 ? fp16_to_fp32(static_cast<const uint16_t*>(w.data)[at])
                                     : static_cast<const float*>(w.data)[at];
    }
  }
  static std::vector<BlockQ6_K> q6k_blocks(const WeightView& w) {
    const int64_t per_row = w.n_in / kQKK;
    std::vector<BlockQ6_K> blocks(static_cast<size_t>(w.n_out * per_row));
    std::vector<float> row(w.n_in);
    for (int64_t r = 0; r < w.n_out; ++r) {
      row_of(w, r, row.data());
      quantize_row_q6_k(row.data(), blocks.data() + r * per_row, w.n_in);
    }
    return blocks;
  }
  Status upload_half(const WeightView& w, MatmulParams* p) {
    const std::vector<uint8_t> packed =
        pack_half_weights(DType::kQ6_K, q6k_blocks(w).data(), w.n_out, w.n_in, &p->half_scale);
    p->type = DType::kQ6_K;
    p->variant = MatmulVariant::kHalf;
    return upload_bytes(packed.data(), packed.size(), &p->w);
  }
  // gate and up [n_ff, n_in] through Q6_K as one gated kHalf matrix (pack_half_gated).
  Status upload_gated(const WeightView& gate, const WeightView& up, MatmulParams* p) {
    const std::vector<uint8_t> packed =
        pack_half_gated(DType::kQ6_K, q6k_blocks(gate).data(), q6k_blocks(up).data(), gate.n_out,
                        gate.n_in, &p->half_scale);
    p->type = DType::kQ6_K;
    p->n_out = 2 * gate.n_out;
    p->n_in = gate.n_in;
    p->variant = MatmulVariant::kHalf;
    p->gated = true;
    return upload_bytes(packed.data(), packed.size(), &p->w);
  }
  static bool keep_f16() {
    static const bool keep = env_int("SALVO_DFLASH_CUDA_F16", 0) != 0;
    return keep;
  }

  std::vector<DeviceBuffer> storage_;
};

class DeviceDflashRunner : public DflashRunner {
 public:
  explicit DeviceDflashRunner(std::shared_ptr<const DeviceDflash> d) : d_(std::move(d)) {
    use_graph_ = env_on("SALVO_CUDA_GRAPHS");
  }
  ~DeviceDflashRunner() override {
    clear_graphs();
    if (stream_ != nullptr) {
      matmul_release(stream_);
      cudaStreamDestroy(stream_);
    }
  }

  Status init() {
    const DflashConfig& c = d_->config;
    const size_t f = sizeof(float);
    // Buffers for the widest pass (kMaxTopCandidates a depth).
    const size_t B = c.block_size, D = c.max_depth(), K = max_k();
    const size_t n_parents = this->n_parents(static_cast<int>(D), static_cast<int>(K));
    const size_t n_vocab = d_->heads.output.n_out;
    SALVO_RETURN_IF_ERROR(cuda_status(cudaStreamCreate(&stream_), "cudaStreamCreate"));
    SALVO_RETURN_IF_ERROR(matmul_prepare(stream_));  // before the draft pass's graph capture
    SALVO_RETURN_IF_ERROR(x_init_.reserve(B * c.n_embd * f));
    SALVO_RETURN_IF_ERROR(x_.reserve(B * c.n_embd * f));
    SALVO_RETURN_IF_ERROR(h_.reserve(B * c.n_embd * f));
    SALVO_RETURN_IF_ERROR(y_.reserve(B * c.n_embd * f));
    SALVO_RETURN_IF_ERROR(q_.reserve(B * c.n_head * c.head_dim * f));
    SALVO_RETURN_IF_ERROR(attn_.reserve(B * c.n_head * c.head_dim * f));
    SALVO_RETURN_IF_ERROR(kb_.reserve(B * c.kv_width() * f));
    SALVO_RETURN_IF_ERROR(vb_.reserve(B * c.kv_width() * f));
    SALVO_RETURN_IF_ERROR(gate_.reserve(B * c.n_ff * f));
    SALVO_RETURN_IF_ERROR(up_.reserve(B * c.n_ff * f));
    SALVO_RETURN_IF_ERROR(logits_.reserve(D * n_vocab * f));
    const size_t xq_values = B * std::max<size_t>(c.n_embd, c.n_ff);
    SALVO_RETURN_IF_ERROR(xq_.reserve(xq_values));
    if (dflash_half_layers()) {  // the fp16 fragments of the layers' matmul inputs
      const size_t width = static_cast<size_t>(std::max({c.n_embd, c.n_ff, c.n_head * c.head_dim}));
      SALVO_RETURN_IF_ERROR(xh_.reserve(half_frag_rows(B) * width * sizeof(uint16_t)));
      // The gated launch writes the down projection's fragments while it reads its own.
      if (!d_->layers.empty() && d_->layers[0].ffn.fused.shape.w != nullptr) {
        SALVO_RETURN_IF_ERROR(xh_out_.reserve(half_frag_rows(B) * c.n_ff * sizeof(uint16_t)));
      }
    }
    SALVO_RETURN_IF_ERROR(xq_meta_.reserve((xq_values / 32 + B) * sizeof(Q8Meta)));
    // [root, committed, positions[B], slots[B], seq ids[B], subtree ends[B]]
    SALVO_RETURN_IF_ERROR(meta_.reserve((2 + 4 * B) * sizeof(int32_t)));
    SALVO_RETURN_IF_ERROR(meta_host_.reserve((2 + 4 * B) * sizeof(int32_t)));
    // [root, candidates[D][K]]: the parents of the adapter rows, then the candidates.
    SALVO_RETURN_IF_ERROR(ids_.reserve((1 + D * K) * sizeof(int32_t)));
    SALVO_RETURN_IF_ERROR(logprobs_.reserve(D * K * f));
    SALVO_RETURN_IF_ERROR(top_scratch_.reserve(top_candidates_scratch_bytes(D)));
    if (d_->heads.output_half.w != nullptr || d_->ranked_head.variant == MatmulVariant::kHalf) {
      // The LM head's fp16 fragments; rows past a pass's depths stay as they are (their
      // outputs are not written), so zeros from the start.
      const size_t bytes = half_frag_rows(static_cast<int64_t>(D)) * c.n_embd * sizeof(uint16_t);
      SALVO_RETURN_IF_ERROR(head_h_.reserve(bytes));
      SALVO_RETURN_IF_ERROR(cuda_status(cudaMemset(head_h_.get(), 0, bytes), "drafter head"));
    }
    if (c.has_adapter()) {
      const size_t H = c.adapter_hidden;
      SALVO_RETURN_IF_ERROR(ah_.reserve(D * H * f));
      SALVO_RETURN_IF_ERROR(ae_.reserve(n_parents * H * f));
      SALVO_RETURN_IF_ERROR(bu_.reserve(n_parents * c.n_embd * f));
      SALVO_RETURN_IF_ERROR(cand_rows_.reserve(D * K * c.n_embd * f));
      SALVO_RETURN_IF_ERROR(scores_.reserve(n_parents * K * f));
      // The int8 form of the adapter's inputs: the depths' y, silu(...).
      const size_t values = std::max(D * c.n_embd, n_parents * H);
      SALVO_RETURN_IF_ERROR(adapter_xq_.reserve(values));
      SALVO_RETURN_IF_ERROR(adapter_xq_meta_.reserve((values / 32 + n_parents) * sizeof(Q8Meta)));
    }
    // Host copies: ids, log-probabilities, scores.
    SALVO_RETURN_IF_ERROR(out_host_.reserve(((1 + D * K) + D * K + n_parents * K) * 4));
    // The block's input rows 1..B-1 are the mask embedding; row 0 is written per draft.
    for (size_t j = 1; j < B; ++j) {
      SALVO_RETURN_IF_ERROR(
          cuda_status(cudaMemcpy(x_init_.get<float>() + j * c.n_embd, d_->mask_embd, c.n_embd * f,
                                 cudaMemcpyDeviceToDevice),
                      "drafter mask rows"));
    }
    return ensure_capacity(256);
  }

  int32_t n_positions() const override { return n_positions_; }
  int32_t ranked_rows() const override {
    return d_->ranked_head.w != nullptr ? static_cast<int32_t>(d_->ranked_head.n_out) : 0;
  }
  int max_width() const override { return max_k(); }

  Status observe(int32_t first, int32_t n, const float* features) override {
    const DflashConfig& c = d_->config;
    if (first < 0 || first > n_positions_) {
      return Status::error("drafter context has " + std::to_string(n_positions_) +
                           " positions; cannot append at " + std::to_string(first));
    }
    n_positions_ = first;
    if (n <= 0) return Status();
    SALVO_RETURN_IF_ERROR(ensure_capacity(first + n + c.block_size));
    const size_t f = sizeof(float), rows = n;
    SALVO_RETURN_IF_ERROR(obs_features_.reserve(rows * c.feature_width() * f));
    SALVO_RETURN_IF_ERROR(obs_c_.reserve(rows * c.n_embd * f));
    SALVO_RETURN_IF_ERROR(obs_k_.reserve(rows * c.kv_width() * f));
    SALVO_RETURN_IF_ERROR(obs_v_.reserve(rows * c.kv_width() * f));
    SALVO_RETURN_IF_ERROR(obs_meta_.reserve(3 * rows * sizeof(int32_t)));
    const size_t obs_xq_values = rows * std::max<size_t>(c.feature_width(), c.n_embd);
    SALVO_RETURN_IF_ERROR(obs_xq_.reserve(obs_xq_values));
    SALVO_RETURN_IF_ERROR(obs_xq_meta_.reserve((obs_xq_values / 32 + rows) * sizeof(Q8Meta)));
    if (dflash_half_layers()) {
      SALVO_RETURN_IF_ERROR(obs_xh_.reserve(half_frag_rows(n) * c.n_embd * sizeof(uint16_t)));
    }
    // [positions[n], slots[n], seq ids[n]]: slot i holds position i.
    std::vector<int32_t> meta(3 * rows, 0);
    for (int32_t i = 0; i < n; ++i) meta[i] = meta[n + i] = first + i;
    // Pageable sources: each copy returns once its bytes are staged, so they may go now.
    SALVO_CUDA_CHECK(cudaMemcpyAsync(obs_features_.get(), features, rows * c.feature_width() * f,
                                     cudaMemcpyHostToDevice, stream_));
    SALVO_CUDA_CHECK(cudaMemcpyAsync(obs_meta_.get(), meta.data(), meta.size() * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, stream_));
    const int32_t* positions = obs_meta_.get<int32_t>();
    const BatchView bv{.n_rows = n,
                       .seq = positions + 2 * n,
                       .pos = positions,
                       .slot = positions + n,
                       .subtree_end = nullptr,
                       .committed = nullptr};
    float* cx = obs_c_.get<float>();
    // c = RMSNorm(fc F) * hidden_norm: [n, n_embd]; per layer, context K/V skip attn_norm, so
    // every layer's K/V matmuls (one launch a layer) read the int8 form of c the norm writes.
    const Q8Buffer xq{obs_xq_.get<int8_t>(), obs_xq_meta_.get<Q8Meta>(), obs_xh_.get<uint16_t>()};
    linear(d_->fc, obs_features_.get<float>(), n, cx, xq, stream_);
    const DeviceDflashLayer& l0 = d_->layers[0];
    const Q8Out cq = q8_for(xq, n, {&l0.k, &l0.v});
    rms_norm_q8(cx, nullptr, d_->hidden_norm, cx, n, c.n_embd, c.rms_eps, cq, stream_);
    for (int il = 0; il < c.n_layer; ++il) {
      const DeviceDflashLayer& l = d_->layers[il];
      float *k = obs_k_.get<float>(), *v = obs_v_.get<float>();
      linears({{&l.k, k}, {&l.v, v}}, cx, as_rows(cq), n, stream_);
      if (fused_qk_norms()) {
        rope_store_kv({.batch = bv,
                       .kv = layer_view(il),
                       .k = k,
                       .v = v,
                       .n_head = 0,
                       .n_head_kv = c.n_head_kv,
                       .head_dim = c.head_dim,
                       .n_rot = c.head_dim,
                       .base = c.rope_base,
                       .mode = RopeMode::kRopeNeox,
                       .k_norm = l.k_norm,
                       .norm_eps = c.rms_eps},
                      stream_);
        continue;
      }
      rms_norm(k, l.k_norm, k, static_cast<int64_t>(n) * c.n_head_kv, c.head_dim, c.rms_eps,
               stream_);
      rope(k, positions, n, c.n_head_kv, c.head_dim, c.head_dim, c.rope_base, RopeMode::kRopeNeox,
           stream_);
      store_kv(bv, layer_view(il), k, v, stream_);
    }
    SALVO_CUDA_CHECK(cudaGetLastError());
    n_positions_ = first + n;
    return Status();
  }

  void draft(int32_t root, int depth, int width, int32_t n_tokens,
             std::vector<Candidates>& depths) override {
    const DflashConfig& c = d_->config;
    // Two widths a pass, each its own graph: the small trees' top_k (the adapter's) and, for
    // the wide lists of large trees (DflashDrafter::kWideCandidates), kMaxTopCandidates.
    const int B = c.block_size, D = c.max_depth(), K = width <= d_->top_k ? d_->top_k : max_k();
    SALVO_CHECK(depth >= 1 && depth <= D && width >= 1 && width <= max_k());
    const Status st = ensure_capacity(n_positions_ + B);
    SALVO_CHECK_MSG(st.ok(), st.message().c_str());
    int32_t* m = meta_host_.get<int32_t>();
    m[0] = root;
    m[1] = n_positions_;
    for (int j = 0; j < B; ++j) {
      m[2 + j] = m[2 + B + j] = n_positions_ + j;
      m[2 + 2 * B + j] = 0;
      m[2 + 3 * B + j] = B - 1;
    }
    SALVO_CUDA_CHECK(cudaMemcpyAsync(meta_.get(), m, (2 + 4 * B) * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, stream_));
    // The LM head, the top-k and the adapter's rows grow with the depths computed: a pass asked
    // for at most kShallowDepths (an 8-row mma tile; the default 7-node trees) computes that
    // many, a deeper one all; a pass to fewer depths than DflashConfig::kShortBlock runs the
    // short block (block_rows), and its head the block's depths. So two graphs (three with
    // SALVO_DFLASH_FULL_BLOCK=1), not one per depth: each capture costs a few ms, which
    // SpecPolicy would take for the drafter's cost at that depth. The depths computed name the
    // block: 7 the short one, 8 and 15 the whole one.
    const int block = c.block_rows(depth);
    const int rows = std::min(block - 1, depth <= kShallowDepths ? kShallowDepths : D);
    if (!use_graph_) {
      enqueue_draft(n_tokens, block, rows, K);
    } else {
      // A graph per vocabulary and width too: by default small and large trees draft different
      // ids and widths (DflashDrafter::kLargeTree), and --spec auto may alternate them.
      const std::pair<int32_t, int> key{n_tokens, K};
      auto at = std::find_if(graphs_.begin(), graphs_.end(),
                             [&](const auto& g) { return g.first == key; });
      if (at == graphs_.end()) at = graphs_.insert(graphs_.end(), {key, {}});
      at->second.resize(D + 1, nullptr);
      cudaGraphExec_t& exec = at->second[rows];
      if (exec == nullptr) {
        cudaGraph_t graph;
        SALVO_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        enqueue_draft(n_tokens, block, rows, K);
        SALVO_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        SALVO_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        cudaGraphDestroy(graph);
      }
      SALVO_CUDA_CHECK(cudaGraphLaunch(exec, stream_));
    }
    // The outputs keep the layout of D depths; only the first `depth` are filled and copied.
    const size_t n_ids = 1 + static_cast<size_t>(D) * K, n_lp = static_cast<size_t>(depth) * K;
    const size_t n_scores = c.has_adapter() ? static_cast<size_t>(n_parents(depth, K)) * K : 0;
    const size_t lp_at = n_ids * 4, scores_at = (n_ids + static_cast<size_t>(D) * K) * 4;
    uint8_t* out = out_host_.get<uint8_t>();
    const size_t ids_bytes = (1 + static_cast<size_t>(depth) * K) * 4;
    SALVO_CUDA_CHECK(cudaMemcpyAsync(out, ids_.get(), ids_bytes, cudaMemcpyDeviceToHost, stream_));
    SALVO_CUDA_CHECK(
        cudaMemcpyAsync(out + lp_at, logprobs_.get(), n_lp * 4, cudaMemcpyDeviceToHost, stream_));
    if (n_scores > 0) {
      SALVO_CUDA_CHECK(cudaMemcpyAsync(out + scores_at, scores_.get(), n_scores * 4,
                                       cudaMemcpyDeviceToHost, stream_));
    }
    drafted_depth_ = depth;
    drafted_k_ = K;
    SALVO_CUDA_CHECK(cudaStreamSynchronize(stream_));
    const int32_t* ids = reinterpret_cast<const int32_t*>(out) + 1;
    const float* logprobs = reinterpret_cast<const float*>(out + lp_at);
    depths.resize(depth);
    for (int d = 0; d < depth; ++d) {
      Candidates& cd = depths[d];
      cd.tokens.clear();
      cd.logprobs.clear();
      for (int i = 0; i < width && logprobs[d * K + i] != -INFINITY; ++i) {
        cd.tokens.push_back(ids[d * K + i]);
        cd.logprobs.push_back(logprobs[d * K + i]);
      }
    }
  }

  void adapter_scores(int depth, int32_t prev, std::span<const int32_t> candidates,
                      float* scores) override {
    const DflashConfig& c = d_->config;
    const int D = c.max_depth(), K = drafted_k_;
    SALVO_CHECK(c.has_adapter() && depth >= 1 && depth <= drafted_depth_ &&
                static_cast<int>(candidates.size()) <= K);
    const int32_t* ids = out_host_.get<int32_t>() + 1;  // [D][K]
    const float* all_scores =
        reinterpret_cast<const float*>(out_host_.get<int32_t>() + 1 + 2 * D * K);
    int row = 0;  // the parent's row: the root, or its rank among depth - 1's candidates
    if (depth > 1) {
      const int32_t* parents = ids + (depth - 2) * K;
      const int rank = static_cast<int>(std::find(parents, parents + K, prev) - parents);
      SALVO_CHECK_MSG(rank < K, "adapter parent is not a candidate of the depth above");
      row = 1 + (depth - 2) * K + rank;
    }
    for (size_t i = 0; i < candidates.size(); ++i) {
      SALVO_CHECK(candidates[i] == ids[(depth - 1) * K + i]);
      scores[i] = all_scores[static_cast<size_t>(row) * K + i];
    }
  }

 private:
  static constexpr int kShallowDepths = 8;
  int max_k() const { return std::max(d_->top_k, kMaxTopCandidates); }
  // Adapter rows for a pass to `depth` with k candidates a depth: the root and the candidates
  // of depths 1..depth - 1.
  static int n_parents(int depth, int k) { return 1 + (depth - 1) * k; }

  void clear_graphs() {
    for (auto& [key, execs] : graphs_) {
      for (cudaGraphExec_t exec : execs) {
        if (exec != nullptr) cudaGraphExecDestroy(exec);
      }
    }
    graphs_.clear();
  }

  KvLayerView layer_view(int il) const {
    const int w = d_->config.kv_width();
    return {.k = k_[il].get<uint16_t>(),
            .v = v_[il].get<uint16_t>(),
            .capacity = capacity_,
            .k_width = w,
            .v_width = w};
  }

  // Room for `slots` context rows (the committed positions and a block behind them); growing
  // keeps the held positions and invalidates the captured graph.
  Status ensure_capacity(int slots) {
    if (slots <= capacity_) return Status();
    const DflashConfig& c = d_->config;
    const int capacity = std::max(slots, 2 * capacity_);
    const size_t row = static_cast<size_t>(c.kv_width()) * sizeof(uint16_t);
    std::vector<DeviceBuffer> k(c.n_layer), v(c.n_layer);
    for (int il = 0; il < c.n_layer; ++il) {
      SALVO_RETURN_IF_ERROR(k[il].reserve(capacity * row));
      SALVO_RETURN_IF_ERROR(v[il].reserve(capacity * row));
      if (n_positions_ > 0) {
        SALVO_CUDA_CHECK(cudaMemcpyAsync(k[il].get(), k_[il].get(), n_positions_ * row,
                                         cudaMemcpyDeviceToDevice, stream_));
        SALVO_CUDA_CHECK(cudaMemcpyAsync(v[il].get(), v_[il].get(), n_positions_ * row,
                                         cudaMemcpyDeviceToDevice, stream_));
      }
    }
    SALVO_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(stream_), "drafter context copy"));
    k_.swap(k);
    v_.swap(v);
    capacity_ = capacity;
    SALVO_RETURN_IF_ERROR(
        partial_.reserve(attention_scratch_bytes(c.block_size, c.n_head, capacity_, c.head_dim)));
    SALVO_RETURN_IF_ERROR(
        counts_.reserve(static_cast<size_t>(c.block_size) * c.n_head * sizeof(int)));
    clear_graphs();
    return Status();
  }

  // Every kernel of a draft pass to `depth` with K candidates a depth (captured into a graph).
  // Reads meta_: root, committed count, and the block rows' positions, slots, sequence ids and
  // subtree ends. As in the target's pass, each norm or activation writes the int8 form of its
  // output for the matmuls that read it (Q/K/V and gate/up one launch each), and h carries a
  // block's output into the next norm's residual add.
  void enqueue_draft(int32_t n_tokens, int block, int depth, int K) {
    const DflashConfig& c = d_->config;
    // B: the block's rows this pass (DflashConfig::block_rows); meta_ keeps the layout of all
    // block_size rows.
    const int B = block, Bm = c.block_size, ne = c.n_embd;
    const int32_t* meta = meta_.get<int32_t>();
    const int32_t* positions = meta + 2;
    const BatchView bv{.n_rows = B,
                       .seq = meta + 2 + 2 * Bm,
                       .pos = positions,
                       .slot = meta + 2 + Bm,
                       .subtree_end = meta + 2 + 3 * Bm,
                       .committed = meta + 1};
    float *x = x_.get<float>(), *h = h_.get<float>(), *q = q_.get<float>(), *k = kb_.get<float>(),
          *v = vb_.get<float>(), *attn = attn_.get<float>(), *gate = gate_.get<float>(),
          *up = up_.get<float>(), *y = y_.get<float>();
    const Q8Buffer xq{xq_.get<int8_t>(), xq_meta_.get<Q8Meta>(), xh_.get<uint16_t>(),
                      xh_out_.get<uint16_t>()};
    auto q8 = [&](int n, std::initializer_list<const DeviceLinear*> users) {
      return q8_for(xq, n, users);
    };
    // x: [B, n_embd] = [E(root), mask, ..., mask]
    SALVO_CUDA_CHECK(cudaMemcpyAsync(x, x_init_.get(), static_cast<size_t>(B) * ne * sizeof(float),
                                     cudaMemcpyDeviceToDevice, stream_));
    embed(d_->heads.token_embd.type, d_->heads.token_embd.w, ne, meta, 1, x, stream_);
    for (int il = 0; il < c.n_layer; ++il) {
      const DeviceDflashLayer& l = d_->layers[il];
      const Q8Out hq = q8(B, {&l.q, &l.k, &l.v});
      rms_norm_q8(x, il == 0 ? nullptr : h, l.attn_norm, h, B, ne, c.rms_eps, hq, stream_);
      // q: [B, n_head * head_dim], k and v: [B, n_head_kv * head_dim]
      linears({{&l.q, q}, {&l.k, k}, {&l.v, v}}, h, as_rows(hq), B, stream_);
      const bool fused = fused_qk_norms();
      if (!fused) {
        rms_norm(q, l.q_norm, q, static_cast<int64_t>(B) * c.n_head, c.head_dim, c.rms_eps,
                 stream_);
        rms_norm(k, l.k_norm, k, static_cast<int64_t>(B) * c.n_head_kv, c.head_dim, c.rms_eps,
                 stream_);
      }
      // The block's K/V sit behind the context (overwritten by the next observe).
      const KvLayerView kvl = layer_view(il);
      rope_store_kv({.batch = bv,
                     .kv = kvl,
                     .q = q,
                     .k = k,
                     .v = v,
                     .n_head = c.n_head,
                     .n_head_kv = c.n_head_kv,
                     .head_dim = c.head_dim,
                     .n_rot = c.head_dim,
                     .base = c.rope_base,
                     .mode = RopeMode::kRopeNeox,
                     .q_norm = fused ? l.q_norm : nullptr,
                     .k_norm = fused ? l.k_norm : nullptr,
                     .norm_eps = c.rms_eps},
                    stream_);
      const Q8Out aq = c.head_dim % 32 == 0 ? q8(B, {&l.o}) : Q8Out{};
      attention({.batch = bv,
                 .kv = kvl,
                 .q = q,
                 .out = attn,
                 .n_head = c.n_head,
                 .n_head_kv = c.n_head_kv,
                 .head_dim = c.head_dim,
                 .head_dim_v = c.head_dim,
                 .scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                 .window = 0,
                 .block_visible = true,
                 .partial = partial_.get<float>(),
                 .split_counts = counts_.get<int>(),
                 .out_q8 = aq},
                stream_);
      if (aq.q != nullptr || aq.h != nullptr) {
        linears({{&l.o, h}}, attn, as_rows(aq), B, stream_);
      } else {
        linear(l.o, attn, B, h, xq, stream_);
      }
      const Q8Out fq = q8_for_ffn(xq, B, l.ffn);
      rms_norm_q8(x, h, l.ffn_norm, h, B, ne, c.rms_eps, fq, stream_);  // x += attention
      const Q8Out gq = q8_out_for(xq, B, {&l.down});
      gated_ffn(GatedAct::kSilu, l.ffn, gate, up, h, as_rows(fq), B, c.n_ff, gq, stream_);
      linears({{&l.down, h}}, gate, as_rows(gq), B, stream_);
    }
    // Depths 1..depth: y rows 1..depth = RMSNorm(x + h) (row 0, the root, has no logits), and
    // the LM head reads its weights once for all of them: the target's kHalf copy where it has
    // one (the norm writes its fp16 fragments), whose tiles are rows in order, so the first
    // n_tokens are a prefix. On the H200 (session 36's ncu, 7 depths of the first 65,536 rows
    // of the 1.5B's Q6_K head) the int8 GEMV of the row-major copy took 56 us.
    // A ranked head's first n_tokens rows are the best-ranked ids (top_candidates maps them).
    const bool ranked = d_->ranked_head.w != nullptr && n_tokens <= d_->ranked_head.n_out;
    const MatmulParams& shape = ranked                               ? d_->ranked_head
                                : d_->heads.output_half.w != nullptr ? d_->heads.output_half
                                                                     : d_->heads.output;
    const bool half_head = shape.variant == MatmulVariant::kHalf;
    const DeviceLinear head{.shape = shape};
    const Q8Out yq = half_head ? Q8Out{.h = head_h_.get<uint16_t>()} : q8(depth, {&head});
    rms_norm_q8(x + ne, h + ne, d_->output_norm, y + ne, depth, ne, c.rms_eps, yq, stream_);
    MatmulParams p = head.shape;  // ids below n_tokens: the head's first rows
    p.n_out = std::min<int64_t>(p.n_out, n_tokens);
    p.x = y + ne;
    p.xq = as_rows(yq);
    p.n_rows = depth;
    p.y = logits_.get<float>();
    if (yq.q == nullptr && yq.h == nullptr) {
      linear({.shape = p}, y + ne, depth, logits_.get<float>(), xq, stream_);
    } else {
      matmul(p, stream_);
    }
    int32_t* ids = ids_.get<int32_t>();  // [root, candidates[D][K]]
    top_candidates(logits_.get<float>(), depth, static_cast<int>(p.n_out), n_tokens, K, ids + 1,
                   logprobs_.get<float>(), top_scratch_.get(), stream_,
                   ranked ? d_->ranked_ids : nullptr);
    if (c.has_adapter()) {
      // u = y_d + b silu(a_h y_d + a_e E(parent)) for each parent row (the root and depths
      // 1..depth-1's candidates, which are contiguous behind it in ids; a_e E from the table),
      // scored against the child depth's candidates' LM head rows.
      const int R = n_parents(depth, K), H = c.adapter_hidden;
      SALVO_CUDA_CHECK(
          cudaMemcpyAsync(ids, meta, sizeof(int32_t), cudaMemcpyDeviceToDevice, stream_));
      const Q8Buffer aq{adapter_xq_.get<int8_t>(), adapter_xq_meta_.get<Q8Meta>()};
      linear(d_->a_h, y + ne, depth, ah_.get<float>(), aq, stream_);
      adapter_activation(ah_.get<float>(), d_->ae_table, ids, ae_.get<float>(), R, H, K, stream_);
      linear(d_->b, ae_.get<float>(), R, bu_.get<float>(), aq, stream_);
      embed(d_->heads.output.type, d_->heads.output.w, ne, ids + 1, static_cast<int64_t>(depth) * K,
            cand_rows_.get<float>(), stream_);
      ::salvo::cuda::adapter_scores(y, bu_.get<float>(), cand_rows_.get<float>(), R, ne, K,
                                    scores_.get<float>(), stream_);
    }
    SALVO_CUDA_CHECK(cudaGetLastError());
  }

  std::shared_ptr<const DeviceDflash> d_;
  cudaStream_t stream_ = nullptr;
  bool use_graph_ = true;
  // Per vocabulary (ids drafted) and candidates a depth: the graphs by depths computed.
  std::vector<std::pair<std::pair<int32_t, int>, std::vector<cudaGraphExec_t>>> graphs_;
  int drafted_depth_ = 0;  // depths the last draft copied back
  int drafted_k_ = 0;      // and its candidates a depth
  int32_t n_positions_ = 0;
  int capacity_ = 0;
  std::vector<DeviceBuffer> k_, v_;  // per layer: [capacity, kv_width]
  DeviceBuffer partial_, counts_;
  // The draft pass.
  DeviceBuffer x_init_, x_, h_, y_, q_, attn_, kb_, vb_, gate_, up_, logits_, meta_, ids_,
      logprobs_, top_scratch_;
  DeviceBuffer head_h_;  // the LM head's input as fp16 fragments (a kHalf head)
  DeviceBuffer ah_, ae_, bu_, cand_rows_, scores_;  // the adapter
  DeviceBuffer adapter_xq_, adapter_xq_meta_;
  DeviceBuffer xq_, xq_meta_;  // int8 form of an integer-kernel matmul's input
  DeviceBuffer xh_, obs_xh_;   // its fp16 fragments, for kHalf layers (SALVO_DFLASH_CUDA_HALF)
  DeviceBuffer xh_out_;        // the gated launch's fragments for the down projection
  PinnedBuffer meta_host_, out_host_;
  // observe().
  DeviceBuffer obs_features_, obs_c_, obs_k_, obs_v_, obs_meta_, obs_xq_, obs_xq_meta_;
};

Expected<std::unique_ptr<DflashRunner>> DeviceDflash::new_runner() const {
  auto runner = std::make_unique<DeviceDflashRunner>(shared_from_this());
  SALVO_RETURN_IF_ERROR(runner->init());
  return std::unique_ptr<DflashRunner>(std::move(runner));
}

}  // namespace

Expected<std::shared_ptr<const DflashDevice>> dflash_to_device(const DflashModel& drafter,
                                                               const Model& target) {
  const DeviceHeads* heads = device_heads(target);
  if (heads == nullptr) {
    return Status::error("the DFlash drafter runs on CUDA only beside a target placed there");
  }
  auto device = std::make_shared<DeviceDflash>();
  SALVO_RETURN_IF_ERROR(device->upload(drafter, *heads));
  return std::shared_ptr<const DflashDevice>(std::move(device));
}

}  // namespace salvo::cuda
