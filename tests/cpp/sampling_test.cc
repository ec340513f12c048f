// Tests for the position-seeded sampler, its Philox generator and the stop-string matcher.
// Expected distributions are computed here independently (full sort, plain softmax) rather
// than through the sampler's own pruning and partial sorts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ops/ops.h"
#include "sampling/philox.h"
#include "sampling/sampler.h"
#include "sampling/stop_strings.h"

namespace salvo {
namespace {

// --- Philox ---------------------------------------------------------------------------------

// Random123's kat_vectors, "philox4x32 10" lines: counter[4] key[2] -> output[4].
TEST(PhiloxTest, KnownAnswerVectors) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(PhiloxTest, IsConstexpr) {
  static_assert(philox4x32_10({0, 0, 0, 0}, {0, 0})[0] == 0x6627e8d5);
}

TEST(PhiloxTest, OpenUnitDoubleNeverHitsEndpoints) {
  EXPECT_EQ(philox_open_unit_double(0, 0), 0x1.0p-53);
  EXPECT_EQ(philox_open_unit_double(0xffffffff, 0xffffffff), 1.0 - 0x1.0p-53);
  // The sampler prunes tokens using these noise bounds: [-3.60, 36.74].
  const double lowest = -std::log(-std::log(philox_open_unit_double(0, 0)));
  const double highest = -std::log(-std::log(philox_open_unit_double(~0u, ~0u)));
  EXPECT_GT(lowest, -3.61);
  EXPECT_LT(highest, 36.75);
}

TEST(GumbelNoiseTest, DependsOnSeedPositionAndToken) {
  const double base = gumbel_noise(7, 100, 5);
  EXPECT_EQ(base, gumbel_noise(7, 100, 5));
  EXPECT_NE(base, gumbel_noise(8, 100, 5));
  EXPECT_NE(base, gumbel_noise(7, 101, 5));
  EXPECT_NE(base, gumbel_noise(7, 100, 6));
  // The high word of the position and of the seed take part.
  EXPECT_NE(gumbel_noise(7, 5, 1), gumbel_noise(7, 5 + (int64_t{1} << 32), 1));
  EXPECT_NE(gumbel_noise(7, 5, 1), gumbel_noise(7 + (uint64_t{1} << 32), 5, 1));
}

TEST(GumbelNoiseTest, HasGumbelMoments) {
  // Standard Gumbel: mean = Euler-Mascheroni constant, variance = pi^2 / 6.
  constexpr int kSamples = 200000;
  double sum = 0.0, sum_squares = 0.0;
  for (int i = 0; i < kSamples; ++i) {
    const double g = gumbel_noise(1234, i, 17);
    sum += g;
    sum_squares += g * g;
  }
  const double mean = sum / kSamples;
  const double variance = sum_squares / kSamples - mean * mean;
  const double expected_variance = M_PI * M_PI / 6.0;
  EXPECT_NEAR(mean, 0.5772156649, 5.0 * std::sqrt(expected_variance / kSamples));
  EXPECT_NEAR(variance, expected_variance, 0.05);
}

// --- Parameters -----------------------------------------------------------------------------

TEST(SamplingParamsTest, DefaultsAreValid) { EXPECT_TRUE(SamplingParams{}.validate().ok()); }

TEST(SamplingParamsTest, RejectsOutOfRangeWithFieldName) {
  struct Case {
    void (*mutate)(SamplingParams&);
    const char* field;
  };
  const Case cases[] = {
      {[](SamplingParams& p) { p.temperature = -0.1f; }, "temperature"},
      {[](SamplingParams& p) { p.temperature = 101.0f; }, "temperature"},
      {[](SamplingParams& p) { p.temperature = NAN; }, "temperature"},
      {[](SamplingParams& p) { p.top_k = -1; }, "top_k"},
      {[](SamplingParams& p) { p.top_p = 0.0f; }, "top_p"},
      {[](SamplingParams& p) { p.top_p = 1.5f; }, "top_p"},
      {[](SamplingParams& p) { p.min_p = -0.01f; }, "min_p"},
      {[](SamplingParams& p) { p.min_p = 2.0f; }, "min_p"},
      {[](SamplingParams& p) { p.repeat_penalty = 0.0f; }, "repeat_penalty"},
      {[](SamplingParams& p) { p.repeat_last_n = -2; }, "repeat_last_n"},
      {[](SamplingParams& p) { p.frequency_penalty = 3.0f; }, "frequency_penalty"},
      {[](SamplingParams& p) { p.presence_penalty = -2.5f; }, "presence_penalty"},
  };
  for (const Case& c : cases) {
    SamplingParams params;
    c.mutate(params);
    const Status status = params.validate();
    ASSERT_FALSE(status.ok()) << c.field;
    EXPECT_NE(status.message().find(c.field), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("got"), std::string::npos) << status.message();
  }
}

TEST(SamplingParamsTest, CreateReportsErrors) {
  SamplingParams params;
  params.top_p = 2.0f;
  const auto sampler = Sampler::create(params, 10);
  ASSERT_FALSE(sampler.ok());
  EXPECT_NE(sampler.status().message().find("sampling parameters: top_p"), std::string::npos);
  EXPECT_FALSE(Sampler::create(SamplingParams{}, 0).ok());
  EXPECT_TRUE(Sampler::create(SamplingParams{}, 10).ok());
}

// --- Greedy ---------------------------------------------------------------------------------

TEST(SamplerTest, GreedyIsArgmaxWithLowestIdOnTies) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler(params, 6);
  const std::vector<float> logits = {1.0f, 3.0f, -2.0f, 3.0f, 0.5f, 3.0f};
  for (int64_t position = 0; position < 50; ++position) {
    EXPECT_EQ(sampler.sample(logits, position, {}), 1);
  }
  const auto dist = sampler.distribution(logits, {});
  ASSERT_EQ(dist.size(), 1u);
  EXPECT_EQ(dist[0].token, 1);
  EXPECT_EQ(dist[0].probability, 1.0f);
}

TEST(SamplerTest, TinyTemperatureIsGreedy) {
  SamplingParams params;
  params.temperature = 1e-30f;
  Sampler sampler(params, 4);
  EXPECT_TRUE(sampler.is_greedy());
  const std::vector<float> logits = {0.0f, 2.0f, 2.0f, 1.0f};
  for (int64_t position = 0; position < 20; ++position) {
    EXPECT_EQ(sampler.sample(logits, position, {}), 1);
  }
}

TEST(SamplerTest, TopKOneIsGreedy) {
  SamplingParams params;
  params.temperature = 1.5f;
  params.top_k = 1;
  Sampler sampler(params, 4);
  const std::vector<float> logits = {0.0f, 0.1f, 0.1f, -1.0f};
  for (int64_t position = 0; position < 50; ++position) {
    EXPECT_EQ(sampler.sample(logits, position, {}), 1);
  }
}

TEST(SamplerTest, GreedyIgnoresMaskedTokens) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler(params, 3);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sampler.sample(std::vector<float>{-inf, -inf, -5.0f}, 0, {}), 2);
}

// Greedy passes may return argmax ids instead of logits (Model::forward_argmax): only when the
// sampler would take the plain argmax, and then the id is what sample() picks.
TEST(SamplerTest, ArgmaxSufficesOnlyForGreedyWithoutPenalties) {
  SamplingParams params;
  params.temperature = 0.0f;
  EXPECT_TRUE(Sampler(params, 4).argmax_suffices());
  params.repeat_penalty = 1.3f;
  EXPECT_FALSE(Sampler(params, 4).argmax_suffices());
  params.repeat_last_n = 0;  // the penalty has no window: inactive
  EXPECT_TRUE(Sampler(params, 4).argmax_suffices());
  params = SamplingParams();
  params.temperature = 0.7f;
  EXPECT_FALSE(Sampler(params, 4).argmax_suffices());
  params.top_k = 1;
  EXPECT_TRUE(Sampler(params, 4).argmax_suffices());
  params.presence_penalty = 0.5f;
  EXPECT_FALSE(Sampler(params, 4).argmax_suffices());
}

TEST(SamplerTest, SampleRowReadsLogitsOrArgmaxIds) {
  SamplingParams params;
  params.temperature = 0.0f;
  Sampler sampler(params, 4);
  // Row 1 has a three-way tie (lowest id wins) and a NaN, which never wins.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> logits = {0.0f, 1.0f, 0.5f, -1.0f, nan, 2.0f, 2.0f, 2.0f};
  const std::vector<int32_t> ids = {1, 5};
  for (int32_t row = 0; row < 2; ++row) {
    const std::span<const float> one(logits.data() + row * 4, 4);
    EXPECT_EQ(sampler.sample_row(LogitRows{.logits = logits}, row, 9, {}),
              sampler.sample(one, 9, {}));
    EXPECT_EQ(sampler.sample_row(LogitRows{.argmax = ids}, row, 9, {}), ids[row]);
  }
  EXPECT_EQ(sampler.sample(std::span<const float>(logits.data() + 4, 4), 9, {}), 1);
}

// --- Determinism ----------------------------------------------------------------------------

std::vector<float> random_logits(int n_vocab, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> logits(n_vocab);
  for (float& logit : logits) logit = normal(rng);
  return logits;
}

TEST(SamplerTest, SameSeedAndPositionGiveSameToken) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.seed = 42;
  const std::vector<float> logits = random_logits(1000, 1, 2.0f);
  Sampler first(params, 1000), second(params, 1000);
  std::vector<int32_t> tokens;
  for (int64_t position = 0; position < 200; ++position) {
    tokens.push_back(first.sample(logits, position, {}));
  }
  // Visiting positions in another order, with another instance, changes nothing: the token at
  // a position is a function of (seed, position, logits) alone.
  for (int64_t position = 199; position >= 0; --position) {
    EXPECT_EQ(second.sample(logits, position, {}), tokens[position]);
  }
  // Different positions draw independent noise, so the tokens vary.
  const std::vector<int32_t> distinct(tokens.begin(), std::unique(tokens.begin(), tokens.end()));
  EXPECT_GT(distinct.size(), 20u);

  params.seed = 43;
  Sampler other_seed(params, 1000);
  int differences = 0;
  for (int64_t position = 0; position < 200; ++position) {
    differences += other_seed.sample(logits, position, {}) != tokens[position];
  }
  EXPECT_GT(differences, 100);
}

// A row's k largest logits (ops::top_logits, shuffled: a device returns them in any order) give
// the token the whole row gives, whenever top_logits_suffice(k): over flat and peaked rows,
// rows with ties and -inf, and every truncation the parameters allow.
TEST(SamplerTest, TopLogitsGiveTheTokenOfTheWholeRow) {
  constexpr int kVocab = 3000, kTop = 64;
  std::mt19937 rng(5);
  int checked = 0;
  for (int shape = 0; shape < 4; ++shape) {
    std::vector<float> row = random_logits(kVocab, 100 + shape, shape == 0 ? 0.3f : 3.0f);
    if (shape == 2) {  // ties around the top-k boundary, and masked tokens
      for (int i = 0; i < kVocab; i += 3) row[i] = std::round(row[i]);
      for (int i = 0; i < kVocab; i += 7) row[i] = -std::numeric_limits<float>::infinity();
    }
    if (shape == 3) row[17] = 40.0f;  // one dominant token
    std::vector<int32_t> ids(kTop);
    std::vector<float> values(kTop);
    ops::top_logits(row.data(), kVocab, kTop, ids.data(), values.data());
    std::vector<int> order(kTop);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int32_t> shuffled_ids(kTop);
    std::vector<float> shuffled_values(kTop);
    for (int j = 0; j < kTop; ++j) {
      shuffled_ids[j] = ids[order[j]];
      shuffled_values[j] = values[order[j]];
    }
    for (float temperature : {0.3f, 0.8f, 1.0f, 2.5f}) {
      for (int top_k : {2, 40, 63}) {
        for (float top_p : {0.5f, 0.95f, 1.0f}) {
          for (float min_p : {0.0f, 0.05f}) {
            SamplingParams params;
            params.temperature = temperature;
            params.top_k = top_k;
            params.top_p = top_p;
            params.min_p = min_p;
            params.seed = 7;
            Sampler dense(params, kVocab), sparse(params, kVocab);
            ASSERT_TRUE(sparse.top_logits_suffice(kTop));
            for (int64_t position = 0; position < 20; ++position) {
              ASSERT_EQ(sparse.sample_top(shuffled_ids, shuffled_values, position),
                        dense.sample(row, position, {}))
                  << "shape " << shape << " T " << temperature << " top_k " << top_k << " top_p "
                  << top_p << " min_p " << min_p << " position " << position;
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * 4 * 3 * 3 * 2 * 20);
}

TEST(SamplerTest, TopLogitsSufficeOnlyForTopKBelowKWithoutPenalties) {
  SamplingParams params;  // temperature 0.8, top_k 40
  EXPECT_TRUE(Sampler(params, 100).top_logits_suffice(64));
  EXPECT_FALSE(Sampler(params, 100).top_logits_suffice(40));  // top_k must be below k
  params.top_k = 0;
  EXPECT_FALSE(Sampler(params, 100).top_logits_suffice(64));
  params.top_k = 40;
  params.repeat_penalty = 1.1f;
  EXPECT_FALSE(Sampler(params, 100).top_logits_suffice(64));
  params.repeat_penalty = 1.0f;
  params.temperature = 0.0f;  // greedy passes return argmax ids instead
  EXPECT_FALSE(Sampler(params, 100).top_logits_suffice(64));
}

TEST(OpsTest, TopLogitsAreTheLargestInRankOrder) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {1.0f, nan, 3.0f, -0.0f, 3.0f, 0.0f, -inf, 2.0f};
  std::vector<int32_t> ids(7);
  std::vector<float> values(7);
  ops::top_logits(x.data(), 8, 7, ids.data(), values.data());
  // 3 (ids 2, 4), 2, 1, then -0 and +0 as equals (lower id first), -inf; NaN last, left out.
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 4, 7, 0, 3, 5, 6}));
  EXPECT_EQ(values[6], -inf);
}

// Pruning far-below tokens and skipping logarithms must not change the winner: compare with
// the plain argmax of logit / T + g over the whole vocabulary.
TEST(SamplerTest, MatchesBruteForceGumbelMax) {
  constexpr int kVocab = 5000;
  for (float temperature : {0.05f, 0.7f, 1.0f, 3.0f}) {
    SamplingParams params;
    params.temperature = temperature;
    params.top_k = 0;
    params.top_p = 1.0f;
    params.min_p = 0.0f;
    params.seed = 99;
    Sampler sampler(params, kVocab);
    const std::vector<float> logits = random_logits(kVocab, 7, 4.0f);
    for (int64_t position = 0; position < 300; ++position) {
      int32_t expected = 0;
      double best = -INFINITY;
      for (int32_t token = 0; token < kVocab; ++token) {
        const double score =
            logits[token] / static_cast<double>(temperature) + gumbel_noise(99, position, token);
        if (score > best) {
          best = score;
          expected = token;
        }
      }
      ASSERT_EQ(sampler.sample(logits, position, {}), expected) << "T=" << temperature;
    }
  }
}

// --- Distribution: independent reference ----------------------------------------------------

// softmax(logits / T) after top-k, top-p, min-p, by full sorting; zero for removed tokens.
std::vector<double> reference_distribution(const std::vector<float>& logits,
                                           const SamplingParams& params) {
  const int n = static_cast<int>(logits.size());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  int keep = n;
  if (params.top_k > 0) keep = std::min(keep, params.top_k);
  auto softmax_over_prefix = [&](int prefix) {
    std::vector<double> p(prefix);
    double total = 0.0;
    for (int i = 0; i < prefix; ++i) {
      p[i] = std::exp((logits[order[i]] - logits[order[0]]) / double{params.temperature});
      total += p[i];
    }
    for (double& x : p) x /= total;
    return p;
  };
  if (params.top_p < 1.0f) {
    const std::vector<double> p = softmax_over_prefix(keep);
    double cumulative = 0.0;
    for (int i = 0; i < keep; ++i) {
      cumulative += p[i];
      if (cumulative >= params.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  if (params.min_p > 0.0f) {
    const std::vector<double> p = softmax_over_prefix(keep);
    int survivors = 0;
    while (survivors < keep && p[survivors] >= params.min_p * p[0]) ++survivors;
    keep = survivors;
  }
  const std::vector<double> p = softmax_over_prefix(keep);
  std::vector<double> result(n, 0.0);
  for (int i = 0; i < keep; ++i) result[order[i]] = p[i];
  return result;
}

void expect_distribution_matches(Sampler& sampler, const std::vector<float>& logits,
                                 const std::vector<int32_t>& history,
                                 const std::vector<double>& expected) {
  std::vector<double> got(expected.size(), 0.0);
  for (const TokenProbability& tp : sampler.distribution(logits, history)) {
    got[tp.token] = tp.probability;
  }
  for (size_t token = 0; token < expected.size(); ++token) {
    EXPECT_NEAR(got[token], expected[token], 1e-6) << "token " << token;
    if (expected[token] == 0.0) {
      EXPECT_EQ(got[token], 0.0) << "token " << token;
    }
  }
}

// Samples `kPositions` positions and checks every token's frequency against `expected`
// within 5 standard errors; removed tokens must never appear.
void expect_frequencies_match(Sampler& sampler, const std::vector<float>& logits,
                              const std::vector<int32_t>& history,
                              const std::vector<double>& expected) {
  constexpr int kPositions = 200000;
  std::vector<int> counts(expected.size(), 0);
  for (int64_t position = 0; position < kPositions; ++position) {
    ++counts[sampler.sample(logits, position, history)];
  }
  for (size_t token = 0; token < expected.size(); ++token) {
    const double frequency = static_cast<double>(counts[token]) / kPositions;
    const double p = expected[token];
    if (p == 0.0) {
      EXPECT_EQ(counts[token], 0) << "removed token " << token << " was sampled";
      continue;
    }
    const double standard_error = std::sqrt(p * (1.0 - p) / kPositions);
    EXPECT_NEAR(frequency, p, 5.0 * standard_error + 1e-9) << "token " << token;
  }
}

struct DistributionCase {
  const char* name;
  float temperature;
  int top_k;
  float top_p;
  float min_p;
};

class SamplerDistributionTest : public ::testing::TestWithParam<DistributionCase> {};

TEST_P(SamplerDistributionTest, FrequenciesMatchProcessedSoftmax) {
  const DistributionCase& c = GetParam();
  SamplingParams params;
  params.temperature = c.temperature;
  params.top_k = c.top_k;
  params.top_p = c.top_p;
  params.min_p = c.min_p;
  params.seed = 2024;
  const std::vector<float> logits = {2.0f, 1.5f, 0.3f, -0.4f, 1.0f, -1.2f, 0.9f, -3.0f};
  const std::vector<double> expected = reference_distribution(logits, params);
  Sampler sampler(params, static_cast<int32_t>(logits.size()));
  expect_distribution_matches(sampler, logits, {}, expected);
  expect_frequencies_match(sampler, logits, {}, expected);
}

INSTANTIATE_TEST_SUITE_P(Truncations, SamplerDistributionTest,
                         ::testing::Values(DistributionCase{"plain", 1.0f, 0, 1.0f, 0.0f},
                                           DistributionCase{"hot", 2.0f, 0, 1.0f, 0.0f},
                                           DistributionCase{"cold", 0.5f, 0, 1.0f, 0.0f},
                                           DistributionCase{"top_k", 1.0f, 3, 1.0f, 0.0f},
                                           DistributionCase{"top_p", 1.0f, 0, 0.8f, 0.0f},
                                           DistributionCase{"min_p", 1.0f, 0, 1.0f, 0.3f},
                                           DistributionCase{"top_k_top_p", 0.8f, 5, 0.9f, 0.0f},
                                           DistributionCase{"top_p_min_p", 1.3f, 0, 0.85f, 0.2f},
                                           DistributionCase{"all", 0.9f, 6, 0.95f, 0.05f}),
                         [](const auto& info) { return std::string(info.param.name); });

// Large vocabularies exercise the partial sorts and the nucleus cut search that the 8-token
// cases never reach.
TEST(SamplerTest, LargeVocabularyDistributionMatchesReference) {
  constexpr int kVocab = 50000;
  const std::vector<float> logits = random_logits(kVocab, 3, 3.0f);
  const DistributionCase cases[] = {
      {"top_k", 0.8f, 40, 1.0f, 0.0f},          {"top_p", 0.8f, 0, 0.95f, 0.0f},
      {"top_p_hot", 2.0f, 0, 0.9f, 0.0f},       {"top_p_tight", 0.3f, 0, 0.5f, 0.0f},
      {"min_p", 1.0f, 0, 1.0f, 0.05f},          {"defaults", 0.8f, 40, 0.95f, 0.05f},
      {"top_k_large", 1.0f, 2000, 0.9f, 0.01f},
  };
  for (const DistributionCase& c : cases) {
    SCOPED_TRACE(c.name);
    SamplingParams params;
    params.temperature = c.temperature;
    params.top_k = c.top_k;
    params.top_p = c.top_p;
    params.min_p = c.min_p;
    Sampler sampler(params, kVocab);
    expect_distribution_matches(sampler, logits, {}, reference_distribution(logits, params));
  }
}

TEST(SamplerTest, SampledTokensStayInsideTheDistribution) {
  constexpr int kVocab = 50000;
  const std::vector<float> logits = random_logits(kVocab, 5, 3.0f);
  SamplingParams with_top_k;  // defaults: top-k 40, top-p 0.95, min-p 0.05
  SamplingParams nucleus_only = with_top_k;
  nucleus_only.top_k = 0;
  nucleus_only.min_p = 0.0f;
  nucleus_only.temperature = 1.7f;
  for (const SamplingParams& params : {with_top_k, nucleus_only}) {
    Sampler sampler(params, kVocab);
    std::vector<bool> allowed(kVocab, false);
    for (const TokenProbability& tp : sampler.distribution(logits, {})) allowed[tp.token] = true;
    for (int64_t position = 0; position < 500; ++position) {
      ASSERT_TRUE(allowed[sampler.sample(logits, position, {})]) << "top_k " << params.top_k;
    }
  }
}

TEST(SamplerTest, MaskedTokensAreNeverSampled) {
  SamplingParams params;
  params.temperature = 5.0f;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.min_p = 0.0f;
  Sampler sampler(params, 4);
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> logits = {-inf, 0.0f, -inf, -30.0f};
  int low_token_count = 0;
  for (int64_t position = 0; position < 20000; ++position) {
    const int32_t token = sampler.sample(logits, position, {});
    ASSERT_TRUE(token == 1 || token == 3);
    low_token_count += token == 3;
  }
  EXPECT_GT(low_token_count, 0);  // p = e^-6 ~ 0.0025 at T = 5
}

// --- Repetition penalties -------------------------------------------------------------------

TEST(SamplerTest, RepetitionPenaltyFollowsLlamaCppSemantics) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.min_p = 0.0f;
  params.repeat_penalty = 2.0f;
  params.frequency_penalty = 0.25f;
  params.presence_penalty = 0.5f;
  params.repeat_last_n = 4;
  params.seed = 5;
  const std::vector<float> logits = {2.0f, -1.0f, 1.0f, 0.5f, 0.0f};
  // Window = last 4: tokens 0 (x2), 1 (x1), 3 (x1); token 2 only occurs before the window.
  const std::vector<int32_t> history = {2, 2, 0, 1, 0, 3};
  std::vector<float> penalized = logits;
  penalized[0] = 2.0f / 2.0f - 2 * 0.25f - 0.5f;
  penalized[1] = -1.0f * 2.0f - 1 * 0.25f - 0.5f;
  penalized[3] = 0.5f / 2.0f - 1 * 0.25f - 0.5f;
  Sampler sampler(params, 5);
  const std::vector<double> expected = reference_distribution(penalized, params);
  expect_distribution_matches(sampler, logits, history, expected);
  expect_frequencies_match(sampler, logits, history, expected);
}

TEST(SamplerTest, RepetitionPenaltyChangesGreedyChoice) {
  SamplingParams params;
  params.temperature = 0.0f;
  params.repeat_penalty = 1.5f;
  params.repeat_last_n = -1;  // whole history
  Sampler sampler(params, 3);
  const std::vector<float> logits = {3.0f, 2.5f, 0.0f};
  EXPECT_EQ(sampler.sample(logits, 0, {}), 0);
  EXPECT_EQ(sampler.sample(logits, 1, std::vector<int32_t>{0, 1, 2}), 0);  // 2.0 vs 1.67
  EXPECT_EQ(sampler.sample(logits, 1, std::vector<int32_t>{0, 2}), 1);     // 2.0 vs 2.5
  params.repeat_last_n = 1;
  Sampler short_window(params, 3);
  EXPECT_EQ(short_window.sample(logits, 1, std::vector<int32_t>{0, 2}), 0);
}

TEST(SamplerTest, DisabledPenaltyLeavesDistributionUnchanged) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.repeat_last_n = 0;
  params.repeat_penalty = 3.0f;
  Sampler with_history(params, 8), without_history(params, 8);
  const std::vector<float> logits = {2.0f, 1.5f, 0.3f, -0.4f, 1.0f, -1.2f, 0.9f, -3.0f};
  const std::vector<int32_t> history = {0, 0, 1, 4};
  for (int64_t position = 0; position < 100; ++position) {
    EXPECT_EQ(with_history.sample(logits, position, history),
              without_history.sample(logits, position, {}));
  }
}

// --- Stop strings ---------------------------------------------------------------------------

// Feeds pieces, concatenating emitted text; returns {emitted, stopped}.
std::pair<std::string, bool> feed_all(StopStringMatcher& matcher,
                                      const std::vector<std::string>& pieces) {
  std::string emitted;
  bool stopped = false;
  for (const std::string& piece : pieces) {
    const StopStringMatcher::Result result = matcher.feed(piece);
    emitted += result.text;
    stopped = result.stopped;
  }
  if (!stopped) emitted += matcher.flush();
  return {emitted, stopped};
}

TEST(StopStringMatcherTest, NoStopStringsPassesEverythingThrough) {
  StopStringMatcher matcher({});
  const auto result = matcher.feed("hello");
  EXPECT_EQ(result.text, "hello");
  EXPECT_FALSE(result.stopped);
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopStringMatcherTest, EmptyStopStringIsIgnored) {
  StopStringMatcher matcher({"", "END"});
  EXPECT_EQ(matcher.feed("abc").text, "abc");
  EXPECT_TRUE(matcher.feed("xEND").stopped);
  EXPECT_EQ(matcher.matched_index(), 1);
}

TEST(StopStringMatcherTest, StopInsideOnePiece) {
  StopStringMatcher matcher({"</s>"});
  const auto result = matcher.feed("hello</s>world");
  EXPECT_EQ(result.text, "hello");
  EXPECT_TRUE(result.stopped);
  EXPECT_TRUE(matcher.stopped());
  EXPECT_EQ(matcher.feed("more").text, "");
  EXPECT_TRUE(matcher.feed("more").stopped);
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopStringMatcherTest, StopSpanningPieces) {
  StopStringMatcher matcher({"STOP"});
  auto r = matcher.feed("abc S");
  EXPECT_EQ(r.text, "abc ");  // "S" could start the stop string
  EXPECT_FALSE(r.stopped);
  r = matcher.feed("T");
  EXPECT_EQ(r.text, "");
  r = matcher.feed("O");
  EXPECT_EQ(r.text, "");
  r = matcher.feed("Pxyz");
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.stopped);
}

TEST(StopStringMatcherTest, HeldPrefixIsReleasedWhenItStopsMatching) {
  StopStringMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.feed("ab ST").text, "ab ");
  const auto r = matcher.feed("Ay");
  EXPECT_EQ(r.text, "STAy");
  EXPECT_FALSE(r.stopped);
}

TEST(StopStringMatcherTest, FlushReleasesHeldText) {
  StopStringMatcher matcher({"STOP"});
  EXPECT_EQ(matcher.feed("end ST").text, "end ");
  EXPECT_EQ(matcher.flush(), "ST");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopStringMatcherTest, OverlappingPrefixes) {
  // "aab": after "aa" + "a" the tail "aa" (not "aaa") is the live prefix.
  StopStringMatcher matcher({"aab"});
  EXPECT_EQ(matcher.feed("xaa").text, "x");
  EXPECT_EQ(matcher.feed("a").text, "a");
  const auto r = matcher.feed("bc");
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.stopped);
  // After "abab" the live prefix of "abac" is the second "ab", not the first.
  StopStringMatcher self_overlap({"abac"});
  EXPECT_EQ(feed_all(self_overlap, {"ab", "ab", "ac"}), std::make_pair(std::string("ab"), true));
}

TEST(StopStringMatcherTest, EarliestOfSeveralStopStringsWins) {
  StopStringMatcher matcher({"world", "lo w", "\n\n"});
  const auto r = matcher.feed("hello world");
  EXPECT_EQ(r.text, "hel");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(matcher.matched_index(), 1);

  StopStringMatcher split({"User:", "\n\n"});
  EXPECT_EQ(feed_all(split, {"Sure.", "\n", "\nUs", "er: hi"}),
            std::make_pair(std::string("Sure."), true));
  EXPECT_EQ(split.matched_index(), 1);
}

TEST(StopStringMatcherTest, HoldsLongestPrefixAcrossStopStrings) {
  StopStringMatcher matcher({"abc", "bcd"});
  // Tail "ab" is a prefix of "abc", "b" of "bcd": hold "ab".
  EXPECT_EQ(matcher.feed("xab").text, "x");
  const auto r = matcher.feed("cd");  // "abc" starts first
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(matcher.matched_index(), 0);
}

TEST(StopStringMatcherTest, ConcatenationIsPreservedWithoutStop) {
  const std::string text = "the quick brown fox jumps over the lazy dog";
  StopStringMatcher matcher({"the end", "dog!"});
  std::vector<std::string> pieces;
  for (size_t i = 0; i < text.size(); i += 3) pieces.push_back(text.substr(i, 3));
  EXPECT_EQ(feed_all(matcher, pieces), std::make_pair(text, false));
}

}  // namespace
}  // namespace salvo
