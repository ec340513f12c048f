#include "sampling/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "ops/ops.h"
#include "sampling/philox.h"
#include "util/check.h"

namespace salvo {
namespace {

// Bounds of gumbel_noise(): u lies in [2^-53, 1 - 2^-53], so -log(-log(u)) lies in
// [-3.60, 36.74]. A token whose logit is more than 36.74 + 3.60 temperature units below the best
// can therefore never win the race; 42 leaves room for rounding.
constexpr double kPruneTemperatureUnits = 42.0;
// Gumbel noise when u < 0.9 is below -log(-log(0.9)) = 2.25037; the race uses this to skip both
// logarithms for most tokens that could only win with unusually large noise.
constexpr double kGumbelBoundUniform = 0.9;
constexpr double kGumbelBoundBelow = 2.2504;
// Philox counter word 3 separates independent noise streams; token sampling owns stream 0.
constexpr uint32_t kStreamTokenSampling = 0;

// One Philox call yields 128 bits: two 64-bit uniforms, for an even token and its odd
// neighbour. Counter = (position, token pair, stream), key = seed.
struct UniformPair {
  double even;
  double odd;
};
UniformPair uniforms_for_pair(uint64_t seed, int64_t position, uint32_t token_pair) {
  const auto pos = static_cast<uint64_t>(position);
  const PhiloxCounter counter = {static_cast<uint32_t>(pos), static_cast<uint32_t>(pos >> 32),
                                 token_pair, kStreamTokenSampling};
  const PhiloxKey key = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  const PhiloxCounter bits = philox4x32_10(counter, key);
  return {philox_open_unit_double(bits[0], bits[1]), philox_open_unit_double(bits[2], bits[3])};
}

double uniform_for(uint64_t seed, int64_t position, int32_t token) {
  const UniformPair pair = uniforms_for_pair(seed, position, static_cast<uint32_t>(token) >> 1);
  return (token & 1) ? pair.odd : pair.even;
}

double gumbel_from_uniform(double u) { return -std::log(-std::log(u)); }

// The smallest float f with f >= threshold, so `logit >= f` on floats decides exactly
// `double(logit) >= threshold` while the scans stay in single precision.
float float_at_or_above(double threshold) {
  float f = static_cast<float>(threshold);
  if (static_cast<double>(f) < threshold)
    f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f;
}

// exp(x) for x <= 0, within ~3e-6 relative error (float rounding of the argument dominates),
// inlined so the nucleus mass pass over a whole vocabulary does not pay a libm call per token.
float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);
  const float t = x * 1.44269504f;                             // log2(e)
  const int n = static_cast<int>(t - 0.5f);                    // nearest integer, t <= 0
  const float f = (t - static_cast<float>(n)) * 0.693147181f;  // ln(2); |f| <= 0.347
  // Taylor series of e^f to degree 6: truncation error < 1.2e-7 on |f| <= 0.347.
  float p = 1.0f / 720.0f;
  p = p * f + 1.0f / 120.0f;
  p = p * f + 1.0f / 24.0f;
  p = p * f + 1.0f / 6.0f;
  p = p * f + 0.5f;
  p = p * f + 1.0f;
  p = p * f + 1.0f;
  return p * std::bit_cast<float>((n + 127) << 23);  // n in [-126, 0]: a normal power of two
}

// Greedy decoding: ties go to the lowest token id so every backend agrees (Model::forward_argmax
// answers with the same rule).
int32_t argmax(const float* logits, int32_t n_vocab) {
  const int32_t best_token = ops::argmax(logits, n_vocab);
  SALVO_CHECK_MSG(best_token >= 0, "every logit is -inf or NaN");
  return best_token;
}

// Candidate order: higher logit first, then lower token id, a total order so truncation
// boundaries among equal logits do not depend on the sort algorithm.
template <typename Candidate>
bool ranks_before(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.token < b.token);
}

}  // namespace

Status SamplingParams::validate() const {
  // Written as !(in range) so NaN is rejected too.
  if (!(temperature >= 0.0f && temperature <= 100.0f)) {
    return Status::error(
        fmt::format("temperature must be in [0, 100] (0 = greedy), got {}", temperature));
  }
  if (top_k < 0) {
    return Status::error(fmt::format("top_k must be >= 0 (0 = disabled), got {}", top_k));
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) {
    return Status::error(fmt::format("top_p must be in (0, 1] (1 = disabled), got {}", top_p));
  }
  if (!(min_p >= 0.0f && min_p <= 1.0f)) {
    return Status::error(fmt::format("min_p must be in [0, 1] (0 = disabled), got {}", min_p));
  }
  if (!(repeat_penalty > 0.0f && repeat_penalty <= 100.0f)) {
    return Status::error(
        fmt::format("repeat_penalty must be in (0, 100] (1 = disabled), got {}", repeat_penalty));
  }
  if (repeat_last_n < -1) {
    return Status::error(fmt::format(
        "repeat_last_n must be >= -1 (0 = disabled, -1 = whole history), got {}", repeat_last_n));
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return Status::error(
        fmt::format("frequency_penalty must be in [-2, 2], got {}", frequency_penalty));
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return Status::error(
        fmt::format("presence_penalty must be in [-2, 2], got {}", presence_penalty));
  }
  return Status::ok_status();
}

double gumbel_noise(uint64_t seed, int64_t position, int32_t token) {
  return gumbel_from_uniform(uniform_for(seed, position, token));
}

Sampler::Sampler(const SamplingParams& params, int32_t n_vocab)
    : params_(params),
      n_vocab_(n_vocab),
      penalties_active_(params.repeat_last_n != 0 &&
                        (params.repeat_penalty != 1.0f || params.frequency_penalty != 0.0f ||
                         params.presence_penalty != 0.0f)) {
  SALVO_CHECK_MSG(params.validate().ok(), "SamplingParams must be validated before use");
  SALVO_CHECK(n_vocab > 0);
  if (penalties_active_) {
    penalized_logits_.resize(n_vocab);
    if (params.repeat_last_n > 0) penalty_window_.reserve(params.repeat_last_n);
  }
  if (!is_greedy()) candidates_.resize(n_vocab);
  probabilities_.reserve(is_greedy() ? 1 : n_vocab);
}

Expected<Sampler> Sampler::create(const SamplingParams& params, int32_t n_vocab) {
  SALVO_RETURN_IF_ERROR(params.validate().with_context("sampling parameters"));
  if (n_vocab <= 0) {
    return Status::error(fmt::format("vocabulary size must be positive, got {}", n_vocab));
  }
  return Sampler(params, n_vocab);
}

const float* Sampler::apply_penalties(std::span<const float> logits,
                                      std::span<const int32_t> history) {
  if (!penalties_active_) return logits.data();
  const size_t window = params_.repeat_last_n < 0
                            ? history.size()
                            : std::min(history.size(), static_cast<size_t>(params_.repeat_last_n));
  if (window == 0) return logits.data();
  const std::span<const int32_t> tail = history.last(window);
  // Sorting the window groups equal tokens, which counts occurrences without an [n_vocab]
  // table to clear on every call.
  penalty_window_.assign(tail.begin(), tail.end());
  std::sort(penalty_window_.begin(), penalty_window_.end());
  std::copy(logits.begin(), logits.end(), penalized_logits_.begin());
  for (size_t run_begin = 0; run_begin < penalty_window_.size();) {
    const int32_t token = penalty_window_[run_begin];
    size_t run_end = run_begin + 1;
    while (run_end < penalty_window_.size() && penalty_window_[run_end] == token) ++run_end;
    SALVO_CHECK_MSG(token >= 0 && token < n_vocab_, "history token id outside the vocabulary");
    const auto count = static_cast<float>(run_end - run_begin);
    float& logit = penalized_logits_[token];
    logit = logit > 0.0f ? logit / params_.repeat_penalty : logit * params_.repeat_penalty;
    logit -= count * params_.frequency_penalty + params_.presence_penalty;
    run_begin = run_end;
  }
  return penalized_logits_.data();
}

float Sampler::select_candidates(const float* logits) {
  float max_logit = -std::numeric_limits<float>::infinity();
  for (int32_t token = 0; token < n_vocab_; ++token) max_logit = std::max(max_logit, logits[token]);
  SALVO_CHECK_MSG(std::isfinite(max_logit), "logits are all -inf/NaN or contain +inf");
  const float threshold = candidate_threshold(max_logit);
  Candidate* candidates = candidates_.data();
  size_t count = 0;
  for (int32_t token = 0; token < n_vocab_; ++token) {
    candidates[count] = {token, logits[token]};
    count += logits[token] >= threshold ? 1 : 0;
  }
  truncate_candidates(max_logit, count);
  return max_logit;
}

float Sampler::candidate_threshold(float max_logit) const {
  const double temperature = params_.temperature;
  const bool top_p_active = params_.top_p < 1.0f;
  // min-p keeps p_i >= min_p * p_max, i.e. logit_i >= max_logit + T * log(min_p): a plain logit
  // threshold. It commutes with top-k, so it joins the first scan unless top-p (which runs
  // before it and normalises over the tokens min-p would drop) is active.
  double log_ratio_floor = -kPruneTemperatureUnits;
  if (!top_p_active && params_.min_p > 0.0f) {
    log_ratio_floor = std::max(log_ratio_floor, std::log(static_cast<double>(params_.min_p)));
  }
  return float_at_or_above(max_logit + temperature * log_ratio_floor);
}

// The candidates select_candidates() finds are the tokens at or above a threshold; those are
// all among the row's k largest unless all k pass it, and then there are more than top_k of
// them (top_k < k) and top-k keeps the first top_k in rank order, which the k largest hold. Put
// in token order, they are select_candidates()'s array, so the later stages see the same input.
float Sampler::select_top_candidates(std::span<const int32_t> ids, std::span<const float> values) {
  SALVO_CHECK(ids.size() == values.size() && top_logits_suffice(static_cast<int>(ids.size())));
  float max_logit = -std::numeric_limits<float>::infinity();
  for (float v : values) max_logit = std::max(max_logit, v);
  SALVO_CHECK_MSG(std::isfinite(max_logit), "logits are all -inf/NaN or contain +inf");
  const float threshold = candidate_threshold(max_logit);
  size_t count = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    SALVO_CHECK(ids[i] >= 0 && ids[i] < n_vocab_);
    if (values[i] >= threshold) candidates_[count++] = {ids[i], values[i]};
  }
  std::sort(candidates_.begin(), candidates_.begin() + count,
            [](const Candidate& a, const Candidate& b) { return a.token < b.token; });
  truncate_candidates(max_logit, count);
  return max_logit;
}

void Sampler::truncate_candidates(float max_logit, size_t count) {
  Candidate* candidates = candidates_.data();
  const bool top_p_active = params_.top_p < 1.0f;
  num_candidates_ = count;
  bool sorted = false;
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < count) {
    std::partial_sort(candidates, candidates + params_.top_k, candidates + count,
                      ranks_before<Candidate>);
    num_candidates_ = params_.top_k;
    sorted = true;
  } else if (params_.top_k > 0 && top_p_active) {
    std::sort(candidates, candidates + count, ranks_before<Candidate>);
    sorted = true;
  }
  if (top_p_active) {
    apply_top_p(max_logit, sorted);
    apply_min_p(max_logit);
  }
}

void Sampler::apply_top_p(float max_logit, bool sorted) {
  Candidate* candidates = candidates_.data();
  const float inv_temperature = 1.0f / params_.temperature;
  // Top-p only compares masses, so float-accurate weights suffice (llama.cpp uses expf).
  auto weight = [&](float logit) { return exp_nonpositive((logit - max_logit) * inv_temperature); };

  constexpr int kNumBands = 64;
  constexpr size_t kSortableSegment = 256;
  const bool banded = !sorted && num_candidates_ > kSortableSegment;
  // The first banding pass sums the total itself, saving a pass over the vocabulary.
  double total = 0.0;
  if (!banded) {
    for (size_t i = 0; i < num_candidates_; ++i) total += weight(candidates[i].logit);
  }
  double target = params_.top_p * total;

  // The nucleus is every token above the one where the mass, in descending logit order,
  // reaches top_p. Only the order near that crossing matters, so without top-k (when the
  // candidates may be a whole vocabulary) the crossing is narrowed down by bucketing logits
  // into bands, keeping the band that crosses and repeating inside it with finer bands;
  // then only that last band is sorted. Bands are monotone in the logit, so every token in an
  // earlier band ranks before every token in the crossing band.
  size_t segment_begin = 0;              // [0, segment_begin) is surely in the nucleus
  size_t segment_end = num_candidates_;  // [segment_end, ...) is surely out
  double mass_before = 0.0;              // mass of [0, segment_begin)
  if (banded) {
    float band_top = max_logit;
    float inv_band_width = inv_temperature;  // the first bands are one temperature unit wide
    for (int level = 0; level < 4 && segment_end - segment_begin > kSortableSegment; ++level) {
      auto band_of = [&](float logit) {
        const float position = std::max((band_top - logit) * inv_band_width, 0.0f);
        return static_cast<int>(std::min(position, static_cast<float>(kNumBands - 1)));
      };
      double band_mass[kNumBands] = {};
      double segment_mass = 0.0;
      for (size_t i = segment_begin; i < segment_end; ++i) {
        const double w = weight(candidates[i].logit);
        segment_mass += w;
        band_mass[band_of(candidates[i].logit)] += w;
      }
      if (level == 0) {
        total = segment_mass;
        target = params_.top_p * total;
      }
      int crossing = kNumBands - 1;
      double mass_within = mass_before;
      for (int band = 0; band < kNumBands; ++band) {
        if (mass_within + band_mass[band] >= target) {
          crossing = band;
          break;
        }
        mass_within += band_mass[band];
      }
      Candidate* first = candidates + segment_begin;
      Candidate* last = candidates + segment_end;
      Candidate* crossing_begin = std::partition(
          first, last, [&](const Candidate& x) { return band_of(x.logit) < crossing; });
      Candidate* crossing_end = std::partition(
          crossing_begin, last, [&](const Candidate& x) { return band_of(x.logit) == crossing; });
      segment_begin = crossing_begin - candidates;
      segment_end = crossing_end - candidates;
      mass_before = mass_within;
      band_top -= static_cast<float>(crossing) / inv_band_width;
      inv_band_width *= kNumBands;
    }
  }
  std::sort(candidates + segment_begin, candidates + segment_end, ranks_before<Candidate>);

  // Keep the shortest prefix whose mass reaches top_p (the token that crosses it included).
  // If rounding keeps the running sum just short, the whole segment stays.
  double cumulative = mass_before;
  size_t keep = segment_end;
  for (size_t i = segment_begin; i < segment_end; ++i) {
    cumulative += weight(candidates[i].logit);
    if (cumulative >= target) {
      keep = i + 1;
      break;
    }
  }
  num_candidates_ = keep;
}

void Sampler::apply_min_p(float max_logit) {
  if (params_.min_p <= 0.0f) return;
  const float threshold = float_at_or_above(
      max_logit + params_.temperature * std::log(static_cast<double>(params_.min_p)));
  Candidate* candidates = candidates_.data();
  num_candidates_ =
      std::partition(candidates, candidates + num_candidates_,
                     [threshold](const Candidate& x) { return x.logit >= threshold; }) -
      candidates;
}

int32_t Sampler::sample_row(const LogitRows& rows, int32_t row, int64_t position,
                            std::span<const int32_t> history) {
  SALVO_CHECK(row >= 0);
  if (rows.has_logits()) {
    const size_t n = static_cast<size_t>(n_vocab_);
    SALVO_CHECK((static_cast<size_t>(row) + 1) * n <= rows.logits.size());
    return sample(rows.logits.subspan(row * n, n), position, history);
  }
  if (rows.top_count > 0) {
    const size_t k = static_cast<size_t>(rows.top_count);
    SALVO_CHECK((static_cast<size_t>(row) + 1) * k <= rows.top_ids.size() &&
                rows.top_ids.size() == rows.top_values.size());
    return sample_top(rows.top_ids.subspan(row * k, k), rows.top_values.subspan(row * k, k),
                      position);
  }
  SALVO_CHECK_MSG(argmax_suffices(), "argmax ids given to a sampler that needs the logits");
  SALVO_CHECK(static_cast<size_t>(row) < rows.argmax.size());
  return rows.argmax[row];
}

int32_t Sampler::sample_top(std::span<const int32_t> ids, std::span<const float> values,
                            int64_t position) {
  SALVO_CHECK(position >= 0);
  SALVO_CHECK_MSG(top_logits_suffice(static_cast<int>(ids.size())),
                  "top logits given to a sampler that needs the whole row");
  select_top_candidates(ids, values);
  return gumbel_pick(position);
}

int32_t Sampler::sample(std::span<const float> logits, int64_t position,
                        std::span<const int32_t> history) {
  SALVO_CHECK(logits.size() == static_cast<size_t>(n_vocab_));
  SALVO_CHECK(position >= 0);
  const float* processed = apply_penalties(logits, history);
  if (is_greedy()) return argmax(processed, n_vocab_);
  select_candidates(processed);
  return gumbel_pick(position);
}

int32_t Sampler::gumbel_pick(int64_t position) const {
  // Gumbel-max: argmax_i logit_i / T + g_i samples exactly from softmax(logit / T) over the
  // candidates. Scores are in double and ties go to the lowest id, so the winner is a fixed
  // function of (seed, position, logits) whatever order the candidates are visited in.
  const double inv_temperature = 1.0 / static_cast<double>(params_.temperature);
  double best_score = -std::numeric_limits<double>::infinity();
  int32_t best_token = -1;
  // Candidates often come in token order, so neighbours share one Philox call.
  uint32_t cached_pair = UINT32_MAX;
  UniformPair cached = {};
  for (size_t i = 0; i < num_candidates_; ++i) {
    const Candidate& candidate = candidates_[i];
    const double scaled = candidate.logit * inv_temperature;
    const uint32_t pair = static_cast<uint32_t>(candidate.token) >> 1;
    if (pair != cached_pair) {
      cached = uniforms_for_pair(params_.seed, position, pair);
      cached_pair = pair;
    }
    const double u = (candidate.token & 1) ? cached.odd : cached.even;
    if (u < kGumbelBoundUniform && scaled + kGumbelBoundBelow < best_score) continue;
    const double score = scaled + gumbel_from_uniform(u);
    if (score > best_score || (score == best_score && candidate.token < best_token)) {
      best_score = score;
      best_token = candidate.token;
    }
  }
  SALVO_CHECK(best_token >= 0);
  return best_token;
}

std::span<const TokenProbability> Sampler::distribution(std::span<const float> logits,
                                                        std::span<const int32_t> history) {
  SALVO_CHECK(logits.size() == static_cast<size_t>(n_vocab_));
  const float* processed = apply_penalties(logits, history);
  probabilities_.clear();
  if (is_greedy()) {
    probabilities_.push_back({argmax(processed, n_vocab_), 1.0f});
    return probabilities_;
  }
  const float max_logit = select_candidates(processed);
  const double inv_temperature = 1.0 / static_cast<double>(params_.temperature);
  double total = 0.0;
  for (size_t i = 0; i < num_candidates_; ++i) {
    total += std::exp((candidates_[i].logit - static_cast<double>(max_logit)) * inv_temperature);
  }
  for (size_t i = 0; i < num_candidates_; ++i) {
    const double w =
        std::exp((candidates_[i].logit - static_cast<double>(max_logit)) * inv_temperature);
    probabilities_.push_back({candidates_[i].token, static_cast<float>(w / total)});
  }
  return probabilities_;
}

}  // namespace salvo
