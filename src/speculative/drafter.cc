#include "speculative/drafter.h"

#include <algorithm>
#include <random>

#include "speculative/dflash_drafter.h"
#include "speculative/draft_model_drafter.h"
#include "speculative/ngram_drafter.h"

namespace salvo {
namespace {

constexpr struct {
  SpecMode mode;
  const char* name;
} kSpecModeNames[] = {
    {SpecMode::kNone, "none"}, {SpecMode::kNgram, "ngram"},   {SpecMode::kDraft, "draft"},
    {SpecMode::kAuto, "auto"}, {SpecMode::kRandom, "random"}, {SpecMode::kWrong, "wrong"},
    {SpecMode::kDeep, "deep"}, {SpecMode::kDflash, "dflash"},
};

constexpr struct {
  SpecTree tree;
  const char* name;
} kSpecTreeNames[] = {
    {SpecTree::kAuto, "auto"},
    {SpecTree::kBest, "best"},
    {SpecTree::kAdapter, "adapter"},
    {SpecTree::kChain, "chain"},
};

// The token that followed the most recent earlier occurrence of context[at], or -1. A cheap
// "plausible" guess that the target often accepts on repetitive text.
int32_t bigram_guess(std::span<const int32_t> context, size_t at) {
  for (size_t i = at; i-- > 0;) {
    if (context[i] == context[at]) return context[i + 1];
  }
  return -1;
}

// The testing drafters draw from a generator seeded by (seed, context length), so a run is
// reproducible whatever happened before.
std::mt19937_64 rng_for(uint64_t seed, size_t context_size) {
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(context_size)};
  return std::mt19937_64(seq);
}

class RandomDrafter : public Drafter {
 public:
  RandomDrafter(int32_t n_vocab, uint64_t seed) : n_vocab_(n_vocab), seed_(seed) {}

  std::string name() const override { return "random drafts (testing)"; }
  DraftTree propose(std::span<const int32_t> context, int budget, int max_depth) override {
    DraftTree tree;
    if (context.empty() || budget <= 0 || max_depth <= 0) return tree;
    auto rng = rng_for(seed_, context.size());
    const int n_nodes = std::uniform_int_distribution<int>(0, budget)(rng);
    // `path`: ancestors of the next node in DFS order (-1 = root); the new node's parent is
    // drawn from it, which is exactly the set of parents keeping the DFS order.
    std::vector<int32_t> path = {-1};
    std::vector<int32_t> path_tokens = {context.back()};
    for (int attempt = 0; tree.size() < n_nodes && attempt < 4 * budget; ++attempt) {
      const size_t cut = std::uniform_int_distribution<size_t>(0, path.size() - 1)(rng);
      if (static_cast<int>(cut) >= max_depth) continue;
      path.resize(cut + 1);
      path_tokens.resize(cut + 1);
      int32_t token = -1;
      const int kind = std::uniform_int_distribution<int>(0, 3)(rng);
      if (kind <= 1) {
        // Plausible: what followed the parent's token last time in the context.
        for (size_t i = context.size() - 1; i-- > 0;) {
          if (context[i] == path_tokens.back()) {
            token = context[i + 1];
            break;
          }
        }
      } else if (kind == 2) {
        token = context[std::uniform_int_distribution<size_t>(0, context.size() - 1)(rng)];
      }
      if (token < 0) token = std::uniform_int_distribution<int32_t>(0, n_vocab_ - 1)(rng);
      if (tree.find_child(path.back(), token) >= 0) continue;
      path.push_back(tree.add(path.back(), token));
      path_tokens.push_back(token);
    }
    return tree;
  }

 private:
  int32_t n_vocab_;
  uint64_t seed_;
};

class WrongDrafter : public Drafter {
 public:
  WrongDrafter(int32_t n_vocab, uint64_t seed) : n_vocab_(n_vocab), seed_(seed) {}

  std::string name() const override { return "wrong drafts (testing)"; }
  DraftTree propose(std::span<const int32_t> context, int budget, int max_depth) override {
    DraftTree tree;
    if (budget <= 0 || max_depth <= 0) return tree;
    auto rng = rng_for(seed_, context.size());
    std::uniform_int_distribution<int32_t> any_token(0, n_vocab_ - 1);
    // A chain as deep as allowed, then the rest of the budget as siblings at depth 1: the
    // widest and the deepest tree the budget allows, of tokens the target almost never picks.
    int32_t parent = -1;
    for (int d = 0; d < std::min(budget, max_depth); ++d) parent = tree.add(parent, any_token(rng));
    for (int attempt = 0; tree.size() < budget && attempt < 4 * budget; ++attempt) {
      const int32_t token = any_token(rng);
      if (tree.find_child(-1, token) < 0) tree.add(-1, token);
    }
    return tree;
  }

 private:
  int32_t n_vocab_;
  uint64_t seed_;
};

class DeepDrafter : public Drafter {
 public:
  std::string name() const override { return "deep drafts (testing)"; }
  DraftTree propose(std::span<const int32_t> context, int budget, int max_depth) override {
    DraftTree tree;
    if (context.empty()) return tree;
    // Follows bigrams from the root: a long chain that is partly accepted on repetitive text,
    // so deep commits with moved K/V rows get exercised.
    std::vector<int32_t> chain(context.begin(), context.end());
    int32_t parent = -1;
    for (int d = 0; d < std::min(budget, max_depth); ++d) {
      int32_t token = bigram_guess(chain, chain.size() - 1);
      if (token < 0) token = chain.back();
      parent = tree.add(parent, token);
      chain.push_back(token);
    }
    return tree;
  }
};

}  // namespace

Expected<SpecMode> parse_spec_mode(const std::string& name) {
  for (const auto& entry : kSpecModeNames) {
    if (name == entry.name) return entry.mode;
  }
  return Status::error("unknown speculation mode '" + name +
                       "' (expected none, ngram, draft, dflash or auto)");
}

const char* spec_mode_name(SpecMode mode) {
  for (const auto& entry : kSpecModeNames) {
    if (mode == entry.mode) return entry.name;
  }
  return "?";
}

Expected<SpecTree> parse_spec_tree(const std::string& name) {
  for (const auto& entry : kSpecTreeNames) {
    if (name == entry.name) return entry.tree;
  }
  return Status::error("unknown speculation tree '" + name +
                       "' (expected auto, best, adapter or chain)");
}

const char* spec_tree_name(SpecTree tree) {
  for (const auto& entry : kSpecTreeNames) {
    if (tree == entry.tree) return entry.name;
  }
  return "?";
}

Status SpecOptions::validate() const {
  if ((budget < 0 && budget != kDrafterCaps) || budget > 1024) {
    return Status::error("speculation budget " + std::to_string(budget) +
                         " is out of range [0, 1024] (tree nodes per pass)");
  }
  if (vocab < 0 && vocab != kVocabByTree) {
    return Status::error("speculation vocabulary " + std::to_string(vocab) +
                         " is negative (0: the whole vocabulary)");
  }
  if ((depth < 0 && depth != kDrafterCaps) || depth > 256) {
    return Status::error("speculation depth " + std::to_string(depth) +
                         " is out of range [0, 256]");
  }
  return Status();
}

namespace {

Expected<std::unique_ptr<Drafter>> make_dflash_drafter(const DrafterResources& r) {
  SALVO_ASSIGN_OR_RETURN(std::unique_ptr<DflashRunner> runner,
                         new_dflash_runner(*r.dflash, *r.pool));
  const auto [small, large] =
      DflashDrafter::vocabularies(r.n_vocab, r.dflash_vocab, runner->ranked_rows());
  return std::unique_ptr<Drafter>(
      std::make_unique<DflashDrafter>(*r.dflash, std::move(runner), large, r.tree, small));
}

// What auto drafts with, from what was loaded: make_drafter and drafter_description both ask.
enum class AutoSource { kDflash, kDraftModel, kNgram };
AutoSource auto_source(bool has_dflash, bool has_draft_model) {
  if (has_dflash) return AutoSource::kDflash;
  return has_draft_model ? AutoSource::kDraftModel : AutoSource::kNgram;
}

}  // namespace

Expected<std::unique_ptr<Drafter>> make_drafter(SpecMode mode, const DrafterResources& r) {
  std::unique_ptr<Drafter> drafter;
  const bool has_model = r.draft_model != nullptr && r.pool != nullptr;
  auto draft_model_drafter = [&] {
    return std::make_unique<DraftModelDrafter>(*r.draft_model, *r.pool, r.n_vocab,
                                               DraftModelOptions{.context_size = r.context_size});
  };
  switch (mode) {
    case SpecMode::kNone:
      break;
    case SpecMode::kNgram:
      // The user's caps are the tree size (no policy): fill them with the likeliest tokens.
      drafter =
          std::make_unique<NgramDrafter>(NgramOptions{.max_candidates = 8, .fill_budget = true});
      break;
    case SpecMode::kDflash: {
      if (r.dflash == nullptr || r.pool == nullptr) {
        return Status::error(
            "speculation mode 'dflash' needs a DFlash drafter (--drafter DIR, or "
            "drafters/<model>/)");
      }
      SALVO_ASSIGN_OR_RETURN(drafter, make_dflash_drafter(r));
      break;
    }
    case SpecMode::kDraft:
      if (!has_model) {
        return Status::error("speculation mode 'draft' needs a draft model (--draft-model)");
      }
      drafter = draft_model_drafter();
      break;
    case SpecMode::kAuto:
      switch (auto_source(r.dflash != nullptr && r.pool != nullptr, has_model)) {
        case AutoSource::kDflash: {
          SALVO_ASSIGN_OR_RETURN(drafter, make_dflash_drafter(r));
          break;
        }
        case AutoSource::kDraftModel:
          drafter = draft_model_drafter();
          break;
        case AutoSource::kNgram:
          drafter = std::make_unique<NgramDrafter>(NgramOptions{.min_n = 2});
          break;
      }
      break;
    case SpecMode::kRandom:
      drafter = std::make_unique<RandomDrafter>(r.n_vocab, r.seed);
      break;
    case SpecMode::kWrong:
      drafter = std::make_unique<WrongDrafter>(r.n_vocab, r.seed);
      break;
    case SpecMode::kDeep:
      drafter = std::make_unique<DeepDrafter>();
      break;
  }
  return drafter;
}

std::string drafter_description(SpecMode mode, const DflashModel* dflash,
                                const Model* draft_model) {
  const std::string model_name =
      draft_model != nullptr ? "draft model " + draft_model->config().name : "";
  switch (mode) {
    case SpecMode::kNone:
      return "none";
    case SpecMode::kNgram:
      return "ngram";
    case SpecMode::kDflash:
      return dflash != nullptr ? "dflash " + dflash->dir() : "none";
    case SpecMode::kDraft:
      return draft_model != nullptr ? model_name : "none";
    case SpecMode::kAuto:
      switch (auto_source(dflash != nullptr, draft_model != nullptr)) {
        case AutoSource::kDflash:
          return "dflash " + dflash->dir();
        case AutoSource::kDraftModel:
          return model_name;
        case AutoSource::kNgram:
          return "ngram";
      }
      return "ngram";
    default:
      return spec_mode_name(mode);
  }
}

}  // namespace salvo
