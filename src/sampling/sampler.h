// The position-seeded sampler: logits processors (repetition penalties, top-k, top-p, min-p,
// temperature) followed by Gumbel-max with counter-based noise.
//
// The noise for token t at absolute position p is Philox4x32-10 of (seed, p, t), so the token
// chosen at p depends only on (seed, p, the logits at p, the history window) — never on how many
// tokens were sampled before, which batch row the logits came from, or whether a speculative
// verifier is replaying the position. That is what makes speculative output equal plain output.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "util/status.h"

namespace salvo {

inline constexpr float kMinSamplingTemperature = 1e-4f;

struct SamplingParams {
  // 0 means greedy (argmax), and so does anything below kMinSamplingTemperature, where the
  // softmax is argmax up to ties and 1/T would overflow the arithmetic. Applied last; top-p and
  // min-p are judged on softmax(logits / T), the distribution actually sampled from (as in Hugging
  // Face and vLLM; llama.cpp judges them at T = 1, which differs only when temperature != 1).
  float temperature = 0.8f;
  int top_k = 40;                  // 0 disables; 1 is greedy
  float top_p = 0.95f;             // (0, 1]; 1 disables
  float min_p = 0.05f;             // [0, 1]; keeps tokens with p >= min_p * p_max; 0 disables
  float repeat_penalty = 1.0f;     // llama.cpp semantics: logit > 0 ? logit / r : logit * r
  int repeat_last_n = 64;          // penalty window over the history tail; 0 disables, -1 = all
  float frequency_penalty = 0.0f;  // subtracted once per occurrence in the window
  float presence_penalty = 0.0f;   // subtracted once if the token occurs in the window
  uint64_t seed = 0;

  // Rejects values a user may have typed wrong (flags, JSON), naming the field and the range.
  Status validate() const;
};

// One token of the processed distribution.
struct TokenProbability {
  int32_t token;
  float probability;
};

// The Gumbel noise -log(-log(u)) for `token` at absolute `position`, u in (0, 1) from
// Philox4x32-10(key = seed, counter = (position low, position high, token / 2, stream 0)),
// words 0-1 for even tokens and 2-3 for odd ones. Exposed so other backends
// and tests can reproduce the sampler bit for bit. Always within [-3.60, 36.74].
double gumbel_noise(uint64_t seed, int64_t position, int32_t token);

// What a forward pass returned for the logit rows of one sequence: the logits
// [rows, n_vocab], or, when the sequence's sampler only takes each row's argmax
// (Sampler::argmax_suffices), those argmax ids [rows] alone (Model::forward_argmax).
// Or, when the sampler needs only each row's k largest logits (Sampler::top_logits_suffice(k)),
// those ([rows, k] ids and values, Model::forward_top).
struct LogitRows {
  std::span<const float> logits{};
  std::span<const int32_t> argmax{};  // used when logits is empty and top_count is 0
  std::span<const int32_t> top_ids{};
  std::span<const float> top_values{};
  int32_t top_count = 0;  // k: entries a row has in top_ids / top_values

  bool has_logits() const { return !logits.empty(); }
};

// Not thread-safe (scratch buffers); one per sequence. Allocates only on construction and,
// with repeat_last_n = -1, when the history outgrows the largest window seen so far.
class Sampler {
 public:
  // `params` must have passed validate(): front ends validate untrusted input first.
  Sampler(const SamplingParams& params, int32_t n_vocab);
  static Expected<Sampler> create(const SamplingParams& params, int32_t n_vocab);

  // Samples the token for absolute `position` from `logits` [n_vocab]. `history` is the
  // sequence so far (prompt + generated); the repetition penalties read its tail.
  // Deterministic in (seed, position, logits, history).
  int32_t sample(std::span<const float> logits, int64_t position, std::span<const int32_t> history);

  // The distribution sample() draws from, after every processor: the surviving tokens and
  // their renormalised probabilities, in no particular order (greedy: the argmax with 1).
  // Tokens more than 42 temperature units below the best logit (p < 1e-18 relative) are
  // never candidates; they could not win the Gumbel race anyway. Valid until the next call.
  std::span<const TokenProbability> distribution(std::span<const float> logits,
                                                 std::span<const int32_t> history);

  // sample() on row `row` of `rows`; from argmax ids, the id itself (then argmax_suffices()
  // must hold, which makes it the token sample() would pick from that row's logits); from a
  // row's k largest logits, sample_top() (then top_logits_suffice(k) must hold).
  int32_t sample_row(const LogitRows& rows, int32_t row, int64_t position,
                     std::span<const int32_t> history);

  // The token sample() picks from a row whose k largest logits (ops::top_logits's set, in any
  // order) are ids / values; requires top_logits_suffice(k).
  int32_t sample_top(std::span<const int32_t> ids, std::span<const float> values, int64_t position);

  const SamplingParams& params() const { return params_; }
  int32_t n_vocab() const { return n_vocab_; }
  bool is_greedy() const {
    return params_.temperature < kMinSamplingTemperature || params_.top_k == 1;
  }
  // True when sample() is the argmax of the raw logits (greedy, no repetition penalty), so a
  // pass may return argmax ids instead of logits.
  bool argmax_suffices() const { return is_greedy() && !penalties_active_; }
  // True when sample() reads only a row's k largest logits: sampling (not greedy) with top-k
  // below k and no repetition penalty. Every later stage (top-p, min-p, the Gumbel race) runs
  // on the top-k survivors, so a pass may return those k (Model::forward_top).
  bool top_logits_suffice(int k) const {
    return !is_greedy() && !penalties_active_ && params_.top_k > 0 && params_.top_k < k;
  }

 private:
  struct Candidate {
    int32_t token;
    float logit;
  };

  // Applies the repetition penalties; returns the logits every later stage reads (`logits`
  // itself when no penalty is active, else a penalised copy).
  const float* apply_penalties(std::span<const float> logits, std::span<const int32_t> history);
  // Leaves the surviving candidates in candidates_ and returns the largest logit among them.
  float select_candidates(const float* logits);
  // The lowest logit a candidate may have: 42 temperature units below the best, or min-p's
  // floor where min-p runs in the first scan.
  float candidate_threshold(float max_logit) const;
  // select_candidates() from a row's k largest logits alone (top_logits_suffice(k)).
  float select_top_candidates(std::span<const int32_t> ids, std::span<const float> values);
  // top-k, top-p and min-p on the first `count` candidates (those within the pruning threshold,
  // in token order).
  void truncate_candidates(float max_logit, size_t count);
  // The Gumbel race among the surviving candidates at `position`.
  int32_t gumbel_pick(int64_t position) const;
  void apply_top_p(float max_logit, bool sorted);
  void apply_min_p(float max_logit);

  SamplingParams params_;
  int32_t n_vocab_;
  bool penalties_active_;
  std::vector<float> penalized_logits_;  // [n_vocab] when penalties are active
  std::vector<int32_t> penalty_window_;  // sorted copy of the history tail
  std::vector<Candidate> candidates_;    // [n_vocab]; the first num_candidates_ survive
  size_t num_candidates_ = 0;
  std::vector<TokenProbability> probabilities_;
};

}  // namespace salvo
