// Trees from a block drafter's per-depth distributions ("trees from marginals"). A DFlash pass
// gives, for each depth d, a distribution over the token at that depth that does not depend on
// the tokens chosen above it; these pure functions turn such candidate lists into a DraftTree.
//   - chain: each depth's best token;
//   - best-first: the `budget` nodes of highest cumulative log-probability, where a node's
//     children are the candidates of the next depth (the same for every parent, or, with an
//     adapter, rescored given the parent's token), expanded lazily from a priority queue;
// the result is in DFS order with distinct siblings (DraftTree's invariants). context_boost
// raises the children that repeat the context (a scorer's last step).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "speculative/draft_tree.h"
#include "speculative/ngram_index.h"

namespace salvo {

// Tokens best first with their log-probabilities.
struct Candidates {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  size_t size() const { return tokens.size(); }
};

// Sorts the candidates best first (stable: ties keep their order).
void sort_best_first(Candidates& c);

// The k most likely ids below n_tokens of a logits row of n_vocab, with log-softmax over the
// whole row.
Candidates top_candidates(const float* logits, int32_t n_vocab, int32_t n_tokens, int k);

// `depths[d]`: candidates for depth d + 1.
DraftTree chain_tree(std::span<const Candidates> depths, int budget, int max_depth);
DraftTree best_first_tree(std::span<const Candidates> depths, int budget, int max_depth);

// Children of a node at depth - 1 holding parent_token (the root at depth 0), best first. `path`:
// the tokens from depth 1 down to that node (empty for the root).
using ChildScorer =
    std::function<Candidates(int depth, int32_t parent_token, std::span<const int32_t> path)>;
DraftTree best_first_tree(const ChildScorer& children, int32_t root_token, int budget,
                          int max_depth);

// The tokens that followed the last 4 (else 3) tokens of context + path where they occurred
// earlier in the context (`context` indexed with n-grams of 3 and 4), most recent first.
std::vector<int32_t> context_next(const NgramIndex& context, std::span<const int32_t> path);

// Code and edited text repeat spans of their own context, and a drafter does not always rank the
// repeated token first: a child among context_next(context, path) gains kContextBoost in
// log-probability (up to certainty), one missing from the children joins them at
// kContextJoined, and the children are sorted again. Chosen on an offline replay of the shipped
// Qwen2.5-Coder-1.5B drafter's candidates and adapter scores against the target's text
// (session 38, CPU, 7-node adapter trees, 38 prompts, ~1700 passes; tuned on half the texts,
// checked on the other half): tokens a pass on code 4.125 -> 4.238 / 3.236 -> 3.317, grounded
// 4.066 -> 4.223, chat 2.428 -> 2.468, math 4.764 -> 4.764.
inline constexpr float kContextBoost = 2.0f;
inline constexpr float kContextJoined = -1.0f;
void context_boost(const NgramIndex& context, std::span<const int32_t> path, Candidates& children,
                   float boost = kContextBoost);

}  // namespace salvo
