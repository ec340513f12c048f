// DflashDrafter: drafts with a DFlash block drafter (dflash_model.h) through a runner
// (dflash_runner.h: the CPU, or the target's device). The runner keeps the drafter's context K/V
// for the sequence's committed positions, fed by observe() with the target's hidden states; each
// proposal is one draft pass for the root, whose per-depth candidates become a tree
// (dflash_tree.h): a chain, best-first on cumulative log-probability, or best-first with an
// adapter rescoring each node's children given its token.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "speculative/dflash_model.h"
#include "speculative/dflash_runner.h"
#include "speculative/dflash_tree.h"
#include "speculative/drafter.h"

namespace salvo {

class DflashDrafter : public Drafter {
 public:
  // `n_tokens`: ids the drafter may propose. The model must outlive the drafter; `runner`
  // runs it (new_dflash_runner).
  DflashDrafter(const DflashModel& model, std::unique_ptr<DflashRunner> runner, int32_t n_tokens,
                SpecTree tree);

  // Always the drafter's tree kind of `budget` nodes, also where SpecPolicy books the size as a
  // chain (budget <= depth): one block pass drafts every depth, so a chain costs what a tree of
  // as many nodes costs, and the tree accepts more. Session 16 built chains for those requests
  // instead: --spec auto on the H200's code prompts fell from 962 to 868 tok/s.
  DraftTree propose(std::span<const int32_t> context, int budget, int max_depth) override;
  std::string name() const override { return "DFlash drafter " + model_.dir(); }
  // 8 nodes, as deep as the block reaches: one block pass drafts every depth, so a depth cap
  // below the block only drops drafted tokens, and on a GPU 9 rows cost 1.25x one row while 17
  // cost 2.2x (H200, Qwen2.5-Coder-1.5B). bench_spec --limit 2, auto against plain with these
  // caps / with 16 nodes 8 deep: H200 code 1.45 / 1.28, math 2.36 / 2.37, chat 1.06 / 1.08,
  // grounded 1.50 / 1.51; CPU (2 threads, 2 reps) 0.98 / 1.09, 1.39 / 1.25, 1.01 / 0.88,
  // 1.09 / 1.06. Both noisy (two runs of one mode differ by 0.1): a larger A/B is due.
  std::pair<int, int> default_caps() const override { return {8, model_.config().max_depth()}; }
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
  int32_t n_tokens_;
  SpecTree tree_;
  std::vector<Candidates> depths_;
  std::vector<float> pending_;  // features of positions runner_->n_positions() onwards
};

}  // namespace salvo
