// Session: one conversation's state (KV cache, token history) and the generation loop:
// prefill in chunks, then decode until max tokens, an end-of-generation token or a stop string.
// Each decode pass verifies [last sampled token, draft tree...] in one TokenBatch and commits the
// path the target itself samples; plain decoding is the empty tree. The sampler is
// position-seeded, so the same (seed, prompt) gives the same text with or without speculation.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/kv_cache.h"
#include "models/model.h"
#include "sampling/sampler.h"
#include "speculative/drafter.h"
#include "speculative/spec_policy.h"
#include "speculative/verifier.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace salvo {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 256;
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  SpecOptions spec;  // default auto; kNone: plain decoding (every draft tree is empty)
};

struct GenerationStats {
  int prompt_tokens = 0;
  int cached_prompt_tokens = 0;  // reused from the previous turn's KV cache
  int generated_tokens = 0;
  int forward_passes = 0;  // passes that produced generated tokens (the last prefill chunk counts)
  double ttft_ms = 0;      // request start to the first generated token
  double prefill_ms = 0;
  double decode_ms = 0;  // after the first token
  size_t peak_rss_bytes = 0;
  std::string finish_reason;  // "length", "stop" (EOS or stop string), "cancelled"

  // Speculation. Depth d (1-based) is "tested" in a verification pass when the target's walk
  // reached a node (or the root) with draft children at depth d, and "accepted" when the walk
  // moved on to one of them.
  int drafted_nodes = 0;          // tree nodes verified, over all passes
  int accepted_draft_tokens = 0;  // of those, tokens on accepted paths
  std::vector<int> tested_per_depth, accepted_per_depth;
  double draft_ms = 0;  // time spent in the drafter (part of decode_ms)

  double prefill_tokens_per_second() const;
  double decode_tokens_per_second() const;
  double tokens_per_pass() const;
  // accepted / tested for each depth, from 1.
  std::vector<double> acceptance_per_depth() const;
  double draft_share() const;  // draft_ms / decode_ms
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (including a final EOS, if one ended the text)
  std::string text;             // the emitted text (stop strings removed)
  GenerationStats stats;
};

// Receives each newly emitted text piece; returning false cancels the generation.
using TextCallback = std::function<bool(const std::string& piece)>;

class Session {
 public:
  Session(Model& model, const Tokenizer& tokenizer, ThreadPool& pool, int context_size,
          int prefill_chunk = 512);

  int context_size() const { return kv_.capacity(); }
  // The model --spec draft (and auto) drafts with; it must outlive the session. Takes effect
  // at the next generate() that creates its drafter.
  void set_draft_model(Model* draft_model) {
    draft_model_ = draft_model;
    drafter_.reset();
  }
  const std::vector<int32_t>& history() const { return history_; }

  Expected<GenerationResult> generate(const GenerateRequest& request, const TextCallback& on_text);

 private:
  // Feeds tokens [history_.size() - n, history_.size()) through the model, committing them;
  // leaves the logits of the last one in logits_.
  Status prefill(int n_new);

  Model& model_;
  const Tokenizer& tokenizer_;
  ThreadPool& pool_;
  KvCache kv_;
  int prefill_chunk_;
  std::vector<int32_t> history_;  // committed tokens: kv_ holds exactly these
  std::vector<float> logits_;
  TokenBatch batch_;
  // Kept across turns so an n-gram index only has to learn the new tokens.
  std::unique_ptr<Drafter> drafter_;
  Model* draft_model_ = nullptr;
  SpecMode drafter_mode_ = SpecMode::kNone;
  uint64_t drafter_seed_ = 0;
  SpecPolicy policy_;  // measured costs and gains of drafting on this backend
  Verifier verifier_;
};

}  // namespace salvo
