// What a DFlash drafter asks its runner for. Ids (SpecOptions::vocab): by default the frequent
// ids for small trees and every id from DflashDrafter::kLargeTree nodes on, where the rare
// tokens add tokens a pass (session 41: code at 64 nodes on the H200, 4.86 -> 4.99 median) and
// the head's extra rows cost little next to the verification pass. Candidates a depth: the
// adapter's top_k for small adapter trees, kWideCandidates for large ones. The runner here
// records each draft's request; the drafter's config comes from the shipped SmolLM2 drafter.
#include "speculative/dflash_drafter.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "speculative/dflash_model.h"
#include "speculative/dflash_runner.h"

namespace salvo {
namespace {

class RecordingRunner : public DflashRunner {
 public:
  RecordingRunner(std::vector<int32_t>* asked, std::vector<int>* widths)
      : asked_(asked), widths_(widths) {}
  int32_t n_positions() const override { return n_positions_; }
  Status observe(int32_t first, int32_t n, const float*) override {
    n_positions_ = first + n;
    return Status();
  }
  int max_width() const override { return 16; }
  void draft(int32_t, int depth, int width, int32_t n_tokens,
             std::vector<Candidates>& depths) override {
    asked_->push_back(n_tokens);
    widths_->push_back(width);
    depths.assign(depth, Candidates());
    for (int d = 0; d < depth; ++d) {
      for (int i = 0; i < width; ++i) {
        depths[d].tokens.push_back(i);
        depths[d].logprobs.push_back(-1.0f - i);
      }
    }
  }
  void adapter_scores(int, int32_t, std::span<const int32_t> candidates, float* scores) override {
    for (size_t i = 0; i < candidates.size(); ++i) scores[i] = -static_cast<float>(i);
  }

 private:
  std::vector<int32_t>* asked_;
  std::vector<int>* widths_;
  int32_t n_positions_ = 0;
};

class DflashDrafterVocab : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* env = std::getenv("SALVO_MODELS");
    const std::string path =
        std::string(env ? env : SALVO_SOURCE_DIR "/models") + "/smollm2-135m.gguf";
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found (set SALVO_MODELS)";
    auto target = load_model(path);
    ASSERT_TRUE(target.ok()) << target.status().message();
    target_ = std::move(*target);
    auto drafter = DflashModel::load(SALVO_SOURCE_DIR "/drafters/smollm2-135m", *target_);
    ASSERT_TRUE(drafter.ok()) << drafter.status().message();
    drafter_ = std::move(*drafter);
  }

  // The ids each propose() of `budgets` asked for, from a drafter made with n_tokens and
  // small_tree_tokens; the candidates a depth each asked for go to `widths`.
  std::vector<int32_t> asked(int32_t n_tokens, int32_t small_tree_tokens,
                             const std::vector<int>& budgets, std::vector<int>* widths = nullptr,
                             SpecTree kind = SpecTree::kAdapter) {
    std::vector<int32_t> out;
    std::vector<int> ignored;
    DflashDrafter d(*drafter_, std::make_unique<RecordingRunner>(&out, widths ? widths : &ignored),
                    n_tokens, kind, small_tree_tokens);
    const std::vector<float> features(drafter_->config().feature_width(), 0.0f);
    d.observe(0, 1, features.data());
    const std::vector<int32_t> context = {1, 2};
    for (int budget : budgets) {
      const DraftTree tree = d.propose(context, budget, 15);
      EXPECT_TRUE(tree.is_valid());
      EXPECT_EQ(tree.size(), kind == SpecTree::kChain ? std::min(budget, 15) : budget);
    }
    return out;
  }

  std::unique_ptr<Model> target_;
  std::unique_ptr<DflashModel> drafter_;
};

TEST_F(DflashDrafterVocab, SmallTreesDraftTheFrequentIdsLargeTreesEveryId) {
  const int big = DflashDrafter::kLargeTree;
  EXPECT_EQ(asked(49152, 32768, {7, big - 1, big, 64, 7}),
            (std::vector<int32_t>{32768, 32768, 49152, 49152, 32768}));
}

TEST_F(DflashDrafterVocab, OneVocabularyWhenTheSmallTreesHaveNoneOfTheirOwn) {
  EXPECT_EQ(asked(40000, 0, {7, 64}), (std::vector<int32_t>{40000, 40000}));
}

TEST_F(DflashDrafterVocab, LargeAdapterTreesAskForWideCandidateLists) {
  const int big = DflashDrafter::kLargeTree, wide = DflashDrafter::kWideCandidates;
  ASSERT_EQ(drafter_->config().adapter_top_k, 8);
  std::vector<int> widths;
  asked(49152, 0, {7, big - 1, big, 64, 7}, &widths);
  EXPECT_EQ(widths, (std::vector<int>{8, 8, wide, wide, 8}));
  // Best-first trees keep at most 8 siblings at every size; chains one.
  widths.clear();
  asked(49152, 0, {4, 64}, &widths, SpecTree::kBest);
  EXPECT_EQ(widths, (std::vector<int>{4, 8}));
  widths.clear();
  asked(49152, 0, {64}, &widths, SpecTree::kChain);
  EXPECT_EQ(widths, (std::vector<int>{1}));
}

TEST(DflashDrafterVocabularies, FollowSpecOptions) {
  using V = std::pair<int32_t, int32_t>;  // small trees, large trees
  EXPECT_EQ(DflashDrafter::vocabularies(151936, SpecOptions::kVocabByTree), V(65536, 151936));
  EXPECT_EQ(DflashDrafter::vocabularies(49152, SpecOptions::kVocabByTree), V(49152, 49152));
  EXPECT_EQ(DflashDrafter::vocabularies(151936, 0), V(151936, 151936));
  EXPECT_EQ(DflashDrafter::vocabularies(151936, 32768), V(32768, 32768));
  EXPECT_EQ(DflashDrafter::vocabularies(49152, 65536), V(49152, 49152));
  EXPECT_EQ(SpecOptions{}.vocab, SpecOptions::kVocabByTree);
  EXPECT_TRUE(SpecOptions{}.validate().ok());
  EXPECT_FALSE((SpecOptions{.vocab = -2}).validate().ok());
}

}  // namespace
}  // namespace salvo
