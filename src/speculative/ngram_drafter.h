// NgramDrafter: drafts from earlier occurrences of the sequence's recent suffix (prompt lookup /
// suffix decoding). No model: code, quoted text and edited copies repeat long spans of their own
// context, so the text that followed the longest earlier match of the suffix is a good guess.
//
// For each n in [1, max_n] an index maps every n-gram of the sequence (prompt + generated) to the
// positions where it ends, in increasing order; it is updated incrementally, so a pass costs
// O(new tokens) plus the lookup. Proposing:
//   1. finds the longest n with an earlier occurrence of the last n tokens and measures each
//      occurrence's true match length by comparing further back (up to max_match tokens), so an
//      occurrence inside a long copied span outranks a recent but short match; shorter n-grams
//      add candidates until there are max_candidates (down to min_n);
//   2. takes each candidate's continuation, as deep as its match is long (depth_base +
//      depth_per_match * match length): a long match along a copied span drafts a long chain, a
//      one-token match a single guess, which keeps the verification rows cheap;
//   3. merges the continuations into a trie weighted by match length squared and keeps the
//      heaviest nodes within the budget, so diverging continuations become sibling branches and
//      the likeliest one is the leftmost path.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "speculative/drafter.h"
#include "speculative/ngram_index.h"

namespace salvo {

struct NgramOptions {
  int min_n = 1;           // shortest suffix match drafted from
  int max_n = 4;           // longest indexed n-gram; longer matches are measured by comparison
  int max_candidates = 2;  // occurrences whose continuations form the tree
  int max_scan = 32;       // most recent occurrences examined per n-gram length
  int max_match = 64;      // match lengths are measured up to this
  // A candidate drafts depth_base + depth_per_match * (its match length) tokens: on this CPU a
  // row costs ~8% of a one-row pass, and a one-token match predicts about one token.
  int depth_base = 0;
  int depth_per_match = 1;
  // Also draft past that depth, each further token at half the weight of the one before, so the
  // tree fills the budget it is given: the most tokens per pass within the caps, for callers that
  // size the budget themselves; without it a pass verifies only what the matches vouch for.
  bool fill_budget = false;
};

class NgramDrafter : public Drafter {
 public:
  explicit NgramDrafter(const NgramOptions& options = {});

  DraftTree propose(std::span<const int32_t> context, int budget, int max_depth) override;
  std::string name() const override { return "n-gram lookup"; }

  // Length of the longest suffix of the indexed sequence (at least min_n, at most max_match)
  // that occurred earlier with a continuation; 0 if none.
  int longest_match() const;

 private:
  struct Candidate {
    int32_t end;     // where the earlier occurrence of the suffix ends
    int32_t length;  // how many tokens of the suffix it matches
  };
  struct TrieNode {
    int32_t token;
    int32_t parent;  // trie index; -1 = root
    double weight;   // summed weight of the continuations through this node
    std::vector<int32_t> children;
    int32_t draft_index = -1;  // node index in the DraftTree once selected
  };

  // Tokens before `end` (inclusive) that equal those before the last token, at least `known`.
  int32_t match_length(int32_t end, int32_t known) const;
  // Earlier occurrences of the suffix, longest match first (then most recent).
  void find_candidates();
  // Adds one candidate's continuation; tokens from `confident` on weigh less and less.
  void insert_continuation(std::span<const int32_t> continuation, double weight, int64_t confident);

  NgramOptions options_;
  NgramIndex index_;                   // the sequence (prompt + generated) and its n-grams
  std::vector<Candidate> candidates_;  // scratch of propose()
  std::vector<int32_t> continuation_;  // scratch of propose()
  std::vector<TrieNode> trie_;         // scratch of propose(); trie_[0] is the root
};

}  // namespace salvo
