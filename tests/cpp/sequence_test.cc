// Several Sequences stepped through shared forward passes (what the server's scheduler does)
// produce exactly the tokens each produces alone through Session (the CLI's path): prompts
// prefilled in small chunks beside other sequences' decode rows and draft trees, sequences
// joining while others run, greedy and seeded sampling, drafting on and off.
#include "engine/sequence.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/session.h"

namespace salvo {
namespace {

std::string model_path() {
  const char* env = std::getenv("SALVO_MODELS");
  return std::string(env ? env : SALVO_SOURCE_DIR "/models") + "/smollm2-135m.gguf";
}

struct Case {
  const char* prompt;
  float temperature;
  uint64_t seed;
  SpecMode spec;
};

const Case kCases[] = {
    {"The quick brown fox jumps over the lazy dog. The quick brown", 0.0f, 1, SpecMode::kNgram},
    {"def add(a, b):\n    return", 0.9f, 42, SpecMode::kNone},
    {"Once upon a time, in a small village,", 0.7f, 7, SpecMode::kRandom},
    {"1, 2, 3, 4, 5, 6,", 0.0f, 3, SpecMode::kAuto},
};

// SmolLM2 on 2 threads; null (and a test failure) where it cannot be loaded.
std::unique_ptr<Engine> load_engine() {
  const std::string path = model_path();
  if (!std::filesystem::exists(path)) {
    ADD_FAILURE() << path << " not found (set SALVO_MODELS)";
    return nullptr;
  }
  auto loaded = Engine::load(path, {.threads = 2});
  if (!loaded.ok()) {
    ADD_FAILURE() << loaded.status().message();
    return nullptr;
  }
  return std::move(loaded).value();
}

GenerateRequest make_request(const Engine& engine, const Case& c) {
  GenerateRequest r;
  r.prompt = engine.tokenizer().encode(c.prompt, /*add_special=*/true, /*parse_special=*/false);
  r.max_tokens = 16;
  r.sampling.temperature = c.temperature;
  r.sampling.seed = c.seed;
  r.spec.mode = c.spec;
  r.ignore_eos = true;
  return r;
}

TEST(Sequence, SharedPassesEqualSessionsAlone) {
  std::unique_ptr<Engine> loaded = load_engine();
  ASSERT_NE(loaded, nullptr);
  Engine& engine = *loaded;
  constexpr int kContext = 256;
  const int n = static_cast<int>(std::size(kCases));

  std::vector<GenerationResult> alone;
  for (const Case& c : kCases) {
    Session session(engine.model(), engine.tokenizer(), engine.pool(), kContext);
    auto result = session.generate(make_request(engine, c), nullptr);
    ASSERT_TRUE(result.ok()) << result.status().message();
    alone.push_back(std::move(result).value());
  }

  KvCache kv(engine.model().config(), n, kContext);
  std::vector<std::unique_ptr<Sequence>> sequences;
  for (int i = 0; i < n; ++i) {
    sequences.push_back(std::make_unique<Sequence>(engine.model(), engine.tokenizer(), kv, i));
  }
  std::vector<std::string> texts(n);
  std::vector<GenerationResult> together(n);
  std::vector<bool> finished(n, false);
  TokenBatch batch;
  std::vector<float> logits;
  const int32_t n_vocab = engine.model().config().n_vocab;
  for (int pass = 0; std::find(finished.begin(), finished.end(), false) != finished.end(); ++pass) {
    // Sequence i joins at pass 2 * i; prompts arrive 5 rows per pass.
    for (int i = 0; i < n; ++i) {
      if (pass == 2 * i) {
        ASSERT_TRUE(sequences[i]->start(make_request(engine, kCases[i]), nullptr).ok());
      }
    }
    batch.clear();
    std::vector<std::pair<int, int>> logit_rows;  // (sequence, rows)
    for (int i = n - 1; i >= 0; --i) {            // not in slot order: order must not matter
      if (sequences[i]->active()) logit_rows.push_back({i, sequences[i]->add_rows(batch, 5)});
    }
    ASSERT_FALSE(batch.empty());
    ASSERT_TRUE(engine.model().forward(engine.pool(), batch, kv, logits).ok());
    size_t offset = 0;
    for (auto [i, rows] : logit_rows) {
      const size_t size = static_cast<size_t>(rows) * n_vocab;
      sequences[i]->finish_pass(std::span<const float>(logits.data() + offset, size), 1.0);
      offset += size;
      if (sequences[i]->done()) {
        together[i] = sequences[i]->take_result();
        finished[i] = true;
      }
    }
  }
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(together[i].tokens, alone[i].tokens) << kCases[i].prompt;
    EXPECT_EQ(together[i].text, alone[i].text) << kCases[i].prompt;
    EXPECT_EQ(together[i].stats.generated_tokens, 16);
  }
}

// Unset caps are the drafter's (Drafter::default_caps: 16 nodes 8 deep unless the drafter says
// otherwise); caps the request names win. The "deep" drafter proposes one chain as deep as it
// may, so the first decode pass has 1 + depth rows.
TEST(Sequence, TreeCapsDefaultToTheDrafters) {
  std::unique_ptr<Engine> loaded = load_engine();
  ASSERT_NE(loaded, nullptr);
  Engine& engine = *loaded;
  for (const int depth : {SpecOptions::kDrafterCaps, 3}) {
    KvCache kv(engine.model().config(), 1, 256);
    Sequence sequence(engine.model(), engine.tokenizer(), kv, 0);
    GenerateRequest request = make_request(engine, {"1, 2, 3, 4, 5, 6,", 0.0f, 1, SpecMode::kDeep});
    request.spec.depth = depth;
    ASSERT_TRUE(sequence.start(request, nullptr).ok());
    TokenBatch batch;
    std::vector<float> logits;
    int rows = sequence.add_rows(batch, 256);  // the whole prompt
    ASSERT_TRUE(engine.model().forward(engine.pool(), batch, kv, logits).ok());
    sequence.finish_pass(logits, 1.0);
    batch.clear();
    rows = sequence.add_rows(batch, 256);  // the first decode pass
    EXPECT_EQ(rows, 1 + (depth == SpecOptions::kDrafterCaps ? 8 : 3));
  }
}

}  // namespace
}  // namespace salvo
