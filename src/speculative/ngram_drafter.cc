#include "speculative/ngram_drafter.h"

#include <algorithm>
#include <queue>
#include <utility>

#include "util/check.h"

namespace salvo {

NgramDrafter::NgramDrafter(const NgramOptions& options)
    : options_(options), index_(options.min_n, options.max_n) {
  SALVO_CHECK(options_.min_n >= 1 && options_.max_n >= options_.min_n &&
              options_.max_match >= options_.max_n && options_.max_scan >= 1);
}

int32_t NgramDrafter::match_length(int32_t end, int32_t known) const {
  const std::vector<int32_t>& tokens = index_.tokens();
  const int32_t last = static_cast<int32_t>(tokens.size()) - 1;
  int32_t length = known;
  while (length < options_.max_match && end - length >= 0 &&
         tokens[end - length] == tokens[last - length]) {
    ++length;
  }
  return length;
}

void NgramDrafter::find_candidates() {
  candidates_.clear();
  const std::span<const int32_t> tokens = index_.tokens();
  const int32_t last = static_cast<int32_t>(tokens.size()) - 1;
  const size_t wanted = static_cast<size_t>(std::max(1, options_.max_candidates));
  for (int n = std::min<int>(options_.max_n, last + 1);
       n >= options_.min_n && candidates_.size() < wanted; --n) {
    const std::span<const int32_t> suffix = tokens.subspan(last - n + 1, n);
    const std::vector<int32_t>* found = index_.ends(suffix);
    if (found == nullptr) continue;
    const std::vector<int32_t>& ends = *found;
    const size_t longer = candidates_.size();  // found at a longer n: the same positions again
    int scanned = 0;
    for (auto e = ends.rbegin(); e != ends.rend() && scanned < options_.max_scan; ++e) {
      if (*e >= last || !index_.matches(*e, suffix)) continue;
      ++scanned;
      const bool seen = std::any_of(candidates_.begin(), candidates_.begin() + longer,
                                    [&](const Candidate& c) { return c.end == *e; });
      if (!seen) candidates_.push_back({*e, match_length(*e, n)});
    }
    // Longest match first; the scan went newest first, which breaks ties by recency.
    std::stable_sort(candidates_.begin() + longer, candidates_.end(),
                     [](const Candidate& a, const Candidate& b) { return a.length > b.length; });
  }
  if (candidates_.size() > wanted) candidates_.resize(wanted);
}

int NgramDrafter::longest_match() const {
  return candidates_.empty() ? 0 : candidates_.front().length;
}

void NgramDrafter::insert_continuation(std::span<const int32_t> continuation, double weight,
                                       int64_t confident) {
  int32_t node = 0;
  trie_[0].weight += weight;
  for (size_t k = 0; k < continuation.size(); ++k) {
    const int32_t token = continuation[k];
    // Past what the match vouches for, each token is half as likely to be reached.
    if (static_cast<int64_t>(k) >= confident) weight *= 0.5;
    int32_t next = -1;
    for (int32_t child : trie_[node].children) {
      if (trie_[child].token == token) next = child;
    }
    if (next < 0) {
      next = static_cast<int32_t>(trie_.size());
      trie_.push_back({token, node, 0.0, {}});
      trie_[node].children.push_back(next);
    }
    trie_[next].weight += weight;
    node = next;
  }
}

DraftTree NgramDrafter::propose(std::span<const int32_t> context, int budget, int max_depth) {
  index_.sync(context);
  DraftTree tree;
  candidates_.clear();
  const std::vector<int32_t>& tokens = index_.tokens();
  const int32_t last = static_cast<int32_t>(tokens.size()) - 1;
  if (last < 0 || budget <= 0 || max_depth <= 0) return tree;

  find_candidates();
  trie_.clear();
  trie_.push_back({-1, -1, 0.0, {}});
  for (const Candidate& c : candidates_) {
    // A match of L tokens makes the next ~L tokens likely copies too: draft as deep as the
    // evidence runs. The text after the occurrence ends at the root; a match at least one period
    // long (the suffix repeats itself) continues the period beyond it.
    const int32_t period = last - c.end;
    const bool periodic = c.length >= period;
    const int64_t confident = options_.depth_base + int64_t{options_.depth_per_match} * c.length;
    const int64_t deep = options_.fill_budget ? max_depth : confident;
    const int32_t length =
        static_cast<int32_t>(std::min<int64_t>({max_depth, deep, periodic ? deep : period}));
    continuation_.clear();
    for (int32_t k = 0; k < length; ++k) {
      continuation_.push_back(k < period ? tokens[c.end + 1 + k] : continuation_[k - period]);
    }
    insert_continuation(continuation_, static_cast<double>(c.length) * c.length, confident);
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
