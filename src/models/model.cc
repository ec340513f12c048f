#include "models/model.h"

#include <algorithm>
#include <string>

#include "models/architectures.h"
#include "ops/ops.h"
#include "util/check.h"

namespace salvo {

Status Model::forward(ThreadPool& pool, const TokenBatch& batch, KvCache& kv,
                      std::vector<float>& logits, std::vector<float>* hidden) {
  float* hidden_rows = nullptr;
  SALVO_RETURN_IF_ERROR(prepare_pass(batch, kv, hidden, &hidden_rows));
  forward_layers(pool, batch, kv, logits, hidden_rows);
  return Status();
}

Status Model::forward_argmax(ThreadPool& pool, const TokenBatch& batch, KvCache& kv,
                             std::vector<int32_t>& argmax, std::vector<float>* hidden) {
  float* hidden_rows = nullptr;
  SALVO_RETURN_IF_ERROR(prepare_pass(batch, kv, hidden, &hidden_rows));
  forward_layers_argmax(pool, batch, kv, argmax, hidden_rows);
  SALVO_CHECK(argmax.size() == static_cast<size_t>(batch.n_logit_rows()));
  for (int32_t id : argmax) {
    SALVO_CHECK_MSG(id >= 0 && id < config_.n_vocab, "every logit of a row is -inf or NaN");
  }
  return Status();
}

void Model::forward_layers_argmax(ThreadPool& pool, const TokenBatch& batch, KvCache& kv,
                                  std::vector<int32_t>& argmax, float* hidden) {
  forward_layers(pool, batch, kv, argmax_logits_, hidden);
  const size_t n_vocab = static_cast<size_t>(config_.n_vocab);
  argmax.resize(argmax_logits_.size() / n_vocab);
  for (size_t r = 0; r < argmax.size(); ++r) {
    argmax[r] = ops::argmax(argmax_logits_.data() + r * n_vocab, config_.n_vocab);
  }
}

Status Model::forward_top(ThreadPool& pool, const TokenBatch& batch, KvCache& kv, int k,
                          std::vector<int32_t>& ids, std::vector<float>& values,
                          std::vector<float>* hidden) {
  if (k <= 0 || k > config_.n_vocab || k > kMaxTopLogits) {
    return Status::error("forward_top: k = " + std::to_string(k) + " is outside [1, " +
                         std::to_string(std::min(config_.n_vocab, kMaxTopLogits)) + "]");
  }
  float* hidden_rows = nullptr;
  SALVO_RETURN_IF_ERROR(prepare_pass(batch, kv, hidden, &hidden_rows));
  forward_layers_top(pool, batch, kv, k, ids, values, hidden_rows);
  const size_t n = static_cast<size_t>(batch.n_logit_rows()) * k;
  SALVO_CHECK(ids.size() == n && values.size() == n);
  for (int32_t id : ids)
    SALVO_CHECK_MSG(id >= 0 && id < config_.n_vocab, "top-logit id out of range");
  return Status();
}

void Model::forward_layers_top(ThreadPool& pool, const TokenBatch& batch, KvCache& kv, int k,
                               std::vector<int32_t>& ids, std::vector<float>& values,
                               float* hidden) {
  forward_layers(pool, batch, kv, argmax_logits_, hidden);
  const size_t n_vocab = static_cast<size_t>(config_.n_vocab);
  const size_t rows = argmax_logits_.size() / n_vocab;
  ids.resize(rows * k);
  values.resize(rows * k);
  for (size_t r = 0; r < rows; ++r) {
    ops::top_logits(argmax_logits_.data() + r * n_vocab, config_.n_vocab, k, ids.data() + r * k,
                    values.data() + r * k);
  }
}

Status Model::prepare_pass(const TokenBatch& batch, KvCache& kv, std::vector<float>* hidden,
                           float** hidden_rows) {
  *hidden_rows = nullptr;
  const int32_t n = batch.size();
  if (n == 0) return Status::error("empty batch");
  if (batch.positions.size() != static_cast<size_t>(n) ||
      batch.seq_ids.size() != static_cast<size_t>(n) ||
      batch.parents.size() != static_cast<size_t>(n) ||
      batch.subtree_end.size() != static_cast<size_t>(n) ||
      batch.want_logits.size() != static_cast<size_t>(n)) {
    return Status::error("malformed batch: field lengths differ");
  }
  if (!batch.hidden_layers.empty()) {
    if (hidden == nullptr) return Status::error("the batch asks for hidden states but no buffer");
    if (!returns_hidden_states()) {
      return Status::error(std::string("the ") + backend_name() +
                           " backend cannot return hidden states (needed by the DFlash drafter)");
    }
    for (int32_t layer : batch.hidden_layers) {
      if (layer < 0 || layer >= config_.n_layer) {
        return Status::error("hidden state of layer " + std::to_string(layer) +
                             " requested; the model has " + std::to_string(config_.n_layer));
      }
    }
    hidden->assign(static_cast<size_t>(n) * batch.hidden_layers.size() * config_.n_embd, 0.0f);
    *hidden_rows = hidden->data();
  }
  std::vector<int32_t> rows_per_seq(kv.n_seq(), 0);
  for (int32_t r = 0; r < n; ++r) {
    if (batch.tokens[r] < 0 || batch.tokens[r] >= config_.n_vocab) {
      return Status::error("token id " + std::to_string(batch.tokens[r]) + " at batch row " +
                           std::to_string(r) + " is outside the vocabulary of " +
                           std::to_string(config_.n_vocab));
    }
    const int32_t seq = batch.seq_ids[r];
    if (seq < 0 || seq >= kv.n_seq()) {
      return Status::error("sequence id " + std::to_string(seq) + " out of range");
    }
    if (batch.subtree_end[r] < r || batch.subtree_end[r] >= n || batch.parents[r] >= r) {
      return Status::error("malformed batch: row " + std::to_string(r) + " breaks DFS order");
    }
    ++rows_per_seq[seq];
  }
  for (int seq = 0; seq < kv.n_seq(); ++seq) {
    SALVO_RETURN_IF_ERROR(kv.reserve_suffix(seq, rows_per_seq[seq]));
  }
  return Status();
}

Expected<std::unique_ptr<Model>> load_model(const std::string& path) {
  SALVO_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> gguf, GgufFile::open(path));
  auto arch = gguf->get_string("general.architecture");
  if (!arch.ok()) return arch.status().with_context(path);
  Expected<std::unique_ptr<Model>> model = Status::error("unreachable");
  if (*arch == "llama") {
    model = load_llama(std::move(gguf));
  } else if (*arch == "qwen2") {
    model = load_qwen2(std::move(gguf));
  } else if (*arch == "gemma3") {
    model = load_gemma3(std::move(gguf));
  } else {
    return Status::error(path + ": architecture '" + *arch +
                         "' is not supported (supported: llama, qwen2, gemma3)");
  }
  if (!model.ok()) return model.status().with_context(path);
  return model;
}

}  // namespace salvo
