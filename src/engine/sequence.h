// Sequence: one sequence's generation as a step machine, so that several sequences can share
// forward passes. The owner (Session for one sequence, the server's scheduler for many) runs
//
//   start(request, on_text);
//   while (!done()) { batch.clear(); add_rows(batch, ...); forward; finish_pass(its logits); }
//   result = take_result();
//
// Each pass carries either a prefill chunk (committed whole) or [root, draft tree...] (the
// target samples along the tree and commits the path it would have produced itself). The
// sequence lives at `seq_id` of a KvCache it shares with others; everything that must persist
// between requests (the committed tokens, the drafter's index, the policy's measurements) is
// kept here so that the next request reuses the longest common prefix.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/kv_cache.h"
#include "models/model.h"
#include "models/token_batch.h"
#include "sampling/sampler.h"
#include "sampling/stop_strings.h"
#include "speculative/dflash_model.h"
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
  size_t peak_device_bytes = 0;  // accelerator memory (Model::peak_device_bytes; 0 on the CPU)
  std::string finish_reason;     // "length", "stop" (EOS or stop string), "cancelled"

  // Speculation. Depth d (1-based) is "tested" in a verification pass when the target's walk
  // reached a node (or the root) with draft children at depth d, and "accepted" when the walk
  // moved on to one of them.
  int drafted_nodes = 0;          // tree nodes verified, over all passes
  int accepted_draft_tokens = 0;  // of those, tokens on accepted paths
  std::vector<int> tested_per_depth, accepted_per_depth;
  double draft_ms = 0;  // time spent in the drafter (part of decode_ms)
  std::string drafter;  // what drafted (Drafter::name); empty for plain decoding

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

class Sequence {
 public:
  Sequence(Model& model, const Tokenizer& tokenizer, KvCache& kv, int seq_id);

  int seq_id() const { return seq_id_; }
  // The model --spec draft (and auto) drafts with, and the threads that run it; both must
  // outlive the sequence. Takes effect at the next start() that creates its drafter.
  void set_draft_model(Model* draft_model, ThreadPool* pool) {
    draft_model_ = draft_model;
    draft_pool_ = pool;
    drafter_.reset();
  }
  // The DFlash drafter --spec dflash (and auto, first) drafts with, run on `pool`; both must
  // outlive the sequence.
  void set_dflash_model(const DflashModel* dflash, ThreadPool* pool) {
    dflash_ = dflash;
    draft_pool_ = pool;
    drafter_.reset();
  }
  int context_size() const { return kv_.capacity(); }
  // Committed tokens: the KV cache holds exactly these for this sequence.
  const std::vector<int32_t>& history() const { return history_; }
  // Prompt tokens start() would reuse from the KV cache for `prompt`.
  int common_prefix(std::span<const int32_t> prompt) const;

  // Validates the request (the error names what is wrong) and prepares the prefill.
  Status start(const GenerateRequest& request, TextCallback on_text);
  bool active() const { return phase_ != Phase::kIdle && phase_ != Phase::kDone; }
  bool done() const { return phase_ == Phase::kDone; }
  bool prefilling() const { return phase_ == Phase::kPrefill; }

  // Appends the rows of the next pass: a prefill chunk of at most `max_prefill_rows` rows
  // (at least one), or the root and its draft tree. Returns how many rows want logits.
  // A drafter that reads the target's hidden states sets batch.hidden_layers.
  int add_rows(TokenBatch& batch, int max_prefill_rows);
  // True when every logit row this sequence asks for is consumed by a greedy argmax alone
  // (temperature 0, no repetition penalty): the owner may run Model::forward_argmax and hand
  // finish_pass the ids. Valid while active().
  bool argmax_suffices() const;
  // True when every logit row this sequence asks for is sampled from that row's k largest
  // logits alone (Sampler::top_logits_suffice): the owner may run Model::forward_top. Valid
  // while active().
  bool top_logits_suffice(int k) const;
  // `rows`: this sequence's rows that wanted logits in the last pass ([rows, n_vocab] logits,
  // their argmax ids when argmax_suffices(), or their k largest logits when
  // top_logits_suffice(k)).
  // `pass_ms`: the time of that pass (what the speculation policy weighs drafting against).
  // `hidden`: the whole batch's hidden states when it asked for them
  // ([batch rows, hidden_layers.size() * n_embd]); the sequence reads its own rows.
  // `warmup`: the pass also did one-time work (Model::last_pass_was_warmup), so the policy does
  // not take its time as the cost of that shape.
  void finish_pass(const LogitRows& rows, double pass_ms, std::span<const float> hidden = {},
                   bool warmup = false);
  void finish_pass(std::span<const float> logits, double pass_ms,
                   std::span<const float> hidden = {}) {
    finish_pass(LogitRows{.logits = logits, .argmax = {}}, pass_ms, hidden);
  }
  // The pass failed: forget its rows; the sequence stays usable for a new start().
  void abort_pass();
  // Ends the generation before the next pass (client gone, time limit): `reason` becomes
  // the finish reason.
  void stop(const std::string& reason);

  // After done(): the result; the sequence is idle again (ready for the next start()).
  GenerationResult take_result();

 private:
  enum class Phase { kIdle, kPrefill, kDecode, kDone };
  using Clock = std::chrono::steady_clock;

  void emit(const std::string& piece);
  // Returns true when `token` ends the generation.
  bool emit_token(int32_t token);
  // Hands the drafter the hidden states of this pass's rows `rows` (relative to the pass's
  // first row), committed at positions first, first + 1, ...
  void observe_rows(std::span<const float> hidden, std::span<const int32_t> rows, int32_t first);
  void finish();

  Model& model_;
  const Tokenizer& tokenizer_;
  KvCache& kv_;
  int seq_id_;
  std::vector<int32_t> history_;
  // Kept across requests so an n-gram index only has to learn the new tokens.
  std::unique_ptr<Drafter> drafter_;
  Model* draft_model_ = nullptr;
  const DflashModel* dflash_ = nullptr;
  ThreadPool* draft_pool_ = nullptr;
  SpecMode drafter_mode_ = SpecMode::kNone;
  SpecTree drafter_tree_ = SpecTree::kAuto;
  int32_t drafter_vocab_ = 0;
  uint64_t drafter_seed_ = 0;
  SpecPolicy policy_;  // measured costs and gains of drafting on this backend
  Verifier verifier_;

  // The request in flight.
  Phase phase_ = Phase::kIdle;
  GenerateRequest request_;
  TextCallback on_text_;
  std::optional<Sampler> sampler_;
  std::optional<StreamDecoder> decoder_;
  std::optional<StopStringMatcher> stops_;
  GenerationResult result_;
  Clock::time_point start_time_, first_token_time_;
  int max_new_ = 0;
  int prefilled_ = 0;     // prompt tokens committed so far
  int pass_prefill_ = 0;  // prompt tokens in the pass in flight
  int32_t root_ = -1;     // sampled, emitted, not committed: row 0 of the next verification
  DraftTree tree_;        // the draft of the pass in flight
  double pass_draft_ms_ = 0;
  int pass_rows_ = 0;
  int pass_first_row_ = 0;  // this sequence's first row in the pass's batch
  int pass_context_ = 0;    // committed tokens when the pass was set up
  DraftSize pass_caps_;     // the caps the policy was given, and
  DraftSize pass_size_;     // the size it chose
  bool cancelled_ = false;
};

}  // namespace salvo
