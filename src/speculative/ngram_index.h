// NgramIndex: where each n-gram (n in [min_n, max_n]) of a token sequence ends, kept in line with
// a sequence that mostly grows (sync() costs O(new tokens)). The n-gram drafter finds earlier
// occurrences of the sequence's suffix with it, and the DFlash drafter the tokens that followed
// a tree node's suffix (dflash_drafter.cc).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace salvo {

class NgramIndex {
 public:
  NgramIndex(int min_n, int max_n);

  // Brings the index in line with `context`: forgets positions past the common prefix with the
  // indexed tokens, then indexes the new ones.
  void sync(std::span<const int32_t> context);
  const std::vector<int32_t>& tokens() const { return tokens_; }

  // The positions (increasing) where an n-gram that hashes as `ngram` ends, n = ngram.size() in
  // [min_n, max_n]; null if none. Collisions are possible: check each with matches().
  const std::vector<int32_t>* ends(std::span<const int32_t> ngram) const;
  // Whether the sequence's tokens ending at `end` are `ngram`.
  bool matches(int32_t end, std::span<const int32_t> ngram) const;

 private:
  static uint64_t hash(std::span<const int32_t> ngram);
  std::span<const int32_t> ending_at(int32_t end, int n) const;
  void index_position(int32_t end);
  void unindex_position(int32_t end);

  int min_n_, max_n_;
  std::vector<int32_t> tokens_;
  // index_[n - 1]: hash of the n-gram ending at position e -> every such e, increasing.
  std::vector<std::unordered_map<uint64_t, std::vector<int32_t>>> index_;
};

}  // namespace salvo
