#include "models/layers.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/packed.h"
#include "ops/vec.h"

namespace salvo {

const GgufTensorInfo* TensorBinder::find(const std::string& name) {
  const GgufTensorInfo* info = gguf_.find_tensor(name);
  if (info == nullptr && status_.ok()) {
    status_ = Status::error("tensor '" + name + "' is missing");
  }
  return info;
}

WeightView TensorBinder::matrix(const std::string& name, int64_t n_in, int64_t n_out) {
  WeightView view = bind_matrix(name, n_in, n_out);
  if (view.data == nullptr || view.packed != nullptr) return view;
  return packed_copy(view);
}

WeightView TensorBinder::table(const std::string& name, int64_t n_in, int64_t n_out) {
  return bind_matrix(name, n_in, n_out);
}

WeightView TensorBinder::packed_copy(const WeightView& view) {
  WeightView packed = view;
  if (packed_store_ == nullptr || view.data == nullptr || std::getenv("SALVO_NO_PACK") != nullptr ||
      !cpu::packable(view.type, view.n_out, view.n_in)) {
    return packed;
  }
  // The source pages leave the resident set slice by slice as they are packed: nothing reads
  // them again (embedding rows of a tied table come from the packed copy, ops::embed).
  packed_store_->push_back(cpu::pack_matrix(
      view, nullptr, [this](const void* p, size_t n) { gguf_.release_pages(p, n); }));
  packed.packed = packed_store_->back().get();
  return packed;
}

WeightView TensorBinder::bind_matrix(const std::string& name, int64_t n_in, int64_t n_out) {
  WeightView view;
  const GgufTensorInfo* info = find(name);
  if (info == nullptr) return view;
  if (info->dims.size() != 2 || info->dims[0] != n_in || info->dims[1] != n_out) {
    if (status_.ok()) {
      status_ = Status::error("tensor '" + name + "' has shape " + std::to_string(info->dims[0]) +
                              (info->dims.size() > 1 ? "x" + std::to_string(info->dims[1]) : "") +
                              ", expected " + std::to_string(n_in) + "x" + std::to_string(n_out));
    }
    return view;
  }
  view.type = info->type;
  view.data = gguf_.tensor_data(*info);
  view.n_in = n_in;
  view.n_out = n_out;
  bytes_bound_ += info->size_bytes;
  return view;
}

const float* TensorBinder::vector(const std::string& name, int64_t n) {
  const GgufTensorInfo* info = find(name);
  if (info == nullptr) return nullptr;
  if (info->type != DType::kF32 || info->n_elements != n) {
    if (status_.ok()) {
      status_ = Status::error("tensor '" + name + "' must be F32 with " + std::to_string(n) +
                              " elements, found " +
                              std::string(dtype_name(static_cast<uint32_t>(info->type))) +
                              " with " + std::to_string(info->n_elements));
    }
    return nullptr;
  }
  bytes_bound_ += info->size_bytes;
  const auto* data = reinterpret_cast<const float*>(gguf_.tensor_data(*info));
  if (packed_store_ == nullptr) return data;
  // Norm weights and biases are small and scattered between the matrices: reading them from
  // the mapping would fault back (with the kernel's fault-around) tens of KiB of released
  // matrix pages each, so the model keeps its own copy.
  auto copy = std::make_unique<uint8_t[]>(n * sizeof(float));
  std::memcpy(copy.get(), data, n * sizeof(float));
  packed_store_->push_back(std::move(copy));
  return reinterpret_cast<const float*>(packed_store_->back().get());
}

Linear TensorBinder::linear(const std::string& name, int64_t n_in, int64_t n_out, bool with_bias) {
  Linear l;
  l.weight = matrix(name + ".weight", n_in, n_out);
  if (with_bias) l.bias = vector(name + ".bias", n_out);
  return l;
}

void Scratch::prepare(const ModelConfig& c, const TokenBatch& batch, const KvCache& kv) {
  const size_t n = static_cast<size_t>(batch.size());
  x.resize(n * c.n_embd);
  h.resize(n * c.n_embd);
  q.resize(n * c.q_width());
  k.resize(n * c.kv_width());
  v.resize(n * c.v_width());
  attn.resize(n * c.n_head * c.head_dim_v);
  gate.resize(std::min<size_t>(n, kFfnRows) * c.n_ff);
  up.resize(std::min<size_t>(n, kFfnRows) * c.n_ff);
  layout.build(batch, kv);
}

void linear_forward(ThreadPool& pool, const Linear& l, const float* x, int64_t n_rows, float* y,
                    MatmulScratch& scratch) {
  matmul(pool, l.weight, x, n_rows, y, scratch);
  if (l.bias != nullptr) ops::add_bias(y, l.bias, n_rows, static_cast<int>(l.weight.n_out));
}

namespace {
void linear_forward_n(ThreadPool& pool, const Linear* const* ls, float* const* ys, int n,
                      const float* x, int64_t n_rows, MatmulScratch& scratch) {
  const WeightView* ws[3];
  for (int i = 0; i < n; ++i) ws[i] = &ls[i]->weight;
  matmul_multi(pool, ws, ys, n, x, n_rows, scratch);
  for (int i = 0; i < n; ++i) {
    if (ls[i]->bias != nullptr) {
      ops::add_bias(ys[i], ls[i]->bias, n_rows, static_cast<int>(ls[i]->weight.n_out));
    }
  }
}
}  // namespace

void linear_forward2(ThreadPool& pool, const Linear& l0, float* y0, const Linear& l1, float* y1,
                     const float* x, int64_t n_rows, MatmulScratch& scratch) {
  const Linear* ls[] = {&l0, &l1};
  float* ys[] = {y0, y1};
  linear_forward_n(pool, ls, ys, 2, x, n_rows, scratch);
}

void linear_forward3(ThreadPool& pool, const Linear& l0, float* y0, const Linear& l1, float* y1,
                     const Linear& l2, float* y2, const float* x, int64_t n_rows,
                     MatmulScratch& scratch) {
  const Linear* ls[] = {&l0, &l1, &l2};
  float* ys[] = {y0, y1, y2};
  linear_forward_n(pool, ls, ys, 3, x, n_rows, scratch);
}

void gated_ffn(ThreadPool& pool, const Linear& gate, const Linear& up, const Linear& down,
               GatedAct act, int64_t n, Scratch& s) {
  const int64_t n_embd = gate.weight.n_in, n_ff = gate.weight.n_out;
  for (int64_t r0 = 0; r0 < n; r0 += kFfnRows) {
    const int64_t m = std::min(kFfnRows, n - r0);
    float* h = s.h.data() + r0 * n_embd;
    linear_forward2(pool, gate, s.gate.data(), up, s.up.data(), h, m, s.matmul);
    if (act == GatedAct::kSilu) {
      ops::silu_mul(s.gate.data(), s.up.data(), m * n_ff);
    } else {
      ops::gelu_tanh_mul(s.gate.data(), s.up.data(), m * n_ff);
    }
    // Rows r0.. of h were read above; later rows are still the input of later passes.
    linear_forward(pool, down, s.gate.data(), m, h, s.matmul);
  }
}

void store_kv(KvCache& kv, int layer, const TokenBatch& batch, const ops::BatchLayout& layout,
              const float* k, const float* v) {
  const size_t kw = kv.key_width(), vw = kv.value_width();
  for (int32_t r = 0; r < batch.size(); ++r) {
    const int seq = batch.seq_ids[r];
    vec::to_f16(k + r * kw, kv.key(layer, seq, layout.slot[r]), static_cast<int>(kw));
    vec::to_f16(v + r * vw, kv.value(layer, seq, layout.slot[r]), static_cast<int>(vw));
  }
}

void rope_and_attend(ThreadPool& pool, const ModelConfig& c, int layer, const TokenBatch& batch,
                     KvCache& kv, Scratch& s, float rope_base, int window) {
  const int64_t n = batch.size();
  ops::rope(s.q.data(), batch.positions.data(), n, c.n_head, c.head_dim, c.n_rot, rope_base,
            c.rope_mode);
  ops::rope(s.k.data(), batch.positions.data(), n, c.n_head_kv, c.head_dim, c.n_rot, rope_base,
            c.rope_mode);
  store_kv(kv, layer, batch, s.layout, s.k.data(), s.v.data());
  ops::attention(pool, {.batch = &batch,
                        .layout = &s.layout,
                        .kv = &kv,
                        .layer = layer,
                        .q = s.q.data(),
                        .out = s.attn.data(),
                        .n_head = c.n_head,
                        .n_head_kv = c.n_head_kv,
                        .head_dim = c.head_dim,
                        .head_dim_v = c.head_dim_v,
                        .scale = c.attn_scale,
                        .window = window});
}

void capture_hidden(const TokenBatch& batch, int layer, const float* x, int n_embd, float* hidden) {
  if (hidden == nullptr) return;
  const size_t k = batch.hidden_layers.size();
  for (size_t slot = 0; slot < k; ++slot) {
    if (batch.hidden_layers[slot] != layer) continue;
    for (int32_t r = 0; r < batch.size(); ++r) {
      std::memcpy(hidden + (r * k + slot) * n_embd, x + static_cast<size_t>(r) * n_embd,
                  n_embd * sizeof(float));
    }
  }
}

void output_logits(ThreadPool& pool, const TokenBatch& batch, const float* x, int n_embd,
                   const float* norm, float eps, const WeightView& head, Scratch& s,
                   std::vector<float>& logits) {
  // Only the rows whose logits are read go through the LM head: in prefill that is one row.
  const int n_out = batch.n_logit_rows();
  s.logit_rows.resize(static_cast<size_t>(n_out) * n_embd);
  int j = 0;
  for (int32_t r = 0; r < batch.size(); ++r) {
    if (!batch.want_logits[r]) continue;
    std::memcpy(&s.logit_rows[static_cast<size_t>(j) * n_embd], x + static_cast<size_t>(r) * n_embd,
                n_embd * sizeof(float));
    ++j;
  }
  ops::rms_norm(s.logit_rows.data(), norm, s.logit_rows.data(), n_out, n_embd, eps);
  logits.resize(static_cast<size_t>(n_out) * head.n_out);
  matmul(pool, head, s.logit_rows.data(), n_out, logits.data(), s.matmul);
}

Status read_common_config(const GgufFile& gguf, ModelConfig& c) {
  const std::string& a = c.arch;
  auto need = [&](const std::string& key, int& out) -> Status {
    auto v = gguf.get_int(a + "." + key);
    if (!v.ok()) return v.status();
    if (*v <= 0 || *v > (1 << 24)) {
      return Status::error("metadata '" + a + "." + key + "' = " + std::to_string(*v) +
                           " is out of range");
    }
    out = static_cast<int>(*v);
    return Status();
  };
  SALVO_RETURN_IF_ERROR(need("block_count", c.n_layer));
  SALVO_RETURN_IF_ERROR(need("embedding_length", c.n_embd));
  SALVO_RETURN_IF_ERROR(need("feed_forward_length", c.n_ff));
  SALVO_RETURN_IF_ERROR(need("attention.head_count", c.n_head));
  c.n_head_kv = static_cast<int>(gguf.get_int_or(a + ".attention.head_count_kv", c.n_head));
  if (c.n_head_kv <= 0 || c.n_head % c.n_head_kv != 0) {
    return Status::error("attention.head_count_kv " + std::to_string(c.n_head_kv) +
                         " does not divide head_count " + std::to_string(c.n_head));
  }
  c.head_dim = static_cast<int>(gguf.get_int_or(a + ".attention.key_length", c.n_embd / c.n_head));
  c.head_dim_v = static_cast<int>(gguf.get_int_or(a + ".attention.value_length", c.head_dim));
  if (c.head_dim <= 0 || c.head_dim_v <= 0 || c.head_dim % 2 != 0) {
    return Status::error("invalid head size " + std::to_string(c.head_dim));
  }
  c.n_rot = static_cast<int>(gguf.get_int_or(a + ".rope.dimension_count", c.head_dim));
  if (c.n_rot <= 0 || c.n_rot > c.head_dim || c.n_rot % 2 != 0) {
    return Status::error("invalid rope.dimension_count " + std::to_string(c.n_rot));
  }
  c.n_ctx_train = static_cast<int>(gguf.get_int_or(a + ".context_length", 4096));
  c.rms_eps = static_cast<float>(gguf.get_float_or(a + ".attention.layer_norm_rms_epsilon", 1e-6));
  c.rope_base = static_cast<float>(gguf.get_float_or(a + ".rope.freq_base", 10000.0));
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  c.name = gguf.get_string_or("general.name", a);
  auto tokens = gguf.find("tokenizer.ggml.tokens");
  // The embedding table and the tokenizer are both sized by this list, so they always agree.
  if (tokens == nullptr || tokens->array_size() == 0) {
    return Status::error("metadata 'tokenizer.ggml.tokens' (the vocabulary) is missing or empty");
  }
  c.n_vocab = static_cast<int>(tokens->array_size());
  c.layer_sliding.assign(c.n_layer, 0);
  return Status();
}

}  // namespace salvo
