#include "speculative/ngram_index.h"

#include <algorithm>

#include "util/check.h"

namespace salvo {

NgramIndex::NgramIndex(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {
  SALVO_CHECK(min_n_ >= 1 && max_n_ >= min_n_);
  index_.resize(max_n_);
}

uint64_t NgramIndex::hash(std::span<const int32_t> ngram) {
  // splitmix64-style mixing per token: cheap, and well spread for unordered_map's buckets.
  uint64_t h = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(ngram.size());
  for (int32_t t : ngram) {
    h ^= static_cast<uint32_t>(t);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h;
}

std::span<const int32_t> NgramIndex::ending_at(int32_t end, int n) const {
  return std::span<const int32_t>(tokens_).subspan(end - n + 1, n);
}

const std::vector<int32_t>* NgramIndex::ends(std::span<const int32_t> ngram) const {
  const int n = static_cast<int>(ngram.size());
  if (n < min_n_ || n > max_n_) return nullptr;
  auto it = index_[n - 1].find(hash(ngram));
  return it == index_[n - 1].end() ? nullptr : &it->second;
}

bool NgramIndex::matches(int32_t end, std::span<const int32_t> ngram) const {
  const int n = static_cast<int>(ngram.size());
  if (end < n - 1 || end >= static_cast<int32_t>(tokens_.size())) return false;
  const std::span<const int32_t> at = ending_at(end, n);
  return std::equal(at.begin(), at.end(), ngram.begin());
}

void NgramIndex::index_position(int32_t end) {
  for (int n = min_n_; n <= max_n_ && n <= end + 1; ++n) {
    index_[n - 1][hash(ending_at(end, n))].push_back(end);
  }
}

void NgramIndex::unindex_position(int32_t end) {
  for (int n = min_n_; n <= max_n_ && n <= end + 1; ++n) {
    auto it = index_[n - 1].find(hash(ending_at(end, n)));
    SALVO_CHECK(it != index_[n - 1].end() && !it->second.empty() && it->second.back() == end);
    it->second.pop_back();
    if (it->second.empty()) index_[n - 1].erase(it);
  }
}

void NgramIndex::sync(std::span<const int32_t> context) {
  const size_t limit = std::min(context.size(), tokens_.size());
  const size_t common =
      std::mismatch(context.begin(), context.begin() + limit, tokens_.begin()).first -
      context.begin();
  // Positions are unindexed newest first, so each one is the back of its lists.
  for (size_t end = tokens_.size(); end-- > common;) unindex_position(static_cast<int32_t>(end));
  tokens_.resize(common);
  for (size_t i = common; i < context.size(); ++i) {
    tokens_.push_back(context[i]);
    index_position(static_cast<int32_t>(i));
  }
}

}  // namespace salvo
