// Tests for the speculative-decoding core: draft tree -> batch layout, the verifier's walk, and
// the drafters' proposals. End-to-end equality with plain decoding on real models is checked by
// tests/python/test_speculative_invariant.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <span>
#include <vector>

#include "sampling/sampler.h"
#include "speculative/draft_tree.h"
#include "speculative/drafter.h"
#include "speculative/ngram_drafter.h"
#include "speculative/verifier.h"

namespace salvo {
namespace {

using Ints = std::vector<int32_t>;

// root -> a -> {b, c}; root -> d -> e. Node indices 0..4 in DFS order.
DraftTree branching_tree() {
  DraftTree tree;
  const int32_t a = tree.add(-1, 1);
  tree.add(a, 2);
  tree.add(a, 3);
  const int32_t d = tree.add(-1, 4);
  tree.add(d, 5);
  return tree;
}

std::vector<int32_t> root_children_tokens(const DraftTree& tree) {
  Ints tokens;
  for (const DraftNode& n : tree.nodes()) {
    if (n.parent == -1) tokens.push_back(n.token);
  }
  return tokens;
}

// --- DraftTree and the batch layout -----------------------------------------------------------

TEST(DraftTreeTest, EmptyTreeIsPlainDecoding) {
  TokenBatch batch;
  EXPECT_EQ(append_draft_rows(DraftTree(), 42, 10, 0, batch), 0);
  EXPECT_EQ(batch.tokens, Ints({42}));
  EXPECT_EQ(batch.positions, Ints({10}));
  EXPECT_EQ(batch.parents, Ints({-1}));
  EXPECT_EQ(batch.subtree_end, Ints({0}));
  EXPECT_EQ(batch.n_logit_rows(), 1);
}

TEST(DraftTreeTest, ChainLayoutMatchesAddChain) {
  DraftTree tree;
  const Ints chain = {7, 8, 9};
  tree.add_chain(-1, chain.data(), 3);
  ASSERT_TRUE(tree.is_valid());
  EXPECT_EQ(tree.max_depth(), 3);
  TokenBatch batch;
  append_draft_rows(tree, 6, 20, 0, batch);

  TokenBatch expected;
  const Ints all = {6, 7, 8, 9};
  expected.add_chain(all.data(), 4, 20, 0, /*logits_last_only=*/false);
  EXPECT_EQ(batch.tokens, expected.tokens);
  EXPECT_EQ(batch.positions, expected.positions);
  EXPECT_EQ(batch.parents, expected.parents);
  EXPECT_EQ(batch.subtree_end, expected.subtree_end);
  EXPECT_EQ(batch.want_logits, expected.want_logits);
}

TEST(DraftTreeTest, BranchingLayout) {
  const DraftTree tree = branching_tree();
  ASSERT_TRUE(tree.is_valid());
  TokenBatch batch;
  append_draft_rows(tree, 99, 5, 0, batch);
  // Rows: 0 root, 1 a, 2 b, 3 c, 4 d, 5 e.
  EXPECT_EQ(batch.tokens, Ints({99, 1, 2, 3, 4, 5}));
  EXPECT_EQ(batch.positions, Ints({5, 6, 7, 7, 6, 7}));
  EXPECT_EQ(batch.parents, Ints({-1, 0, 1, 1, 0, 4}));
  EXPECT_EQ(batch.subtree_end, Ints({5, 3, 2, 3, 5, 5}));
  EXPECT_EQ(batch.n_logit_rows(), 6);
  // Attention's visibility rule: row q sees row k iff k <= q <= subtree_end[k].
  auto visible = [&](int k, int q) { return k <= q && q <= batch.subtree_end[k]; };
  EXPECT_TRUE(visible(1, 3));   // a is an ancestor of c
  EXPECT_FALSE(visible(2, 3));  // b is c's sibling
  EXPECT_FALSE(visible(1, 5));  // a is not on e's branch
  EXPECT_TRUE(visible(0, 5));
}

TEST(DraftTreeTest, RowsAppendBehindExistingRows) {
  TokenBatch batch;
  const Ints other = {1, 2};
  batch.add_chain(other.data(), 2, 0, 1, false);
  EXPECT_EQ(append_draft_rows(branching_tree(), 99, 5, 0, batch), 2);
  EXPECT_EQ(batch.parents, Ints({-1, 0, -1, 2, 3, 3, 2, 6}));
  EXPECT_EQ(batch.subtree_end, Ints({1, 1, 7, 5, 4, 5, 7, 7}));
  EXPECT_EQ(batch.seq_ids, Ints({1, 1, 0, 0, 0, 0, 0, 0}));
}

TEST(DraftTreeTest, FindChild) {
  const DraftTree tree = branching_tree();
  EXPECT_EQ(tree.find_child(-1, 1), 0);
  EXPECT_EQ(tree.find_child(-1, 4), 3);
  EXPECT_EQ(tree.find_child(-1, 2), -1);  // a grandchild, not a child
  EXPECT_EQ(tree.find_child(0, 3), 2);
  EXPECT_EQ(tree.find_child(1, 3), -1);
  EXPECT_EQ(tree.find_child(3, 5), 4);
}

TEST(DraftTreeTest, ValidityRejectsBrokenOrders) {
  DraftTree not_dfs;  // c hangs below a after a's subtree was closed by b
  const int32_t a = not_dfs.add(-1, 1);
  not_dfs.add(-1, 2);
  not_dfs.add(a, 3);
  EXPECT_FALSE(not_dfs.is_valid());

  DraftTree twins;  // two siblings with one token
  twins.add(-1, 1);
  twins.add(-1, 1);
  EXPECT_FALSE(twins.is_valid());
}

// --- Verifier -------------------------------------------------------------------------------

constexpr int32_t kVocab = 8;

std::vector<float> one_hot_rows(const Ints& argmax) {
  std::vector<float> logits(argmax.size() * kVocab, 0.0f);
  for (size_t r = 0; r < argmax.size(); ++r) logits[r * kVocab + argmax[r]] = 5.0f;
  return logits;
}

Sampler greedy_sampler() {
  SamplingParams params;
  params.temperature = 0.0f;
  return Sampler(params, kVocab);
}

TEST(VerifierTest, WalksToALeafThenTakesTheBonus) {
  const DraftTree tree = branching_tree();
  // Rows: root, a, b, c, d, e. Root picks 4 (d), d picks 5 (e), e picks 7 (bonus).
  const auto logits = one_hot_rows({4, 0, 0, 0, 5, 7});
  Sampler sampler = greedy_sampler();
  Ints history = {3, 3, 99};
  const AcceptResult r = Verifier().accept(tree, logits, sampler, history);
  EXPECT_EQ(r.path, Ints({3, 4}));
  EXPECT_EQ(r.bonus_token, 7);
  EXPECT_FALSE(r.rejected_draft);
  EXPECT_EQ(r.tokens(tree), Ints({4, 5, 7}));
  EXPECT_EQ(r.kept_rows(), Ints({0, 4, 5}));
  EXPECT_EQ(history, Ints({3, 3, 99, 4, 5}));
}

TEST(VerifierTest, StopsAtTheFirstMismatch) {
  const DraftTree tree = branching_tree();
  const auto logits = one_hot_rows({1, 6, 0, 0, 0, 0});  // root -> a, then a picks 6
  Sampler sampler = greedy_sampler();
  Ints history = {99};
  const AcceptResult r = Verifier().accept(tree, logits, sampler, history);
  EXPECT_EQ(r.path, Ints({0}));
  EXPECT_EQ(r.bonus_token, 6);
  EXPECT_TRUE(r.rejected_draft);
  EXPECT_EQ(r.kept_rows(), Ints({0, 1}));
}

// The same walk from argmax ids (a greedy pass through Model::forward_argmax) as from logits.
TEST(VerifierTest, ArgmaxIdsWalkLikeLogits) {
  const DraftTree tree = branching_tree();
  for (const Ints& picks :
       {Ints{4, 0, 0, 0, 5, 7}, Ints{1, 6, 0, 0, 0, 0}, Ints{7, 1, 1, 1, 1, 1}}) {
    Sampler sampler = greedy_sampler();
    Ints from_logits = {99}, from_ids = {99};
    const AcceptResult a = Verifier().accept(tree, one_hot_rows(picks), sampler, from_logits);
    const AcceptResult b = Verifier().accept(tree, LogitRows{.argmax = picks}, sampler, from_ids);
    EXPECT_EQ(a.path, b.path);
    EXPECT_EQ(a.bonus_token, b.bonus_token);
    EXPECT_EQ(a.rejected_draft, b.rejected_draft);
    EXPECT_EQ(from_logits, from_ids);
  }
}

TEST(VerifierTest, EmptyTreeSamplesOneToken) {
  const auto logits = one_hot_rows({2});
  Sampler sampler = greedy_sampler();
  Ints history = {1};
  const AcceptResult r = Verifier().accept(DraftTree(), logits, sampler, history);
  EXPECT_TRUE(r.path.empty());
  EXPECT_EQ(r.bonus_token, 2);
  EXPECT_FALSE(r.rejected_draft);
  EXPECT_EQ(r.kept_rows(), Ints({0}));
}

// With temperature and penalties, the walk samples each position exactly as sequential decoding
// with the same (seed, position, logits, history) would.
TEST(VerifierTest, StochasticWalkEqualsSequentialSampling) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.top_k = 0;
  params.top_p = 1.0f;
  params.min_p = 0.0f;
  params.repeat_penalty = 1.3f;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (uint64_t seed = 0; seed < 50; ++seed) {
    params.seed = seed;
    // Every node at depth d offers two tokens, so paths of several nodes get accepted often.
    DraftTree tree;
    int32_t parent = -1;
    for (int d = 0; d < 4; ++d) {
      tree.add(parent, (d + 1) % kVocab);
      parent = tree.add(parent, (d + 2) % kVocab);
    }
    std::vector<float> logits((tree.size() + 1) * kVocab);
    for (float& x : logits) x = normal(rng);
    const Ints prefix = {1, 2, 3, 2};

    Sampler sampler(params, kVocab);
    Ints history = prefix;
    const AcceptResult r = Verifier().accept(tree, logits, sampler, history);

    Sampler reference(params, kVocab);
    Ints expected_history = prefix;
    int32_t node = -1;
    for (size_t step = 0; step <= r.path.size(); ++step) {
      const std::span<const float> row(logits.data() + (node + 1) * kVocab, kVocab);
      const int32_t token = reference.sample(row, expected_history.size(), expected_history);
      if (step == r.path.size()) {
        EXPECT_EQ(token, r.bonus_token);
        EXPECT_EQ(tree.find_child(node, token), -1);
      } else {
        node = r.path[step];
        EXPECT_EQ(token, tree.nodes()[node].token);
        expected_history.push_back(token);
      }
    }
    EXPECT_EQ(history, expected_history);
  }
}

// --- Drafters -------------------------------------------------------------------------------

Ints leftmost_path(const DraftTree& tree) {
  Ints tokens;
  int32_t expected_parent = -1;
  for (int32_t i = 0; i < tree.size(); ++i) {
    if (tree.nodes()[i].parent != expected_parent) break;
    tokens.push_back(tree.nodes()[i].token);
    expected_parent = i;
  }
  return tokens;
}

TEST(NgramDrafterTest, ContinuesARepeatingPattern) {
  NgramDrafter drafter;
  const Ints context = {1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3};
  EXPECT_EQ(drafter.propose(context, 16, 6).max_depth(), 6);
  // The suffix "1 2 3 4 5 1 2 3" matches 8 tokens back: more than one period, so the draft
  // continues the period past the root.
  EXPECT_EQ(drafter.longest_match(), 8);
  const DraftTree tree = drafter.propose(context, 16, 6);
  ASSERT_TRUE(tree.is_valid());
  EXPECT_EQ(leftmost_path(tree), Ints({4, 5, 1, 2, 3, 4}));
  EXPECT_LE(tree.size(), 16);
}

// An edited copy: the prompt quotes a span, the answer copies it. The occurrence inside the long
// copied span wins over a more recent occurrence of a shorter suffix, and its chain runs as deep
// as the match is long.
TEST(NgramDrafterTest, LongestMatchFirstAndAsDeepAsItRuns) {
  Ints quoted;
  for (int32_t t = 100; t < 150; ++t) quoted.push_back(t);
  Ints context = {1, 2, 3};
  context.insert(context.end(), quoted.begin(), quoted.end());
  // Generated: a preamble in which "104 105" was followed by something else, then the copy.
  context.insert(context.end(), {7, 104, 105, 50, 8});
  NgramDrafter drafter;
  for (int copied = 1; copied <= 24; ++copied) {
    Ints now = context;
    now.insert(now.end(), quoted.begin(), quoted.begin() + copied);
    const DraftTree tree = drafter.propose(now, 32, 20);
    ASSERT_TRUE(tree.is_valid());
    EXPECT_EQ(drafter.longest_match(), copied) << copied;
    // As deep as the match is long, up to the cap.
    const int depth = std::min(20, copied);
    const Ints expected(quoted.begin() + copied, quoted.begin() + copied + depth);
    EXPECT_EQ(leftmost_path(tree), expected) << copied;
  }
  // After "... 103 104 105" both occurrences of "104 105" continue: 106 (matching 6 tokens, the
  // copy) first, 50 (matching 2, the preamble) as a shallower sibling.
  Ints now = context;
  now.insert(now.end(), quoted.begin(), quoted.begin() + 6);
  const DraftTree tree = drafter.propose(now, 32, 20);
  EXPECT_EQ(root_children_tokens(tree), Ints({106, 50}));
  EXPECT_EQ(tree.max_depth(), 6);
  EXPECT_EQ(tree.size(), 6 + 2);  // the sibling drafts 2 tokens: 50 8
}

// A one-token match is weak evidence: it drafts one guess, not a deep chain of rows.
TEST(NgramDrafterTest, ShortMatchesDraftShallow) {
  NgramDrafter drafter;
  const Ints context = {5, 1, 2, 3, 4, 6, 7, 8, 9, 5};
  const DraftTree tree = drafter.propose(context, 16, 8);
  ASSERT_TRUE(tree.is_valid());
  EXPECT_EQ(leftmost_path(tree), Ints({1}));
  EXPECT_EQ(tree.size(), 1);
  // Wider candidates on request: every occurrence of the one-token suffix branches.
  NgramDrafter wide(NgramOptions{.max_candidates = 4});
  const DraftTree branches = wide.propose(Ints{5, 1, 5, 2, 5, 3, 5}, 16, 8);
  EXPECT_EQ(root_children_tokens(branches), Ints({3, 2, 1}));  // most recent first
}

TEST(NgramDrafterTest, DivergingContinuationsBecomeSiblings) {
  NgramDrafter drafter;
  // "7 1" was followed once by 2 and once by 3.
  const DraftTree tree = drafter.propose(Ints{7, 1, 2, 9, 7, 1, 3, 9, 7, 1}, 16, 3);
  ASSERT_TRUE(tree.is_valid());
  Ints children = root_children_tokens(tree);
  std::sort(children.begin(), children.end());
  EXPECT_EQ(children, Ints({2, 3}));
  // "9 7 1" matches before the 3: the longer match weighs more and its branch comes first.
  EXPECT_EQ(leftmost_path(tree), Ints({3, 9, 7}));
  EXPECT_EQ(drafter.longest_match(), 3);
}

TEST(NgramDrafterTest, RespectsBudgetAndDepth) {
  NgramDrafter drafter;
  Ints context;
  std::mt19937 rng(1);
  for (int i = 0; i < 400; ++i) context.push_back(static_cast<int32_t>(rng() % 6));
  for (int budget : {0, 1, 3, 16, 64}) {
    for (int depth : {0, 1, 2, 8}) {
      const DraftTree tree = drafter.propose(context, budget, depth);
      EXPECT_TRUE(tree.is_valid());
      EXPECT_LE(tree.size(), budget);
      EXPECT_LE(tree.max_depth(), depth);
      if (budget > 0 && depth > 0) EXPECT_FALSE(tree.empty());
    }
  }
}

TEST(NgramDrafterTest, NoMatchNoDraft) {
  NgramDrafter drafter;
  EXPECT_TRUE(drafter.propose(Ints{1, 2, 3, 4}, 16, 8).empty());
  NgramDrafter bigrams_only(NgramOptions{.min_n = 2});
  EXPECT_TRUE(bigrams_only.propose(Ints{1, 2, 3, 1}, 16, 8).empty());
  EXPECT_FALSE(bigrams_only.propose(Ints{1, 2, 3, 1, 2}, 16, 8).empty());
}

// Filling: past what the matches vouch for, the tree still uses the budget it is given, the
// confident chain first.
TEST(NgramDrafterTest, FillingUsesTheBudget) {
  NgramDrafter filling(NgramOptions{.max_candidates = 8, .fill_budget = true});
  NgramDrafter shallow;
  // "5" occurred three times, followed by 1 2 3 / 6 7 0 / 8 9 10: one-token matches.
  const Ints context = {5, 1, 2, 3, 4, 5, 6, 7, 0, 5, 8, 9, 10, 5};
  EXPECT_EQ(shallow.propose(context, 16, 8).max_depth(), 1);
  const DraftTree tree = filling.propose(context, 8, 3);
  ASSERT_TRUE(tree.is_valid());
  EXPECT_EQ(tree.size(), 8);  // three chains of up to 3: 3 + 3 + 3 > 8
  EXPECT_EQ(tree.max_depth(), 3);
  EXPECT_EQ(root_children_tokens(tree), Ints({8, 6, 1}));  // most recent first
}

// The index follows a context that grows, is rewound or replaced, as a fresh drafter would.
TEST(NgramDrafterTest, IncrementalIndexEqualsFreshIndex) {
  NgramDrafter incremental;
  std::mt19937 rng(7);
  Ints context;
  for (int step = 0; step < 300; ++step) {
    const uint32_t action = rng() % 10;
    if (action < 7) {
      context.push_back(static_cast<int32_t>(rng() % 5));
    } else if (action < 9 && !context.empty()) {
      context.resize(rng() % context.size());
    } else if (!context.empty()) {
      context[rng() % context.size()] = static_cast<int32_t>(rng() % 5);
    }
    NgramDrafter fresh;
    const DraftTree a = incremental.propose(context, 12, 5);
    const DraftTree b = fresh.propose(context, 12, 5);
    ASSERT_EQ(a.size(), b.size()) << "step " << step;
    for (int32_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a.nodes()[i].token, b.nodes()[i].token);
      EXPECT_EQ(a.nodes()[i].parent, b.nodes()[i].parent);
    }
  }
}

TEST(TestingDraftersTest, ProposeValidTreesWithinLimits) {
  std::mt19937 rng(5);
  Ints context;
  for (int i = 0; i < 200; ++i) context.push_back(static_cast<int32_t>(rng() % 20));
  for (SpecMode mode : {SpecMode::kRandom, SpecMode::kWrong, SpecMode::kDeep, SpecMode::kAuto}) {
    auto made = make_drafter(mode, {.n_vocab = 1000, .seed = 11});
    ASSERT_TRUE(made.ok());
    auto& drafter = *made;
    ASSERT_NE(drafter, nullptr);
    for (int budget : {0, 1, 5, 32}) {
      for (int depth : {0, 1, 4, 40}) {
        const DraftTree tree = drafter->propose(context, budget, depth);
        EXPECT_TRUE(tree.is_valid()) << spec_mode_name(mode);
        EXPECT_LE(tree.size(), budget);
        EXPECT_LE(tree.max_depth(), depth);
      }
    }
  }
  EXPECT_EQ(make_drafter(SpecMode::kNone, {.n_vocab = 1000}).value(), nullptr);
  // The draft-model drafter cannot exist without its model.
  const auto no_model = make_drafter(SpecMode::kDraft, {.n_vocab = 1000});
  ASSERT_FALSE(no_model.ok());
  EXPECT_NE(no_model.status().message().find("--draft-model"), std::string::npos);
}

TEST(SpecOptionsTest, ParsesAndValidates) {
  EXPECT_EQ(parse_spec_mode("ngram").value(), SpecMode::kNgram);
  EXPECT_EQ(parse_spec_mode("none").value(), SpecMode::kNone);
  EXPECT_EQ(parse_spec_mode("draft").value(), SpecMode::kDraft);
  EXPECT_FALSE(parse_spec_mode("eagle").ok());
  EXPECT_TRUE(SpecOptions{}.validate().ok());
  EXPECT_TRUE((SpecOptions{.budget = SpecOptions::kDrafterCaps}).validate().ok());
  EXPECT_FALSE((SpecOptions{.budget = -2}).validate().ok());
  EXPECT_FALSE((SpecOptions{.depth = -2}).validate().ok());
  EXPECT_FALSE((SpecOptions{.depth = 1000}).validate().ok());
}

}  // namespace
}  // namespace salvo
