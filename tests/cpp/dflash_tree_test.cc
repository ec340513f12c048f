// The DFlash tree builders (dflash_tree.h) against brute force: with per-depth candidates whose
// log-probabilities are negative, the `budget` best nodes by cumulative log-probability are
// closed under ancestors, so the best-first tree must be exactly those nodes.
#include "speculative/dflash_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <vector>

namespace salvo {
namespace {

using Path = std::vector<int32_t>;  // tokens from depth 1 down

// Every node's token path.
std::vector<Path> paths_of(const DraftTree& tree) {
  std::vector<Path> paths;
  for (const DraftNode& n : tree.nodes()) {
    Path p = n.parent < 0 ? Path{} : paths[n.parent];
    p.push_back(n.token);
    paths.push_back(p);
  }
  return paths;
}

// All nodes up to max_depth with their scores, under `children`, best `budget` of them.
std::vector<Path> brute_force(const ChildScorer& children, int32_t root, int budget,
                              int max_depth) {
  std::vector<std::pair<double, Path>> all;
  std::vector<std::pair<double, Path>> frontier = {{0.0, {}}};
  for (int depth = 1; depth <= max_depth; ++depth) {
    std::vector<std::pair<double, Path>> next;
    for (const auto& [score, path] : frontier) {
      const Candidates c = children(depth, path.empty() ? root : path.back(), path);
      for (size_t i = 0; i < c.size(); ++i) {
        Path p = path;
        p.push_back(c.tokens[i]);
        next.push_back({score + c.logprobs[i], p});
      }
    }
    all.insert(all.end(), next.begin(), next.end());
    frontier = next;
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<Path> best;
  for (int i = 0; i < budget && i < static_cast<int>(all.size()); ++i)
    best.push_back(all[i].second);
  std::sort(best.begin(), best.end());
  return best;
}

Candidates random_candidates(std::mt19937& rng, int k, int32_t n_vocab) {
  std::vector<float> logits(n_vocab);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& l : logits) l = normal(rng);
  return top_candidates(logits.data(), n_vocab, n_vocab, k);
}

TEST(DflashTree, TopCandidatesAreTheLogSoftmaxOfTheBest) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  const Candidates c = top_candidates(logits.data(), 5, 5, 3);
  ASSERT_EQ(c.tokens, (std::vector<int32_t>{1, 3, 2}));  // the tie goes to the lower id
  double z = 0;
  for (float l : logits) z += std::exp(l);
  EXPECT_NEAR(c.logprobs[0], 3.0 - std::log(z), 1e-5);
  EXPECT_NEAR(c.logprobs[2], 2.0 - std::log(z), 1e-5);
  // Ids at or above n_tokens (padding rows) are never proposed.
  const Candidates limited = top_candidates(logits.data(), 5, 3, 5);
  EXPECT_EQ(limited.tokens, (std::vector<int32_t>{1, 2, 0}));
}

// The one-scan selection (k up to 32) and the partial sort (more) both give the k best ids below
// n_tokens, ties to the lower id, with log-softmax over the whole row: a full sort's answer, on a
// vocabulary-sized row with many ties.
TEST(DflashTree, TopCandidatesEqualAFullSort) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> level(-400, 400);
  std::vector<float> logits(49152);
  for (float& l : logits) l = static_cast<float>(level(rng)) / 40;  // ~80 ids share each value
  double z = 0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  for (const int32_t n_tokens : {49152, 30000}) {
    std::vector<int32_t> order(n_tokens);
    for (int32_t i = 0; i < n_tokens; ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    for (const int k : {1, 8, 32, 33, 100}) {
      const Candidates c = top_candidates(logits.data(), 49152, n_tokens, k);
      ASSERT_EQ(c.tokens, std::vector<int32_t>(order.begin(), order.begin() + k)) << k;
      for (int i = 0; i < k; ++i) {
        EXPECT_NEAR(c.logprobs[i], logits[c.tokens[i]] - std::log(z), 1e-4) << k << " " << i;
      }
    }
  }
}

TEST(DflashTree, ChainTakesEachDepthsBest) {
  std::mt19937 rng(1);
  std::vector<Candidates> depths;
  for (int d = 0; d < 6; ++d) depths.push_back(random_candidates(rng, 4, 50));
  const DraftTree tree = chain_tree(depths, 16, 4);
  ASSERT_EQ(tree.size(), 4);
  EXPECT_TRUE(tree.is_valid());
  for (int d = 0; d < 4; ++d) {
    EXPECT_EQ(tree.nodes()[d].token, depths[d].tokens[0]);
    EXPECT_EQ(tree.nodes()[d].parent, d - 1);
  }
  EXPECT_EQ(chain_tree(depths, 2, 8).size(), 2);
  EXPECT_EQ(chain_tree(depths, 0, 8).size(), 0);
}

TEST(DflashTree, BestFirstFromMarginalsIsTheBudgetBestNodes) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 50; ++trial) {
    const int max_depth = 1 + trial % 5, k = 1 + trial % 4;
    std::vector<Candidates> depths;
    for (int d = 0; d < 6; ++d) depths.push_back(random_candidates(rng, k, 40));
    for (int budget : {1, 3, 8, 20}) {
      const DraftTree tree = best_first_tree(depths, budget, max_depth);
      ASSERT_TRUE(tree.is_valid());
      EXPECT_LE(tree.max_depth(), max_depth);
      std::vector<Path> got = paths_of(tree);
      std::sort(got.begin(), got.end());
      const auto scorer = [&](int depth, int32_t, std::span<const int32_t>) {
        return depths[depth - 1];
      };
      EXPECT_EQ(got, brute_force(scorer, -1, budget, max_depth))
          << "trial " << trial << " budget " << budget;
    }
  }
}

TEST(DflashTree, BestFirstWithParentDependentChildren) {
  // An adapter: a node's children depend on its token.
  std::mt19937 rng(3);
  std::map<std::pair<int, int32_t>, Candidates> table;
  const ChildScorer scorer = [&](int depth, int32_t parent, std::span<const int32_t>) {
    auto it = table.find({depth, parent});
    if (it == table.end())
      it = table.emplace(std::make_pair(depth, parent), random_candidates(rng, 3, 30)).first;
    return it->second;
  };
  for (int budget : {1, 5, 16, 40}) {
    const DraftTree tree = best_first_tree(scorer, 7, budget, 4);
    ASSERT_TRUE(tree.is_valid());
    std::vector<Path> got = paths_of(tree);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, brute_force(scorer, 7, budget, 4)) << "budget " << budget;
  }
}

TEST(DflashTree, BestFirstGivesEachNodeItsPath) {
  // Children that depend on the whole path (the DFlash drafter's context boost): the scorer is
  // asked at depth d with the d - 1 tokens above, the last being the parent's.
  std::mt19937 rng(4);
  std::map<Path, Candidates> table;
  const ChildScorer scorer = [&](int depth, int32_t parent, std::span<const int32_t> path) {
    EXPECT_EQ(static_cast<int>(path.size()), depth - 1);
    EXPECT_EQ(parent, path.empty() ? 7 : path.back());
    const Path key(path.begin(), path.end());
    auto it = table.find(key);
    if (it == table.end()) it = table.emplace(key, random_candidates(rng, 3, 30)).first;
    return it->second;
  };
  for (int budget : {1, 6, 15, 40}) {
    const DraftTree tree = best_first_tree(scorer, 7, budget, 5);
    ASSERT_TRUE(tree.is_valid());
    std::vector<Path> got = paths_of(tree);
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, brute_force(scorer, 7, budget, 5)) << "budget " << budget;
  }
}

// The policy prices every budget below the one verified from the tree's order
// (SpecPolicy::record_budgets), which holds only if the nodes of order below n are the tree the
// builder grows for a budget of n, for every tree shape it makes.
TEST(DflashTree, TheOrderGivesEverySmallerBudgetsTree) {
  std::mt19937 rng(5);
  std::map<std::pair<int, int32_t>, Candidates> table;
  const ChildScorer adapter = [&](int depth, int32_t parent, std::span<const int32_t>) {
    auto it = table.find({depth, parent});
    if (it == table.end())
      it = table.emplace(std::make_pair(depth, parent), random_candidates(rng, 3, 30)).first;
    return it->second;
  };
  std::vector<Candidates> depths;
  for (int d = 0; d < 6; ++d) depths.push_back(random_candidates(rng, 4, 40));
  const std::vector<std::function<DraftTree(int)>> builders = {
      [&](int budget) { return best_first_tree(adapter, 7, budget, 5); },
      [&](int budget) { return best_first_tree(depths, budget, 5); },
      [&](int budget) { return chain_tree(depths, budget, 5); },
  };
  for (size_t b = 0; b < builders.size(); ++b) {
    const DraftTree full = builders[b](24);
    ASSERT_TRUE(full.has_order());
    std::vector<int32_t> orders;
    for (int32_t i = 0; i < full.size(); ++i) {
      orders.push_back(full.order(i));
      // A node is grown after its parent.
      const int32_t parent = full.nodes()[i].parent;
      if (parent >= 0) EXPECT_GT(full.order(i), full.order(parent));
    }
    std::sort(orders.begin(), orders.end());
    for (int32_t i = 0; i < full.size(); ++i) ASSERT_EQ(orders[i], i) << "builder " << b;
    const std::vector<Path> full_paths = paths_of(full);
    for (int n = 1; n <= full.size(); ++n) {
      std::vector<Path> held;
      for (int32_t i = 0; i < full.size(); ++i) {
        if (full.order(i) < n) held.push_back(full_paths[i]);
      }
      std::sort(held.begin(), held.end());
      std::vector<Path> own = paths_of(builders[b](n));
      std::sort(own.begin(), own.end());
      EXPECT_EQ(held, own) << "builder " << b << " budget " << n;
    }
  }
  DraftTree changed = chain_tree(depths, 3, 3);
  changed.add(-1, depths[0].tokens[1]);
  EXPECT_FALSE(changed.has_order());  // a tree changed after its order has none
}

TEST(DflashTree, EmptyInputsGiveEmptyTrees) {
  std::vector<Candidates> depths(3);
  EXPECT_TRUE(best_first_tree(depths, 8, 3).empty());
  EXPECT_TRUE(chain_tree(depths, 8, 3).empty());
  std::mt19937 rng(4);
  depths[0] = random_candidates(rng, 2, 10);
  EXPECT_TRUE(best_first_tree(depths, 0, 3).empty());
  EXPECT_TRUE(best_first_tree(depths, 8, 0).empty());
  EXPECT_EQ(best_first_tree(depths, 8, 3).size(), 2);  // depth 2 has no candidates
}

// The context boost's lookup: what followed the last 4 (else 3) tokens of context + path earlier.
TEST(DflashTree, ContextNextFindsWhatFollowedTheSuffix) {
  //                                0  1  2  3  4  5  6  7  8  9 10
  const std::vector<int32_t> text = {5, 1, 2, 3, 9, 7, 1, 2, 3, 8, 1};
  NgramIndex context(3, 4);
  context.sync(text);
  // Suffix (10, 1) + path (2, 3): 4-gram 8 1 2 3 never occurred, 3-gram 1 2 3 ends at 3 and 8.
  EXPECT_EQ(context_next(context, std::vector<int32_t>{2, 3}), (std::vector<int32_t>{8, 9}));
  // Suffix 3 8 1 + path 2: the 4-gram 3 8 1 2 is new, 8 1 2 is new: nothing.
  EXPECT_TRUE(context_next(context, std::vector<int32_t>{2}).empty());
  // The text's own suffix without a path: 3 8 1 and 2 3 8 1 occur only at the end.
  EXPECT_TRUE(context_next(context, {}).empty());
  // A shorter text than 3 tokens and no path: nothing to match.
  NgramIndex tiny(3, 4);
  tiny.sync(std::vector<int32_t>{4, 4});
  EXPECT_TRUE(context_next(tiny, {}).empty());
  // The 4-gram takes precedence: 1 2 3 9 follows 5 only at 4, so 7 alone.
  NgramIndex longer(3, 4);
  longer.sync(std::vector<int32_t>{5, 1, 2, 3, 9, 7, 1, 2, 3, 8, 5, 1, 2, 3, 9});
  EXPECT_EQ(context_next(longer, {}), (std::vector<int32_t>{7}));
}

TEST(DflashTree, ContextBoostRaisesAndJoinsRepeatedTokens) {
  NgramIndex context(3, 4);
  context.sync(std::vector<int32_t>{5, 1, 2, 3, 9, 7, 1, 2, 3, 8, 1});
  Candidates children;
  children.tokens = {4, 9, 6};
  children.logprobs = {-0.5f, -2.0f, -3.0f};
  context_boost(context, std::vector<int32_t>{2, 3}, children);
  // 8 joins at kContextJoined; 9 gains kContextBoost (-2 -> 0) and goes first.
  EXPECT_EQ(children.tokens, (std::vector<int32_t>{9, 4, 8, 6}));
  EXPECT_FLOAT_EQ(children.logprobs[0], 0.0f);
  EXPECT_FLOAT_EQ(children.logprobs[2], kContextJoined);
  // Without a repeat the children stay as they were.
  Candidates same = children;
  context_boost(context, std::vector<int32_t>{6}, same);
  EXPECT_EQ(same.tokens, children.tokens);
  // A smaller gain (SALVO_DFLASH_BOOST's A/B runs): 9 rises by 1 to -1, still behind 4.
  Candidates weak;
  weak.tokens = {4, 9, 6};
  weak.logprobs = {-0.5f, -2.0f, -3.0f};
  context_boost(context, std::vector<int32_t>{2, 3}, weak, 1.0f);
  EXPECT_EQ(weak.tokens, (std::vector<int32_t>{4, 9, 8, 6}));
  EXPECT_FLOAT_EQ(weak.logprobs[1], -1.0f);
}

// NgramIndex follows a sequence that grows, is cut back and changes.
TEST(NgramIndex, SyncKeepsTheIndexInLineWithTheSequence) {
  NgramIndex index(3, 4);
  const std::vector<int32_t> a = {1, 2, 3, 1, 2, 3};
  index.sync(a);
  const std::vector<int32_t> tri = {1, 2, 3};
  ASSERT_NE(index.ends(tri), nullptr);
  EXPECT_EQ(*index.ends(tri), (std::vector<int32_t>{2, 5}));
  index.sync(std::span<const int32_t>(a).first(4));  // cut back to 1 2 3 1
  EXPECT_EQ(*index.ends(tri), (std::vector<int32_t>{2}));
  index.sync(std::vector<int32_t>{7, 2, 3, 1, 2, 3});  // a new text from the first token on
  EXPECT_EQ(*index.ends(tri), (std::vector<int32_t>{5}));
  EXPECT_TRUE(index.matches(5, tri));
  EXPECT_FALSE(index.matches(2, tri));
  EXPECT_EQ(index.ends(std::vector<int32_t>{1, 2}), nullptr);  // below min_n
  EXPECT_EQ(index.tokens(), (std::vector<int32_t>{7, 2, 3, 1, 2, 3}));
}

}  // namespace
}  // namespace salvo
