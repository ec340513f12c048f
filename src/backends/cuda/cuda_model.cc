// CudaModel: the forward pass on the GPU (llama / qwen2 here, gemma3 behind a DevicePass in
// cuda_gemma3.cc). The weights of the loaded CPU model are uploaded once in their GGUF formats;
// activations are float32 on the device; K/V rows live in a device cache attached to the
// caller's KvCache as its mirror, so the session's commit() and truncate() keep working
// unchanged. A pass is one stream of kernel launches, captured as a CUDA graph per (rows, logit
// rows, cache, hidden layers) shape and replayed; the host waits once, for the logits (or, in
// greedy passes, their argmax ids) and the requested hidden states.
#include "backends/cuda/cuda_model.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/device_memory.h"
#include "backends/cuda/device_pass.h"
#include "backends/cuda/kernels.h"
#include "backends/cuda/knobs.h"
#include "models/gemma3.h"
#include "models/llama.h"

namespace salvo::cuda {

Status DeviceWeights::upload_tensor(const void* host, size_t bytes, const void** device) {
  DeviceBuffer& buf = buffers_.emplace_back();
  SALVO_RETURN_IF_ERROR(buf.reserve(bytes));
  SALVO_RETURN_IF_ERROR(
      cuda_status(cudaMemcpy(buf.get(), host, bytes, cudaMemcpyHostToDevice), "weight upload"));
  *device = buf.get();
  return Status();
}

Status DeviceWeights::upload_vector(const float* host, int64_t n, const float** device) {
  const void* d = nullptr;
  SALVO_RETURN_IF_ERROR(upload_tensor(host, n * sizeof(float), &d));
  *device = static_cast<const float*>(d);
  return Status();
}

namespace {
// SALVO_CUDA_TILED=0 keeps every matrix row-major (for A/B runs of the tiled layout).
bool tiling_enabled() {
  static const bool on = env_on("SALVO_CUDA_TILED");
  return on;
}
}  // namespace

Status DeviceWeights::upload_matrix(const WeightView& w, const float* bias, DeviceLinear* out,
                                    bool repack) {
  if (!weight_type_supported(w.type) || w.n_in % 16 != 0) {
    return Status::error("weight type " + std::string(traits(w.type).name) + " with " +
                         std::to_string(w.n_in) + " columns has no CUDA kernel");
  }
  MatmulParams& p = out->shape;
  p.type = w.type;
  p.n_out = w.n_out;
  p.n_in = w.n_in;
  // The layout the matrix's kernel reads: kHalf's packing for Q4_K / Q6_K (unless
  // SALVO_CUDA_HALF=0), else tile_weights()' for the integer kernels' k-quants.
  std::vector<uint8_t> packed;
  if (repack && half_enabled() && half_supported(w.type, w.n_out, w.n_in)) {
    p.variant = MatmulVariant::kHalf;
    packed = pack_half_weights(w.type, w.data, w.n_out, w.n_in, &p.half_scale);
  } else {
    p.tiled = repack && tiling_enabled() && tiled_layout_supported(w.type) &&
              variant_takes_q8(resolve_variant(MatmulVariant::kAuto, w.type));
    if (p.tiled) packed = tile_weights(w.type, w.data, w.n_out, w.n_in);
  }
  if (!packed.empty()) {
    SALVO_RETURN_IF_ERROR(upload_tensor(packed.data(), packed.size(), &p.w));
  } else {
    SALVO_RETURN_IF_ERROR(upload_tensor(w.data, row_bytes(w.type, w.n_in) * w.n_out, &p.w));
  }
  if (bias != nullptr) SALVO_RETURN_IF_ERROR(upload_vector(bias, w.n_out, &p.bias));
  return Status();
}

Status DeviceWeights::upload_gated(const WeightView& gate, const WeightView& up, bool down_half,
                                   DeviceGatedFfn* out) {
  static const bool fuse = env_on("SALVO_CUDA_FUSED_ACT");
  if (!fuse || !down_half || !half_enabled() || gate.type != up.type || gate.n_out != up.n_out ||
      gate.n_in != up.n_in || !half_gated_supported(gate.type, gate.n_out, gate.n_in)) {
    SALVO_RETURN_IF_ERROR(upload_matrix(gate, nullptr, &out->gate, true));
    return upload_matrix(up, nullptr, &out->up, true);
  }
  MatmulParams& p = out->fused.shape;
  p.type = gate.type;
  p.n_out = 2 * gate.n_out;
  p.n_in = gate.n_in;
  p.variant = MatmulVariant::kHalf;
  p.gated = true;
  const std::vector<uint8_t> packed =
      pack_half_gated(gate.type, gate.data, up.data, gate.n_out, gate.n_in, &p.half_scale);
  return upload_tensor(packed.data(), packed.size(), &p.w);
}

namespace {

bool half_head_enabled() {
  static const bool on = env_on("SALVO_CUDA_HALF_HEAD");
  return on;
}

// The attention launch of a pass of up to 64 rows asks P percent of the layer's gate/up weights
// (the fused kHalf matrix, from its first tile) into L2 before its wait, for the norm, Q/K/V,
// attention and output launches wait on latency while HBM idles; gate/up then reads those bytes
// from L2. P = SALVO_CUDA_FFN_PREFETCH, 8 by default (0: none). More bytes slow the latency chain
// they overlap. Session 64 on an H100 (random shapes; `salvo bench --device cuda -p 0 -n 128 -r 3
// --verify --verify-rows 1,16 --verify-context 512`, two alternations; the 7B has 85 MB of gate/up,
// the 1.5B 17 MB), P = 0 / 5 / 8 / 10 / 12 / 15: 7B tg128 384.1, 385.2 / 390.5, 388.8 / 390.8,
// 390.1 / 387.5, 386.8 / 387.9, 387.0 / 386.4, 385.6 tok/s; 1.5B 868.2, 889.8 / 892.5, 888.7 /
// 894.2, 851.5 (+-35) / 894.3, 889.7 / 895.1, 891.4 / 886.2, 876.3. 1- and 16-row passes, P = 0 /
// 5 / 8: 7B 2.607, 2.609 / 2.566, 2.558 / 2.578, 2.581 ms and 3.420, 3.468 / 3.430, 3.366 / 3.409,
// 3.399; 1.5B 1.218, 1.213 / 1.210, 1.210 / 1.217, 1.208 and 1.724, 1.722 / 1.718, 1.721 / 1.728,
// 1.720. Session 63: 38% of the 7B's and 47% of the 1.5B's lose (tg128 -1% and -3%).
int64_t ffn_prefetch_bytes(const DeviceGatedFfn& ffn, int n_rows) {
  static const int percent = std::clamp(env_int("SALVO_CUDA_FFN_PREFETCH", 8), 0, 100);
  const MatmulParams& w = ffn.fused.shape;
  if (percent == 0 || n_rows > 64 || w.w == nullptr) return 0;
  return (half_packed_bytes(w.type, w.n_out, w.n_in) * percent / 100) & ~int64_t{15};
}

// Q/K/V apply RoPE and store K/V in their own launch (HalfRole) unless SALVO_CUDA_FUSED_ROPE=0.
bool rope_fusion_enabled() {
  static const bool on = env_on("SALVO_CUDA_FUSED_ROPE");
  return on;
}

// The rows of w (and its bias) in rope_row_order's order: the host copies that upload reads.
struct PermutedRows {
  std::vector<uint8_t> data;
  std::vector<float> bias;
  WeightView view;
};
PermutedRows permute_rows(const WeightView& w, const float* bias, const std::vector<int>& order) {
  PermutedRows out;
  const size_t rb = row_bytes(w.type, w.n_in);
  out.data.resize(rb * order.size());
  for (size_t r = 0; r < order.size(); ++r) {
    std::memcpy(&out.data[r * rb], static_cast<const uint8_t*>(w.data) + order[r] * rb, rb);
  }
  if (bias != nullptr) {
    for (int src : order) out.bias.push_back(bias[src]);
  }
  out.view = {.type = w.type, .data = out.data.data(), .n_out = w.n_out, .n_in = w.n_in};
  return out;
}

struct DeviceLayer {
  const float* attn_norm = nullptr;
  DeviceLinear wq, wk, wv, wo;
  bool rope_fused = false;  // wq's and wk's rows in rope_row_order, HalfRole epilogues
  const float* ffn_norm = nullptr;
  DeviceGatedFfn ffn;
  DeviceLinear ffn_down;
};

// The device rows of one KvCache: [n_layer][n_seq][capacity][width] fp16 values for K and for V
// (KvLayerView).
class DeviceKvCache : public KvCacheMirror {
 public:
  DeviceKvCache(const void* owner, const ModelConfig& c, int n_seq, int capacity)
      : owner_(owner),
        n_layer_(c.n_layer),
        n_seq_(n_seq),
        capacity_(capacity),
        k_width_(c.kv_width()),
        v_width_(c.v_width()) {}

  Status allocate() {
    const size_t slots = static_cast<size_t>(n_layer_) * n_seq_ * capacity_;
    SALVO_RETURN_IF_ERROR(k_.reserve(slots * k_width_ * sizeof(uint16_t)));
    SALVO_RETURN_IF_ERROR(v_.reserve(slots * v_width_ * sizeof(uint16_t)));
    return moves_.reserve(2 * static_cast<size_t>(capacity_) * sizeof(int32_t));
  }

  const void* owner() const { return owner_; }
  KvLayerView layer(int il) const {
    const size_t layer_slots = static_cast<size_t>(n_seq_) * capacity_;
    return {.k = k_.get<uint16_t>() + il * layer_slots * k_width_,
            .v = v_.get<uint16_t>() + il * layer_slots * v_width_,
            .capacity = capacity_,
            .k_width = k_width_,
            .v_width = v_width_};
  }

  void commit(int seq, int base, std::span<const int32_t> accepted) override {
    std::vector<int32_t> moves;  // [from..., to...]
    std::vector<int32_t> to;
    for (size_t j = 0; j < accepted.size(); ++j) {
      const int32_t from_slot = base + accepted[j], to_slot = base + static_cast<int32_t>(j);
      if (from_slot == to_slot) continue;
      moves.push_back(from_slot);
      to.push_back(to_slot);
    }
    if (moves.empty()) return;
    const int n = static_cast<int>(to.size());
    moves.insert(moves.end(), to.begin(), to.end());
    // The legacy default stream orders this after the model's passes and before the next.
    SALVO_CUDA_CHECK(cudaMemcpy(moves_.get(), moves.data(), moves.size() * sizeof(int32_t),
                                cudaMemcpyHostToDevice));
    const size_t layer_slots = static_cast<size_t>(n_seq_) * capacity_;
    commit_kv(k_.get<uint16_t>() + seq * static_cast<size_t>(capacity_) * k_width_,
              v_.get<uint16_t>() + seq * static_cast<size_t>(capacity_) * v_width_,
              static_cast<int64_t>(layer_slots * k_width_),
              static_cast<int64_t>(layer_slots * v_width_), n_layer_, k_width_, v_width_,
              moves_.get<int32_t>(), moves_.get<int32_t>() + n, n, /*stream=*/0);
    SALVO_CUDA_CHECK(cudaGetLastError());
  }

 private:
  const void* owner_;
  int n_layer_, n_seq_, capacity_, k_width_, v_width_;
  DeviceBuffer k_, v_, moves_;
};

class CudaModel : public Model {
 public:
  const char* backend_name() const override { return "cuda"; }
  size_t peak_device_bytes() const override { return DeviceBytes::peak_bytes(); }
  bool last_pass_was_warmup() const override { return warmup_; }

  // The device token embedding and LM head, for a drafter that shares them.
  const DeviceHeads& heads() const { return heads_; }

  static Expected<std::unique_ptr<Model>> create(std::unique_ptr<Model> cpu_model) {
    const auto* llama = dynamic_cast<const LlamaModel*>(cpu_model.get());
    const auto* gemma3 = dynamic_cast<const Gemma3Model*>(cpu_model.get());
    if (llama == nullptr && gemma3 == nullptr) {
      return Status::error(
          "architecture '" + cpu_model->config().arch +
          "' has no CUDA forward pass yet (supported on CUDA: llama, qwen2, gemma3)");
    }
    std::unique_ptr<CudaModel> m(new CudaModel());
    m->share_file_and_config(*cpu_model);
    SALVO_RETURN_IF_ERROR(m->prepare_device());
    if (llama != nullptr) {
      SALVO_RETURN_IF_ERROR(m->upload(*llama));
    } else {
      SALVO_ASSIGN_OR_RETURN(m->arch_pass_, upload_gemma3(*gemma3, m->weights_));
    }
    m->use_graphs_ = env_on("SALVO_CUDA_GRAPHS");
    if (const char* skip = std::getenv("SALVO_CUDA_SKIP"); skip != nullptr && *skip != 0) {
      m->skip_ = skip;
      std::fprintf(stderr,
                   "[salvo] SALVO_CUDA_SKIP=%s: those kernels are left out of the llama pass "
                   "(profiling only: the outputs are wrong)\n",
                   skip);
    }
    return std::unique_ptr<Model>(std::move(m));
  }

  ~CudaModel() override {
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    if (stream_ != nullptr) {
      matmul_release(stream_);
      cudaStreamDestroy(stream_);
    }
  }

 protected:
  void forward_layers(ThreadPool&, const TokenBatch& batch, KvCache& kv, std::vector<float>& logits,
                      float* hidden) override {
    const int n_logits = batch.n_logit_rows();
    const size_t n_layers = launch_pass(batch, kv, hidden);
    const size_t n_out = static_cast<size_t>(n_logits) * config_.n_vocab;
    SALVO_CUDA_CHECK(cudaMemcpyAsync(logits_host_.get(), logits_.get(), n_out * sizeof(float),
                                     cudaMemcpyDeviceToHost, stream_));
    const size_t n_hidden = copy_hidden(batch.size(), n_layers);
    SALVO_CUDA_CHECK(cudaStreamSynchronize(stream_));
    logits.resize(n_out);
    std::memcpy(logits.data(), logits_host_.get(), n_out * sizeof(float));
    if (n_hidden > 0) std::memcpy(hidden, hidden_host_.get(), n_hidden * sizeof(float));
  }

  // Greedy passes: the argmax of each logit row on the device, and only the ids cross to the
  // host (a 16-row verification of a 151936-word vocabulary would otherwise copy 9.7 MB).
  void forward_layers_argmax(ThreadPool&, const TokenBatch& batch, KvCache& kv,
                             std::vector<int32_t>& ids, float* hidden) override {
    const int n_logits = batch.n_logit_rows();
    const size_t n_layers = launch_pass(batch, kv, hidden);
    argmax(logits_.get<float>(), n_logits, config_.n_vocab, argmax_.get<int32_t>(),
           argmax_scratch_.get(), argmax_scratch_.bytes(), stream_);
    SALVO_CUDA_CHECK(cudaGetLastError());
    SALVO_CUDA_CHECK(cudaMemcpyAsync(argmax_host_.get(), argmax_.get(), n_logits * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, stream_));
    const size_t n_hidden = copy_hidden(batch.size(), n_layers);
    SALVO_CUDA_CHECK(cudaStreamSynchronize(stream_));
    ids.assign(argmax_host_.get<int32_t>(), argmax_host_.get<int32_t>() + n_logits);
    if (n_hidden > 0) std::memcpy(hidden, hidden_host_.get(), n_hidden * sizeof(float));
  }

  // Sampling passes: each row's k largest logits are selected on the device and only those
  // cross (2k numbers a row instead of n_vocab).
  bool selects_top_logits() const override { return true; }
  void forward_layers_top(ThreadPool&, const TokenBatch& batch, KvCache& kv, int k,
                          std::vector<int32_t>& ids, std::vector<float>& values,
                          float* hidden) override {
    const int n_logits = batch.n_logit_rows();
    const size_t n_layers = launch_pass(batch, kv, hidden);
    const size_t n_top = static_cast<size_t>(n_logits) * k;
    const auto reserve = [](auto& buf, size_t bytes) {
      const Status st = buf.reserve(bytes);
      SALVO_CHECK_MSG(st.ok(), st.message().c_str());
    };
    reserve(top_ids_, n_top * sizeof(int32_t));
    reserve(top_values_, n_top * sizeof(float));
    reserve(top_ids_host_, n_top * sizeof(int32_t));
    reserve(top_values_host_, n_top * sizeof(float));
    reserve(top_scratch_, top_logits_scratch_bytes(n_logits, config_.n_vocab, k));
    top_logits(logits_.get<float>(), n_logits, config_.n_vocab, k, top_ids_.get<int32_t>(),
               top_values_.get<float>(), top_scratch_.get(), top_scratch_.bytes(), stream_);
    SALVO_CUDA_CHECK(cudaGetLastError());
    SALVO_CUDA_CHECK(cudaMemcpyAsync(top_ids_host_.get(), top_ids_.get(), n_top * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, stream_));
    SALVO_CUDA_CHECK(cudaMemcpyAsync(top_values_host_.get(), top_values_.get(),
                                     n_top * sizeof(float), cudaMemcpyDeviceToHost, stream_));
    const size_t n_hidden = copy_hidden(batch.size(), n_layers);
    SALVO_CUDA_CHECK(cudaStreamSynchronize(stream_));
    ids.assign(top_ids_host_.get<int32_t>(), top_ids_host_.get<int32_t>() + n_top);
    values.assign(top_values_host_.get<float>(), top_values_host_.get<float>() + n_top);
    if (n_hidden > 0) std::memcpy(hidden, hidden_host_.get(), n_hidden * sizeof(float));
  }

  // gemma3's DevicePass does not write hidden states (no DFlash drafter targets it).
  bool returns_hidden_states() const override { return arch_pass_ == nullptr; }

 private:
  CudaModel() = default;

  // Enqueues the copy of the pass's hidden states to the host; the number of floats copied.
  size_t copy_hidden(int n, size_t n_layers) {
    const size_t n_hidden = static_cast<size_t>(n) * n_layers * config_.n_embd;
    if (n_hidden > 0) {
      SALVO_CUDA_CHECK(cudaMemcpyAsync(hidden_host_.get(), hidden_.get(), n_hidden * sizeof(float),
                                       cudaMemcpyDeviceToHost, stream_));
    }
    return n_hidden;
  }

  // Uploads the batch and enqueues its pass (replaying the captured graph of its shape); the
  // logits are in logits_ and the hidden states in hidden_ once the stream gets there. Returns
  // the number of hidden layers the pass writes (none when `hidden` is null).
  size_t launch_pass(const TokenBatch& batch, KvCache& kv, float* hidden) {
    const int n = batch.size();
    const int n_logits = batch.n_logit_rows();
    // hidden is null when the batch asks for no layers (Model::forward).
    const std::vector<int32_t> no_layers;
    const std::vector<int32_t>& hidden_layers = hidden != nullptr ? batch.hidden_layers : no_layers;
    DeviceKvCache* dev_kv = attach_cache(kv);
    warmup_ = false;
    if (prepare_scratch(n, n_logits, kv.n_seq(), kv.capacity(), hidden_layers.size())) {
      clear_graphs();
      warmup_ = true;
    }
    upload_batch(batch, kv);

    if (use_graphs_) {
      const auto key =
          std::make_tuple(n, n_logits, static_cast<const void*>(dev_kv), hidden_layers);
      auto it = graphs_.find(key);
      if (it == graphs_.end()) {
        cudaGraph_t graph;
        warmup_ = true;
        SALVO_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        enqueue_pass(n, n_logits, kv.n_seq(), *dev_kv, hidden_layers);
        SALVO_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        cudaGraphExec_t exec;
        SALVO_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        cudaGraphDestroy(graph);
        it = graphs_.emplace(key, exec).first;
      }
      SALVO_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
    } else {
      enqueue_pass(n, n_logits, kv.n_seq(), *dev_kv, hidden_layers);
    }
    return hidden_layers.size();
  }

  // Checks what every architecture's pass needs of the device and the shapes; creates the stream.
  Status prepare_device() {
    const ModelConfig& c = config_;
    if (c.head_dim > 256 || c.head_dim_v > 256) {
      return Status::error("head size " + std::to_string(c.head_dim) +
                           " exceeds the CUDA attention kernel's 256");
    }
    SALVO_RETURN_IF_ERROR(check_available());
    SALVO_RETURN_IF_ERROR(cuda_status(cudaStreamCreate(&stream_), "cudaStreamCreate"));
    return matmul_prepare(stream_);  // before any graph capture on the stream
  }

  // Layer matrices (repacked where their kernels read another layout; the token embedding and
  // the LM head stay row-major: the embedding lookup and the drafters read their rows).
  Status upload_matrix(const WeightView& w, const float* bias, DeviceLinear* out,
                       bool repack = true) {
    return weights_.upload_matrix(w, bias, out, repack);
  }
  Status upload_vector(const float* host, int64_t n, const float** device) {
    return weights_.upload_vector(host, n, device);
  }

  Status upload(const LlamaModel& cpu) {
    const ModelConfig& c = config_;
    SALVO_RETURN_IF_ERROR(upload_matrix(cpu.token_embd(), nullptr, &token_embd_, false));
    if (cpu.output().data == cpu.token_embd().data) {
      output_ = token_embd_;
    } else {
      SALVO_RETURN_IF_ERROR(upload_matrix(cpu.output(), nullptr, &output_, false));
    }
    SALVO_RETURN_IF_ERROR(upload_vector(cpu.output_norm(), c.n_embd, &output_norm_));
    heads_ = {.token_embd = token_embd_.shape, .output = output_.shape, .output_half = {}};
    // A second copy of the LM head in kHalf's layout for the logits (SALVO_CUDA_HALF_HEAD=0: none),
    // the row-major one kept for the embedding lookup and the drafters. A kHalf matmul reads
    // 8-16 rows at ~1.3x a row where the int8 kernel of the row-major copy takes 2-3x. Session 30
    // on the H200 (salvo bench --verify, random shapes, with / without): 1.5B tg128 816, 808 /
    // 784, 795 tok/s, 64 rows 5.39 / 5.48 ms; 7B 16 rows 4.56 / 4.96 ms, 64 rows 11.1 / 12.5.
    // It costs the head's bytes again (the 1.5B: ~200 MB; the 7B: ~450 MB).
    const MatmulParams& o = output_.shape;
    if (half_head_enabled() && half_enabled() && half_supported(o.type, o.n_out, o.n_in)) {
      SALVO_RETURN_IF_ERROR(upload_matrix(cpu.output(), nullptr, &output_half_, true));
      heads_.output_half = output_half_.shape;
    }
    const bool rope_rows =
        rope_fusion_enabled() && half_enabled() && rope_rows_supported(c.head_dim, c.n_rot);
    const bool neox = c.rope_mode == RopeMode::kRopeNeox;
    const std::vector<int> q_order =
        rope_rows ? rope_row_order(c.n_head, c.head_dim, c.n_rot, neox) : std::vector<int>{};
    const std::vector<int> k_order =
        rope_rows ? rope_row_order(c.n_head_kv, c.head_dim, c.n_rot, neox) : std::vector<int>{};
    for (const LlamaLayer& l : cpu.layers()) {
      DeviceLayer& d = layers_.emplace_back();
      SALVO_RETURN_IF_ERROR(upload_vector(l.attn_norm, c.n_embd, &d.attn_norm));
      d.rope_fused = rope_rows &&
                     half_supported(l.wq.weight.type, l.wq.weight.n_out, l.wq.weight.n_in) &&
                     half_supported(l.wk.weight.type, l.wk.weight.n_out, l.wk.weight.n_in) &&
                     half_supported(l.wv.weight.type, l.wv.weight.n_out, l.wv.weight.n_in);
      if (d.rope_fused) {
        const PermutedRows q = permute_rows(l.wq.weight, l.wq.bias, q_order);
        const PermutedRows k = permute_rows(l.wk.weight, l.wk.bias, k_order);
        SALVO_RETURN_IF_ERROR(
            upload_matrix(q.view, q.bias.empty() ? nullptr : q.bias.data(), &d.wq));
        SALVO_RETURN_IF_ERROR(
            upload_matrix(k.view, k.bias.empty() ? nullptr : k.bias.data(), &d.wk));
      } else {
        SALVO_RETURN_IF_ERROR(upload_matrix(l.wq.weight, l.wq.bias, &d.wq));
        SALVO_RETURN_IF_ERROR(upload_matrix(l.wk.weight, l.wk.bias, &d.wk));
      }
      SALVO_RETURN_IF_ERROR(upload_matrix(l.wv.weight, l.wv.bias, &d.wv));
      SALVO_RETURN_IF_ERROR(upload_matrix(l.wo.weight, l.wo.bias, &d.wo));
      SALVO_RETURN_IF_ERROR(upload_vector(l.ffn_norm, c.n_embd, &d.ffn_norm));
      SALVO_RETURN_IF_ERROR(upload_matrix(l.ffn_down.weight, nullptr, &d.ffn_down));
      SALVO_RETURN_IF_ERROR(
          weights_.upload_gated(l.ffn_gate.weight, l.ffn_up.weight,
                                variant_of(d.ffn_down.shape) == MatmulVariant::kHalf, &d.ffn));
    }
    return Status();
  }

  DeviceKvCache* attach_cache(KvCache& kv) {
    auto* dev = dynamic_cast<DeviceKvCache*>(kv.mirror());
    if (dev == nullptr || dev->owner() != this) {
      auto fresh = std::make_unique<DeviceKvCache>(this, config_, kv.n_seq(), kv.capacity());
      const Status st = fresh->allocate();
      SALVO_CHECK_MSG(st.ok(), st.message().c_str());
      dev = fresh.get();
      kv.set_mirror(std::move(fresh));
      clear_graphs();  // a graph holds the old cache's pointers (and may hold a reused address)
    }
    return dev;
  }

  // Sizes the activation buffers; true when any moved (the captured graphs are then stale).
  bool prepare_scratch(int n, int n_logits, int n_seq, int capacity, size_t n_hidden_layers) {
    const ModelConfig& c = config_;
    const size_t rows = static_cast<size_t>(n);
    const size_t f = sizeof(float);
    bool moved = false;
    auto grow = [&](auto& buf, size_t bytes) {
      const void* before = buf.get();
      const Status st = buf.reserve(bytes);
      SALVO_CHECK_MSG(st.ok(), st.message().c_str());
      moved |= buf.get() != before;
    };
    grow(x_, rows * c.n_embd * f);
    grow(h_, rows * c.n_embd * f);
    grow(q_, rows * c.q_width() * f);
    grow(k_, rows * c.kv_width() * f);
    grow(v_, rows * c.v_width() * f);
    grow(attn_, rows * c.n_head * c.head_dim_v * f);
    grow(gate_, rows * c.n_ff * f);
    grow(up_, rows * c.n_ff * f);
    grow(attn_partial_, attention_scratch_bytes(n, c.n_head, capacity, c.head_dim_v));
    grow(attn_counts_, rows * c.n_head * sizeof(int));
    grow(logit_rows_, static_cast<size_t>(n_logits) * c.n_embd * f);
    grow(logits_, static_cast<size_t>(n_logits) * c.n_vocab * f);
    grow(logits_host_, static_cast<size_t>(n_logits) * c.n_vocab * f);
    if (n_hidden_layers > 0) {
      grow(hidden_, rows * n_hidden_layers * c.n_embd * f);
      grow(hidden_host_, rows * n_hidden_layers * c.n_embd * f);
    }
    grow(argmax_, static_cast<size_t>(n_logits) * sizeof(int32_t));
    grow(argmax_scratch_, argmax_scratch_bytes(n_logits));
    grow(argmax_host_, static_cast<size_t>(n_logits) * sizeof(int32_t));
    // tokens, positions, seq ids, slots, subtree ends, logit rows: n each; committed: n_seq;
    // each row's committed count: n.
    // One int8 copy of the current matmul input (the widest is n_ff or the attention output).
    const size_t widest = std::max<size_t>({static_cast<size_t>(c.n_embd),
                                            static_cast<size_t>(c.n_head) * c.head_dim_v,
                                            static_cast<size_t>(c.n_ff)});
    grow(xq_, rows * widest);
    grow(xq_meta_, rows * (widest / 32 + 1) * sizeof(Q8Meta));
    grow(xh_, half_frag_rows(n) * widest * sizeof(uint16_t));
    grow(xh_out_, half_frag_rows(n) * widest * sizeof(uint16_t));
    grow(meta_, (7 * rows + n_seq) * sizeof(int32_t));
    grow(meta_host_, (7 * rows + n_seq) * sizeof(int32_t));
    return moved;
  }

  void upload_batch(const TokenBatch& batch, const KvCache& kv) {
    const int n = batch.size();
    int32_t* m = meta_host_.get<int32_t>();
    std::memcpy(m, batch.tokens.data(), n * sizeof(int32_t));
    std::memcpy(m + n, batch.positions.data(), n * sizeof(int32_t));
    std::memcpy(m + 2 * n, batch.seq_ids.data(), n * sizeof(int32_t));
    std::vector<int32_t> rows_in_seq(kv.n_seq(), 0);
    int n_logits = 0;
    for (int r = 0; r < n; ++r) {
      const int seq = batch.seq_ids[r];
      m[3 * n + r] = kv.committed(seq) + rows_in_seq[seq]++;  // slot behind the committed rows
      m[4 * n + r] = batch.subtree_end[r];
      if (batch.want_logits[r]) m[5 * n + n_logits++] = r;
      m[6 * n + kv.n_seq() + r] = kv.committed(seq);
    }
    for (int s = 0; s < kv.n_seq(); ++s) m[6 * n + s] = kv.committed(s);
    // The layout is fixed by n (and n_seq), so a captured graph's pointers stay valid.
    SALVO_CUDA_CHECK(cudaMemcpyAsync(meta_.get(), m, (7 * n + kv.n_seq()) * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, stream_));
  }

  Q8Buffer xq_buffer() {
    return {xq_.get<int8_t>(), xq_meta_.get<Q8Meta>(), xh_.get<uint16_t>(),
            xh_out_.get<uint16_t>()};
  }
  Q8Out q8_for(int n, std::initializer_list<const DeviceLinear*> users) {
    return cuda::q8_for(xq_buffer(), n, users);
  }

  // Quantizes x [n, width] once for the linears that read it (where no fused op did).
  Q8Rows quantize_input(const float* x, int n, int64_t width,
                        std::initializer_list<const DeviceLinear*> users) {
    const Q8Out q = q8_for(n, users);
    if (q.q != nullptr) quantize_rows(x, n, width, q.q, q.meta, q.meta_stride, stream_);
    if (q.h != nullptr) half_frags(x, n, width, q.h, stream_);
    return as_rows(q);
  }

  void linear(const DeviceLinear& l, const float* x, const Q8Rows& xq, int n, float* y) {
    MatmulParams p = l.shape;
    p.x = x;
    p.xq = xq;
    p.n_rows = n;
    p.y = y;
    matmul(p, stream_);
  }

  // The pass of an architecture behind a DevicePass, on this model's buffers.
  void enqueue_arch_pass(int n, int n_logits, int n_seq, const DeviceKvCache& dev_kv) {
    const int32_t* meta = meta_.get<int32_t>();
    std::vector<KvLayerView> kv(config_.n_layer);
    for (int il = 0; il < config_.n_layer; ++il) kv[il] = dev_kv.layer(il);
    arch_pass_->enqueue({.n = n,
                         .n_logits = n_logits,
                         .tokens = meta,
                         .positions = meta + n,
                         .logit_rows = meta + 5 * n,
                         .batch = {.n_rows = n,
                                   .seq = meta + 2 * n,
                                   .pos = meta + n,
                                   .slot = meta + 3 * n,
                                   .subtree_end = meta + 4 * n,
                                   .committed = meta + 6 * n,
                                   .row_committed = meta + 6 * n + n_seq},
                         .kv = kv,
                         .x = x_.get<float>(),
                         .h = h_.get<float>(),
                         .q = q_.get<float>(),
                         .k = k_.get<float>(),
                         .v = v_.get<float>(),
                         .attn = attn_.get<float>(),
                         .gate = gate_.get<float>(),
                         .up = up_.get<float>(),
                         .attn_partial = attn_partial_.get<float>(),
                         .attn_counts = attn_counts_.get<int>(),
                         .logit_x = logit_rows_.get<float>(),
                         .logits = logits_.get<float>(),
                         .xq = xq_buffer()},
                        stream_);
    SALVO_CUDA_CHECK(cudaGetLastError());
  }

  // Every kernel of one pass, on stream_ (captured into a graph or run directly).
  void enqueue_pass(int n, int n_logits, int n_seq, const DeviceKvCache& dev_kv,
                    const std::vector<int32_t>& hidden_layers) {
    if (arch_pass_) return enqueue_arch_pass(n, n_logits, n_seq, dev_kv);
    const ModelConfig& c = config_;
    const int32_t* meta = meta_.get<int32_t>();
    const int32_t* tokens = meta;
    const int32_t* positions = meta + n;
    const BatchView bv{.n_rows = n,
                       .seq = meta + 2 * n,
                       .pos = positions,
                       .slot = meta + 3 * n,
                       .subtree_end = meta + 4 * n,
                       .committed = meta + 6 * n,
                       .row_committed = meta + 6 * n + n_seq};
    const int32_t* logit_rows = meta + 5 * n;
    float *x = x_.get<float>(), *h = h_.get<float>(), *q = q_.get<float>(), *k = k_.get<float>(),
          *v = v_.get<float>(), *attn = attn_.get<float>(), *gate = gate_.get<float>(),
          *up = up_.get<float>();
    const int64_t ne = static_cast<int64_t>(n) * c.n_embd;

    embed(token_embd_.shape.type, token_embd_.shape.w, c.n_embd, tokens, n, x, stream_);
    for (int il = 0; il < c.n_layer; ++il) {
      const DeviceLayer& l = layers_[il];
      const KvLayerView kvl = dev_kv.layer(il);
      // Attention block. h holds the previous block's output: its residual add is fused here,
      // and so is the int8 form of the norm's output that the Q/K/V matmuls read.
      const Q8Out hq = q8_for(n, {&l.wq, &l.wk, &l.wv});
      if (runs("norm")) {
        rms_norm_q8(x, il == 0 ? nullptr : h, l.attn_norm, h, n, c.n_embd, c.rms_eps, hq, stream_);
      }
      // RoPE and the K/V store happen in the Q/K/V launches' epilogues (up to 16 rows,
      // SALVO_CUDA_ROPE_ROWS; wider passes get Q and K in the heads' order for rope_store_kv).
      const bool rope_done = l.rope_fused && rope_in_epilogue(n);
      if (l.rope_fused) {
        const RopeEpilogue re{.batch = bv,
                              .kv = kvl,
                              .head_dim = c.head_dim,
                              .n_rot = c.n_rot,
                              .theta_scale = rope_theta_scale(c.rope_base, c.n_rot),
                              .neox = c.rope_mode == RopeMode::kRopeNeox,
                              .rotate = rope_done};
        if (runs("qkv")) {
          rope_linears({{&l.wq, q, HalfRole::kRopeQ},
                        {&l.wk, k, HalfRole::kRopeK},
                        {&l.wv, v, HalfRole::kStoreV}},
                       h, as_rows(hq), n, re, stream_);
        }
      } else if (runs("qkv")) {
        cuda::linears({{&l.wq, q}, {&l.wk, k}, {&l.wv, v}}, h, as_rows(hq), n, stream_);
      }
      if (!rope_done && runs("rope")) {
        rope_store_kv({.batch = bv,
                       .kv = kvl,
                       .q = q,
                       .k = k,
                       .v = v,
                       .n_head = c.n_head,
                       .n_head_kv = c.n_head_kv,
                       .head_dim = c.head_dim,
                       .n_rot = c.n_rot,
                       .base = c.rope_base,
                       .mode = c.rope_mode},
                      stream_);
      }
      const Q8Out aq = c.head_dim_v % 32 == 0 ? q8_for(n, {&l.wo}) : Q8Out{};
      if (runs("attn")) {
        attention({.batch = bv,
                   .kv = kvl,
                   .q = q,
                   .out = attn,
                   .n_head = c.n_head,
                   .n_head_kv = c.n_head_kv,
                   .head_dim = c.head_dim,
                   .head_dim_v = c.head_dim_v,
                   .scale = c.attn_scale,
                   .window = 0,
                   .partial = attn_partial_.get<float>(),
                   .split_counts = attn_counts_.get<int>(),
                   .out_q8 = aq,
                   .l2_prefetch = l.ffn.fused.shape.w,
                   .l2_prefetch_bytes = ffn_prefetch_bytes(l.ffn, n)},
                  stream_);
      }
      const Q8Rows aq_rows = aq.q != nullptr || aq.h != nullptr
                                 ? as_rows(aq)
                                 : quantize_input(attn, n, c.n_head * c.head_dim_v, {&l.wo});
      if (runs("wo")) linear(l.wo, attn, aq_rows, n, h);
      // Feed-forward block (SwiGLU), after x += h.
      const Q8Out fq = q8_for_ffn(xq_buffer(), n, l.ffn);
      if (runs("norm")) rms_norm_q8(x, h, l.ffn_norm, h, n, c.n_embd, c.rms_eps, fq, stream_);
      const Q8Out gq = q8_out_for(xq_buffer(), n, {&l.ffn_down});
      if (runs("gateup")) {  // with the activation
        gated_ffn(GatedAct::kSilu, l.ffn, gate, up, h, as_rows(fq), n, c.n_ff, gq, stream_);
      }
      if (runs("down")) linear(l.ffn_down, gate, as_rows(gq), n, h);
      // The block's output is x + h (the next block's norm adds them): [n, slots, n_embd].
      for (size_t slot = 0; slot < hidden_layers.size(); ++slot) {
        if (hidden_layers[slot] != il) continue;
        store_hidden(x, h, n, c.n_embd, static_cast<int>(slot),
                     static_cast<int>(hidden_layers.size()), hidden_.get<float>(), stream_);
      }
    }
    // Only the rows whose logits are read go through the LM head.
    float* lr = logit_rows_.get<float>();
    const DeviceLinear& head = output_half_.shape.w != nullptr ? output_half_ : output_;
    const Q8Out lq = q8_for(n_logits, {&head});
    if (n_logits == n) {
      // Every row (decode and verification passes: logit_rows is 0..n-1): the norm adds the
      // last block's residual itself, with the bits of the add, gather and norm it replaces.
      rms_norm_q8(x, h, output_norm_, lr, n, c.n_embd, c.rms_eps, lq, stream_);
    } else {
      add(x, h, ne, stream_);  // the last block's residual
      gather_rows(x, logit_rows, n_logits, c.n_embd, lr, stream_);
      rms_norm_q8(lr, nullptr, output_norm_, lr, n_logits, c.n_embd, c.rms_eps, lq, stream_);
    }
    if (runs("head")) linear(head, lr, as_rows(lq), n_logits, logits_.get<float>());
    SALVO_CUDA_CHECK(cudaGetLastError());
  }

  void clear_graphs() {
    for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
    graphs_.clear();
  }

  cudaStream_t stream_ = nullptr;
  DeviceWeights weights_;
  std::unique_ptr<DevicePass> arch_pass_;  // null: the llama pass below
  DeviceLinear token_embd_, output_;
  DeviceLinear output_half_;  // the LM head in kHalf's layout (unless SALVO_CUDA_HALF_HEAD=0)
  const float* output_norm_ = nullptr;
  std::vector<DeviceLayer> layers_;
  DeviceHeads heads_;
  DeviceBuffer x_, h_, q_, k_, v_, attn_, attn_partial_, gate_, up_, logit_rows_, logits_, meta_;
  DeviceBuffer hidden_;        // [n, hidden layers, n_embd]
  DeviceBuffer xq_, xq_meta_;  // the int8 form of the current matmul input
  DeviceBuffer xh_;            // its fp16 fragments (kHalf)
  DeviceBuffer xh_out_;        // the gated activation's fragments (Q8Buffer::h_out)
  DeviceBuffer argmax_;        // [n_logits] ids of forward_layers_argmax
  DeviceBuffer argmax_scratch_;
  DeviceBuffer top_ids_, top_values_;  // [n_logits, k] of forward_layers_top (outside the graphs)
  DeviceBuffer top_scratch_;
  DeviceBuffer attn_counts_;  // attention's split counts, [n, n_head], 0 between passes
  PinnedBuffer logits_host_, meta_host_, hidden_host_, argmax_host_, top_ids_host_,
      top_values_host_;
  bool use_graphs_ = true;
  bool warmup_ = false;  // the last pass captured a graph or grew the scratch
  // SALVO_CUDA_SKIP: kernel classes left out of the llama pass, comma-separated (norm, qkv, rope,
  // attn, wo, gateup (with the activation), down, head). A graph step's time minus the time without
  // a class is what that class costs in the pipeline (with PDL overlap), which ncu's
  // one-kernel-at-a-time durations are not (attention: 21 us a layer in the step, 11 alone).
  // Profiling only.
  std::string skip_;
  bool runs(const char* kernels) const { return skip_.find(kernels) == std::string::npos; }
  std::map<std::tuple<int, int, const void*, std::vector<int32_t>>, cudaGraphExec_t> graphs_;
};

}  // namespace

Status check_available() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    return Status::error(std::string("no usable CUDA device (") +
                         (err != cudaSuccess ? cudaGetErrorString(err) : "none found") +
                         "); use --device cpu");
  }
  return Status();
}

Expected<std::unique_ptr<Model>> to_device(std::unique_ptr<Model> cpu_model) {
  return CudaModel::create(std::move(cpu_model));
}

const DeviceHeads* device_heads(const Model& model) {
  const auto* cuda_model = dynamic_cast<const CudaModel*>(&model);
  return cuda_model != nullptr ? &cuda_model->heads() : nullptr;
}

}  // namespace salvo::cuda
