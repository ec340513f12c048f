// NgramDrafter: drafts from earlier occurrences of the sequence's recent suffix (prompt lookup /
// suffix decoding). No model: code, quoted text and repetitive output repeat their own n-grams.
//
// For each n in [min_n, max_n] an index maps every n-gram of the sequence to the positions where
// it ends, in increasing order. Proposing looks up the last n tokens for every n (longest first),
// takes the continuations after the most recent occurrences, merges them into a trie weighted by
// match length and keeps the heaviest nodes within the budget, so that diverging continuations
// become sibling branches.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "speculative/drafter.h"

namespace salvo {

struct NgramOptions {
  int min_n = 1;
  int max_n = 4;
  int max_occurrences = 8;  // most recent occurrences used per n
};

class NgramDrafter : public Drafter {
 public:
  explicit NgramDrafter(const NgramOptions& options = {});

  DraftTree propose(std::span<const int32_t> context, int budget, int max_depth) override;

  // Length of the longest suffix of the indexed sequence (within [min_n, max_n]) that occurred
  // earlier with a continuation; 0 if none.
  int longest_match() const;

 private:
  struct TrieNode {
    int32_t token;
    int32_t parent;  // trie index; -1 = root
    double weight;   // summed weight of the continuations through this node
    std::vector<int32_t> children;
    int32_t draft_index = -1;  // node index in the DraftTree once selected
  };

  // Brings the index in line with `context`: forgets positions past the common prefix with the
  // indexed tokens, then indexes the new ones. Amortised O(new tokens) when context only grows.
  void sync(std::span<const int32_t> context);
  void index_position(int32_t end);
  void unindex_position(int32_t end);
  uint64_t key(int32_t end, int n) const;
  bool same_ngram(int32_t end_a, int32_t end_b, int n) const;
  void insert_continuation(int32_t from, int32_t length, double weight);

  NgramOptions options_;
  std::vector<int32_t> tokens_;
  // index_[n - 1]: hash of the n-gram ending at position e -> every such e, increasing. Hash
  // collisions are harmless: lookups compare the tokens.
  std::vector<std::unordered_map<uint64_t, std::vector<int32_t>>> index_;
  std::vector<TrieNode> trie_;  // scratch of propose(); trie_[0] is the root
};

}  // namespace salvo
