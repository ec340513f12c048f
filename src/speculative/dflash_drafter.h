// DflashDrafter: drafts with a DFlash block drafter (dflash_model.h) through a runner
// (dflash_runner.h: the CPU, or the target's device). The runner keeps the drafter's context K/V
// for the sequence's committed positions, fed by observe() with the target's hidden states; each
// proposal is one draft pass for the root, whose per-depth candidates become a tree
// (dflash_tree.h): a chain, best-first on cumulative log-probability, or best-first with an
// adapter rescoring each node's children given its token, and then raising those that repeat
// the context (context_boost).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "speculative/dflash_model.h"
#include "speculative/dflash_runner.h"
#include "speculative/dflash_tree.h"
#include "speculative/drafter.h"
#include "speculative/ngram_index.h"

namespace salvo {

class DflashDrafter : public Drafter {
 public:
  // Large trees (kLargeTree nodes or more) draft differently from small ones: their
  // verification pass (~5 ms at 64 nodes on the H200, against ~1.7 at 7) dwarfs the draft, so
  // they take what adds tokens a pass at a little draft time.
  // - Every id (SpecOptions::kVocabByTree): small trees draft ids below kFrequentIds. The head
  //   and top-k over all 151,936 ids add 0.065 ms to a draft on the H200 (session 41: 0.557
  //   against 0.492 ms), and the rare tokens add tokens a pass mostly to large trees.
  //   bench/dflash_replay.py over the H200's 16 code answers (session 41, --vocab 0 against
  //   65536, mean tokens a pass): 7 nodes 3.708 / 3.674 (+0.9%), 16 4.424 / 4.331 (+2.1%), 32
  //   4.798 / 4.713 (+1.8%), 64 5.125 / 4.990 (+2.7%); the H200 measured code at 64 nodes 4.99
  //   tokens a pass (median) against 4.86, and 854 against 839 tok/s.
  // - kWideCandidates candidates a depth for adapter trees, not the adapter's top_k (8): the
  //   same replay (every id), mean tokens a pass with 8 / 16: 16 nodes 4.424 / 4.417, 32 4.798 /
  //   4.813, 48 5.042 / 5.075, 64 5.125 / 5.197 (median 5.053 / 5.110). Only large trees reach
  //   the 9th-16th candidates. Best-first trees gain nothing from them (64 nodes: 4.696 / 4.695).
  //   The H200 (session 42, 38 prompts), 64 nodes, 16 / 8 candidates: code 5.053 / 4.988 tokens
  //   a pass (median; mean 5.180 / 5.146), 859 / 855 tok/s, draft 0.601 / 0.550 ms a pass;
  //   grounded 6.35 / 6.16, chat 2.89 / 2.82, math 6.69 both.
  // - With a ranked head (DflashRunner::ranked_rows, draft_vocab.h), small trees draft the
  //   kRankedSmallTree best-ranked ids and large trees every row of it (65536): replayed over
  //   session 41's 38 H200 answers (mean tokens a pass, 7 nodes), whole vocabulary / ids below
  //   65536 / best-ranked 32768: code 3.708 / 3.674 / 3.702, math 5.088 / 4.959 / 5.088,
  //   grounded 4.007 / 3.847 / 4.050, chat 2.247 / 2.214 / 2.252; the best-ranked 65536 gave
  //   the whole vocabulary's figures at every budget. Half the head's rows of the lowest 65536,
  //   and tokens a pass as if it drafted every id.
  static constexpr int32_t kFrequentIds = 65536;
  static constexpr int32_t kRankedSmallTree = 32768;
  static constexpr int kLargeTree = 48;
  static constexpr int kWideCandidates = 16;
  // How many ids small and large trees draft from for SpecOptions::vocab `vocab` over n_vocab
  // ids, with a runner whose ranked head has ranked_rows rows (0: none).
  static std::pair<int32_t, int32_t> vocabularies(int32_t n_vocab, int32_t vocab,
                                                  int32_t ranked_rows = 0);

  // `n_tokens`: ids the drafter may propose; `small_tree_tokens` (0: n_tokens): the ids for
  // trees under kLargeTree nodes. The model must outlive the drafter; `runner` runs it
  // (new_dflash_runner).
  DflashDrafter(const DflashModel& model, std::unique_ptr<DflashRunner> runner, int32_t n_tokens,
                SpecTree tree, int32_t small_tree_tokens = 0);

  // Always the drafter's tree kind of `budget` nodes, also where SpecPolicy books the size as a
  // chain (budget <= depth): one block pass drafts every depth, so a chain costs what a tree of
  // as many nodes costs, and the tree accepts more. Session 16 built chains for those requests
  // instead: --spec auto on the H200's code prompts fell from 962 to 868 tok/s.
  DraftTree propose(std::span<const int32_t> context, int budget, int max_depth) override;
  std::string name() const override { return "DFlash drafter " + model_.dir(); }
  // 7 nodes, as deep as the block reaches: one block pass drafts every depth, so a depth cap
  // below the block only drops drafted tokens. 7 nodes and the root are 8 rows, one 8-column
  // int8 mma tile on CUDA: the 9th row starts a second tile (H200, Qwen2.5-Coder-1.5B, greedy
  // ms: 1 row 1.39, 4 2.00, 8 2.23, 9 2.91, 16 3.23), and on a CPU one more call of the packed
  // kernels (8 or 4 rows a call). bench_spec on the H200 (38 prompts), fixed adapter trees of 7 / 8
  // nodes against plain: code 1.45 / 1.24, math 2.26 / 1.85, chat 1.04 / 0.89, grounded
  // 1.70 / 1.42 (tokens a pass 2.91 / 3.02 on code); --spec auto with 7 / 8: code 1.35 /
  // 1.35, math 2.16 / 2.15, chat 0.99 / 0.98, grounded 1.56 / 1.52.
  std::pair<int, int> default_caps() const override { return {7, model_.config().max_depth()}; }
  bool drafts_all_depths_at_once() const override { return true; }
  std::span<const int32_t> hidden_layers() const override { return model_.config().target_layers; }
  void observe(int32_t first, int32_t n, const float* features) override;
  int32_t observed() const override { return runner_->n_positions() + pending_rows(); }

 private:
  // Features wait here until a draft needs them: while the policy decodes plainly, projecting
  // every committed row one at a time would cost a few percent of each pass for nothing, and
  // one batched projection later is cheaper per row.
  static constexpr int32_t kMaxPending = 256;
  int32_t pending_rows() const {
    return static_cast<int32_t>(pending_.size() / model_.config().feature_width());
  }
  void flush();

  const DflashModel& model_;
  std::unique_ptr<DflashRunner> runner_;
  NgramIndex ngrams_{3, 4};  // the context's n-grams for context_boost (dflash_tree.h)
  int32_t n_tokens_, small_tree_tokens_;
  SpecTree tree_;
  std::vector<Candidates> depths_;
  std::vector<float> pending_;  // features of positions runner_->n_positions() onwards
};

}  // namespace salvo
