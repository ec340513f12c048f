#include "speculative/ngram_drafter.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "util/check.h"

namespace salvo {

NgramDrafter::NgramDrafter(const NgramOptions& options) : options_(options) {
  SALVO_CHECK(options_.min_n >= 1 && options_.max_n >= options_.min_n);
  index_.resize(options_.max_n);
}

uint64_t NgramDrafter::key(int32_t end, int n) const {
  // splitmix64-style mixing per token: cheap, and well spread for unordered_map's buckets.
  uint64_t h = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(n);
  for (int32_t i = end - n + 1; i <= end; ++i) {
    h ^= static_cast<uint32_t>(tokens_[i]);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h;
}

bool NgramDrafter::same_ngram(int32_t end_a, int32_t end_b, int n) const {
  return std::equal(tokens_.begin() + (end_a - n + 1), tokens_.begin() + end_a + 1,
                    tokens_.begin() + (end_b - n + 1));
}

void NgramDrafter::index_position(int32_t end) {
  for (int n = options_.min_n; n <= options_.max_n && n <= end + 1; ++n) {
    index_[n - 1][key(end, n)].push_back(end);
  }
}

void NgramDrafter::unindex_position(int32_t end) {
  for (int n = options_.min_n; n <= options_.max_n && n <= end + 1; ++n) {
    auto it = index_[n - 1].find(key(end, n));
    SALVO_CHECK(it != index_[n - 1].end() && !it->second.empty() && it->second.back() == end);
    it->second.pop_back();
    if (it->second.empty()) index_[n - 1].erase(it);
  }
}

void NgramDrafter::sync(std::span<const int32_t> context) {
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

int NgramDrafter::longest_match() const {
  const int32_t last = static_cast<int32_t>(tokens_.size()) - 1;
  for (int n = std::min<int>(options_.max_n, last + 1); n >= options_.min_n; --n) {
    auto it = index_[n - 1].find(key(last, n));
    if (it == index_[n - 1].end()) continue;
    for (int32_t end : it->second) {
      if (end < last && same_ngram(end, last, n)) return n;
    }
  }
  return 0;
}

void NgramDrafter::insert_continuation(int32_t from, int32_t length, double weight) {
  int32_t node = 0;
  trie_[0].weight += weight;
  for (int32_t i = from; i < from + length; ++i) {
    int32_t next = -1;
    for (int32_t child : trie_[node].children) {
      if (trie_[child].token == tokens_[i]) next = child;
    }
    if (next < 0) {
      next = static_cast<int32_t>(trie_.size());
      trie_.push_back({tokens_[i], node, 0.0, {}});
      trie_[node].children.push_back(next);
    }
    trie_[next].weight += weight;
    node = next;
  }
}

DraftTree NgramDrafter::propose(std::span<const int32_t> context, int budget, int max_depth) {
  sync(context);
  DraftTree tree;
  const int32_t last = static_cast<int32_t>(tokens_.size()) - 1;
  if (last < 0 || budget <= 0 || max_depth <= 0) return tree;

  trie_.clear();
  trie_.push_back({-1, -1, 0.0, {}});
  // Longer matches predict better; the most recent occurrences of each length come first.
  for (int n = std::min<int>(options_.max_n, last + 1); n >= options_.min_n; --n) {
    auto it = index_[n - 1].find(key(last, n));
    if (it == index_[n - 1].end()) continue;
    const std::vector<int32_t>& ends = it->second;
    int used = 0;
    for (auto e = ends.rbegin(); e != ends.rend() && used < options_.max_occurrences; ++e) {
      if (*e >= last || !same_ngram(*e, last, n)) continue;
      const int32_t length = std::min<int32_t>(max_depth, last - *e);
      insert_continuation(*e + 1, length, static_cast<double>(n));
      ++used;
    }
  }
  if (trie_[0].children.empty()) return tree;

  // Best-first selection: a child never weighs more than its parent, so taking the heaviest
  // frontier node keeps the selected set a subtree (every selected node's parent is selected).
  using Entry = std::pair<double, int32_t>;  // weight, -trie index (earlier inserted wins ties)
  std::priority_queue<Entry> frontier;
  for (int32_t c : trie_[0].children) frontier.push({trie_[c].weight, -c});
  std::vector<uint8_t> selected(trie_.size(), 0);
  for (int taken = 0; taken < budget && !frontier.empty(); ++taken) {
    const int32_t node = -frontier.top().second;
    frontier.pop();
    selected[node] = 1;
    for (int32_t c : trie_[node].children) frontier.push({trie_[c].weight, -c});
  }

  // DFS emission, heavier branches first, so the likeliest path is the leftmost.
  std::vector<int32_t> stack = {0};
  while (!stack.empty()) {
    const int32_t node = stack.back();
    stack.pop_back();
    if (node != 0) {
      const int32_t parent = trie_[node].parent;
      trie_[node].draft_index =
          tree.add(parent == 0 ? -1 : trie_[parent].draft_index, trie_[node].token);
    }
    std::vector<int32_t> kids;
    for (int32_t c : trie_[node].children) {
      if (selected[c]) kids.push_back(c);
    }
    std::stable_sort(kids.begin(), kids.end(),
                     [&](int32_t a, int32_t b) { return trie_[a].weight > trie_[b].weight; });
    for (auto k = kids.rbegin(); k != kids.rend(); ++k) stack.push_back(*k);
  }
  return tree;
}

}  // namespace salvo
