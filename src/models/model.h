// A decoder-only transformer loaded from GGUF. Each architecture (llama.cc, qwen2.cc,
// gemma3.cc) parses its hyper-parameters, binds its tensors and writes its forward pass with
// the helpers of layers.h. Weights are used in place from the memory map.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "io/gguf.h"
#include "models/config.h"
#include "models/kv_cache.h"
#include "models/token_batch.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace salvo {

class Model {
 public:
  virtual ~Model() = default;

  const ModelConfig& config() const { return config_; }
  const GgufFile& gguf() const { return *gguf_; }
  // Bytes of weights one forward pass reads (every tensor but the embedding table).
  size_t weight_bytes_per_pass() const { return weight_bytes_per_pass_; }
  // Where the forward pass runs ("cpu", "cuda").
  virtual const char* backend_name() const { return "cpu"; }
  // Accelerator memory this process has held at most (weights, caches, scratch; 0 on the CPU).
  virtual size_t peak_device_bytes() const { return 0; }

  // Runs every row of the batch. K/V of each row are written to the suffix region of its
  // sequence in `kv` (nothing is committed here: the caller commits what it keeps). Logits of
  // the rows with want_logits are written to `logits` as [n_logit_rows, n_vocab], in row order.
  // With batch.hidden_layers, the outputs of those blocks for every row go to `hidden` as
  // [n_rows, hidden_layers.size() * n_embd] (required then).
  // Not thread-safe: one forward at a time per model (the scratch lives in the model).
  Status forward(ThreadPool& pool, const TokenBatch& batch, KvCache& kv, std::vector<float>& logits,
                 std::vector<float>* hidden = nullptr);
  // forward() for a caller that only takes the argmax of each logit row (greedy decoding and
  // verification): `argmax` gets, for every row with want_logits, in row order, the index of
  // its largest logit, ties to the lowest index (ops::argmax, the greedy Sampler's rule), so the
  // text is the same as from forward(). A device backend copies back those ids instead of
  // [n_logit_rows, n_vocab] floats.
  Status forward_argmax(ThreadPool& pool, const TokenBatch& batch, KvCache& kv,
                        std::vector<int32_t>& argmax, std::vector<float>* hidden = nullptr);

  // forward() for a caller that samples each logit row from its k largest logits alone
  // (Sampler::top_logits_suffice(k)): for every row with want_logits, in row order, `ids` and
  // `values` get that row's k largest logits ([n_logit_rows, k]), the set ops::top_logits
  // selects, in any order within the row. 0 < k <= min(n_vocab, kMaxTopLogits). A device
  // backend selects them there and copies back 2k numbers a row instead of n_vocab.
  static constexpr int kMaxTopLogits = 1024;
  Status forward_top(ThreadPool& pool, const TokenBatch& batch, KvCache& kv, int k,
                     std::vector<int32_t>& ids, std::vector<float>& values,
                     std::vector<float>* hidden = nullptr);
  // Whether forward_top saves work over forward() here (a device backend: the copy of the
  // logits); on the CPU the sampler reads the logits where they are.
  virtual bool selects_top_logits() const { return false; }

  // Whether the last forward pass also did one-time work for its shape (a device backend
  // capturing a CUDA graph), so that its time is not what the next pass of that shape costs.
  virtual bool last_pass_was_warmup() const { return false; }

  // Whether forward() can return hidden states (batch.hidden_layers).
  virtual bool returns_hidden_states() const { return true; }
  // The token embedding table and the LM head ([n_vocab, n_embd] each) for drafters that share
  // them (DFlash); null where the architecture does not expose them.
  virtual const WeightView* embedding_table() const { return nullptr; }
  virtual const WeightView* lm_head() const { return nullptr; }

 protected:
  // hidden: [n_rows, hidden_layers.size() * n_embd] sized by forward(), or null when the batch
  // asks for none.
  virtual void forward_layers(ThreadPool& pool, const TokenBatch& batch, KvCache& kv,
                              std::vector<float>& logits, float* hidden) = 0;
  // forward_argmax's pass. This default runs forward_layers and reduces each row on the host.
  virtual void forward_layers_argmax(ThreadPool& pool, const TokenBatch& batch, KvCache& kv,
                                     std::vector<int32_t>& argmax, float* hidden);
  // forward_top's pass. This default runs forward_layers and selects on the host.
  virtual void forward_layers_top(ThreadPool& pool, const TokenBatch& batch, KvCache& kv, int k,
                                  std::vector<int32_t>& ids, std::vector<float>& values,
                                  float* hidden);
  // For a model that runs another's weights elsewhere: the same config, file and figures.
  void share_file_and_config(const Model& other) {
    config_ = other.config_;
    gguf_ = other.gguf_;
    weight_bytes_per_pass_ = other.weight_bytes_per_pass_;
  }

  ModelConfig config_;
  // Shared so that a model built from this one (a device copy) keeps the mapping alive.
  std::shared_ptr<GgufFile> gguf_;
  std::vector<std::unique_ptr<uint8_t[]>> packed_;  // repacked matrices (backends/cpu/packed.h)
  size_t weight_bytes_per_pass_ = 0;

 private:
  // Validates the batch against the config and the cache, reserves the suffix rows and sizes
  // `hidden`; *hidden_rows: its data, or null when the batch asks for no hidden states.
  Status prepare_pass(const TokenBatch& batch, KvCache& kv, std::vector<float>* hidden,
                      float** hidden_rows);
  std::vector<float> argmax_logits_;  // forward_layers_argmax/_top's logits on the host
};

// Loads any supported architecture; the error names what is missing or unsupported.
Expected<std::unique_ptr<Model>> load_model(const std::string& path);

}  // namespace salvo
