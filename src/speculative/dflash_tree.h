// Trees from a block drafter's per-depth distributions ("trees from marginals"). A DFlash pass
// gives, for each depth d, a distribution over the token at that depth that does not depend on
// the tokens chosen above it; these pure functions turn such candidate lists into a DraftTree.
//   - chain: each depth's best token;
//   - best-first: the `budget` nodes of highest cumulative log-probability, where a node's
//     children are the candidates of the next depth (the same for every parent, or, with an
//     adapter, rescored given the parent's token), expanded lazily from a priority queue;
// the result is in DFS order with distinct siblings (DraftTree's invariants).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "speculative/draft_tree.h"

namespace salvo {

// Tokens best first with their log-probabilities.
struct Candidates {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  size_t size() const { return tokens.size(); }
};

// The k most likely ids below n_tokens of a logits row of n_vocab, with log-softmax over the
// whole row.
Candidates top_candidates(const float* logits, int32_t n_vocab, int32_t n_tokens, int k);

// `depths[d]`: candidates for depth d + 1.
DraftTree chain_tree(std::span<const Candidates> depths, int budget, int max_depth);
DraftTree best_first_tree(std::span<const Candidates> depths, int budget, int max_depth);

// Children of a node at depth - 1 holding parent_token (the root at depth 0), best first.
using ChildScorer = std::function<Candidates(int depth, int32_t parent_token)>;
DraftTree best_first_tree(const ChildScorer& children, int32_t root_token, int budget,
                          int max_depth);

}  // namespace salvo
