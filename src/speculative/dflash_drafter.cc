#include "speculative/dflash_drafter.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace salvo {
namespace {

// Siblings beyond this many per depth are never worth a verification row.
constexpr int kMaxSiblings = 8;

// SALVO_DFLASH_CONTEXT=0 turns the adapter trees' context boost (context_boost) off, for A/B runs.
bool context_boost_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("SALVO_DFLASH_CONTEXT");
    return v == nullptr || std::atoi(v) != 0;
  }();
  return on;
}

// SALVO_DFLASH_BOOST=X: the context boost's log-probability gain instead of kContextBoost (A/B
// runs of the value chosen on the offline replay, bench/dflash_replay.py); a value that is not
// a finite number >= 0 leaves the default.
float context_boost_value() {
  static const float boost = [] {
    const char* v = std::getenv("SALVO_DFLASH_BOOST");
    if (v == nullptr) return kContextBoost;
    char* end = nullptr;
    const float x = std::strtof(v, &end);
    return end != v && *end == '\0' && std::isfinite(x) && x >= 0 ? x : kContextBoost;
  }();
  return boost;
}

// SALVO_DFLASH_WIDE=0 gives large adapter trees the adapter's top_k candidates a depth, as
// small ones have, in place of kWideCandidates (A/B runs).
bool wide_candidates_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("SALVO_DFLASH_WIDE");
    return v == nullptr || std::atoi(v) != 0;
  }();
  return on;
}

}  // namespace

std::pair<int32_t, int32_t> DflashDrafter::vocabularies(int32_t n_vocab, int32_t vocab,
                                                        int32_t ranked_rows) {
  if (vocab == SpecOptions::kVocabByTree) {
    if (ranked_rows > 0) return {std::min(ranked_rows, kRankedSmallTree), ranked_rows};
    return {std::min(n_vocab, kFrequentIds), n_vocab};
  }
  const int32_t ids = vocab > 0 ? std::min(n_vocab, vocab) : n_vocab;
  return {ids, ids};
}

DflashDrafter::DflashDrafter(const DflashModel& model, std::unique_ptr<DflashRunner> runner,
                             int32_t n_tokens, SpecTree tree, int32_t small_tree_tokens)
    : model_(model),
      runner_(std::move(runner)),
      n_tokens_(n_tokens),
      small_tree_tokens_(small_tree_tokens > 0 ? small_tree_tokens : n_tokens),
      tree_(tree) {
  if (tree_ == SpecTree::kAuto) tree_ = model.has_adapter() ? SpecTree::kAdapter : SpecTree::kBest;
  if (tree_ == SpecTree::kAdapter && !model.has_adapter()) tree_ = SpecTree::kBest;
}

void DflashDrafter::observe(int32_t first, int32_t n, const float* features) {
  // A gap (features the drafter never saw) leaves it short: it stops drafting until the
  // sequence restarts from a prefix it holds, which Sequence::start arranges via observed().
  if (first > observed()) return;
  if (first < runner_->n_positions()) {
    // Rewriting projected positions: what was pending lies after them and is dropped.
    pending_.clear();
    // Cannot fail past the check above; a failure would only stop drafting, never change output.
    (void)runner_->observe(first, n, features).ok();
    return;
  }
  pending_.resize(static_cast<size_t>(first - runner_->n_positions()) *
                  model_.config().feature_width());
  pending_.insert(pending_.end(), features,
                  features + static_cast<size_t>(n) * model_.config().feature_width());
  if (pending_rows() >= kMaxPending) flush();
}

void DflashDrafter::flush() {
  if (pending_.empty()) return;
  (void)runner_->observe(runner_->n_positions(), pending_rows(), pending_.data()).ok();
  pending_.clear();
}

DraftTree DflashDrafter::propose(std::span<const int32_t> context, int budget, int max_depth) {
  const DflashConfig& c = model_.config();
  // A tree of `budget` nodes is at most that deep, and the drafter's pass computes only the
  // depths asked for (the LM head over 15 rows where a 7-node tree needs 7 at most).
  max_depth = std::min({max_depth, budget, c.max_depth()});
  if (context.empty() || budget <= 0 || max_depth <= 0) return {};
  flush();
  // The drafter must hold every committed position: the root sits right after them.
  if (runner_->n_positions() != static_cast<int32_t>(context.size()) - 1) return {};
  const int32_t root = context.back();
  const bool large = budget >= kLargeTree;
  int width = std::min(budget, kMaxSiblings);
  if (tree_ == SpecTree::kAdapter) {
    width = std::max(c.adapter_top_k, 1);
    if (large && wide_candidates_enabled()) width = std::max(width, kWideCandidates);
  }
  if (tree_ == SpecTree::kChain) width = 1;
  width = std::min(width, runner_->max_width());
  runner_->draft(root, max_depth, width, large ? n_tokens_ : small_tree_tokens_, depths_);
  const std::vector<Candidates>& depths = depths_;
  switch (tree_) {
    case SpecTree::kChain:
      return chain_tree(depths, budget, max_depth);
    case SpecTree::kAdapter: {
      // Children at depth d: the marginal top-k of depth d rescored given the parent's token,
      // renormalised over those k and scaled to the marginal mass of the k (as the trainer
      // scores them): without the mass every depth would look as sure as the first.
      std::vector<float> scores;
      const bool boost = context_boost_enabled();
      if (boost) ngrams_.sync(context);
      auto scorer = [&](int depth, int32_t parent_token, std::span<const int32_t> path) {
        Candidates out = depths[depth - 1];
        // A parent the context boost added is none of the adapter's candidates: its children
        // keep the marginals' order.
        const bool scored = depth == 1 || std::find(depths[depth - 2].tokens.begin(),
                                                    depths[depth - 2].tokens.end(),
                                                    parent_token) != depths[depth - 2].tokens.end();
        if (!scored) {
          if (boost) context_boost(ngrams_, path, out, context_boost_value());
          return out;
        }
        double mass = 0;
        for (float lp : out.logprobs) mass += std::exp(static_cast<double>(lp));
        const float log_mass = static_cast<float>(std::log(std::max(mass, 1e-30)));
        scores.resize(out.size());
        runner_->adapter_scores(depth, parent_token, out.tokens, scores.data());
        float max_score = -INFINITY;
        for (float s : scores) max_score = std::max(max_score, s);
        double sum = 0;
        for (float s : scores) sum += std::exp(static_cast<double>(s - max_score));
        const float log_z = max_score + static_cast<float>(std::log(sum));
        for (size_t i = 0; i < out.size(); ++i) out.logprobs[i] = scores[i] - log_z + log_mass;
        sort_best_first(out);
        if (boost) context_boost(ngrams_, path, out, context_boost_value());
        return out;
      };
      return best_first_tree(scorer, root, budget, max_depth);
    }
    default:
      return best_first_tree(depths, budget, max_depth);
  }
}

}  // namespace salvo
