// SpecPolicy: how large a draft tree the next pass should verify, if any. A pass over k rows
// costs more than a one-row pass (on a CPU a 17-row pass costs 2-2.6x), and drafting costs time
// too, so a tree is worth verifying only while the tokens it yields per unit of time beat plain
// decoding. The adaptive policy measures everything from the session's own passes:
//   - the time of a pass by row count (an EMA per row count; unmeasured counts are interpolated,
//     or extrapolated along the line from one row to the largest measured count). The policy
//     only re-measures the counts it chooses, so a figure too high (warm-up noise: 3.6 ms for
//     7 rows early in an H200 session, 2.7 later) kept its count from being chosen, and, as the
//     end of the line, made every wider count look dear too: that session drafted 4-node trees
//     and 42% plain passes where fixed 8-deep trees gave 1.3x the tok/s. So no figure may last
//     unchecked: a pass costs no more than any measured wider pass (a wider pass does no less
//     work), and a count not measured for kStalePasses recorded passes is estimated from the
//     fresh counts instead of its own figure, so it looks as cheap as they say, is chosen and
//     measured again (where nothing fresher exists, a stale figure still beats the prior);
//   - the drafter's time by tree depth (an EMA per depth, fitted by a line: a fixed part, which
//     is most of a DFlash block pass, and a part per level, which is most of a draft model's;
//     in steady state: the first drafted pass after plain ones, where a draft model catches up
//     with the tokens it missed, does not count);
//   - the acceptance rate at each depth (accepted / tested, with slow forgetting and a weak
//     prior so that depths not tried lately get tried again), for chains and for trees apart;
//   - the nodes a drafter actually proposes per level (an n-gram drafter often proposes fewer
//     than it may).
// From these it picks the depth and the shape, a chain (one node per level) or a tree in the
// user's budget/depth proportion, that maximise expected tokens per millisecond within the
// user's caps. A drafter that builds its own tree from a node budget in one pass (DFlash) is
// sized by budget instead, from the tokens its passes yielded per budget (budget_tokens()). A tree
// accepts more per depth, a chain costs fewer rows: where a row is nearly free (a GPU) trees win,
// where each row adds a quarter of a pass (a CPU past a few rows) chains do. Each shape's
// acceptance is its own counts over the pooled counts of both as the prior, made optimistic while
// the shape is untried, so a shape not tried lately gets tried. It falls back to plain decoding
// while measured drafted passes lose to plain ones, probing again now and then (with growing
// intervals) in case the text became predictable.
//
// Probes are not free: a drafted pass that loses costs more than the plain pass it replaces, and
// the first one after plain passes also pays the drafter's catch-up (a draft model runs every
// token it missed). So the next probe waits until what it would lose if it failed like the last
// episode, plus the catch-up predicted from the tokens missed, is covered by what drafting has
// gained so far plus kProbeShare of the plain time since the last probe; that bounds what
// speculation can lose on text where it never pays.
#pragma once

#include <cstdint>
#include <vector>

namespace salvo {

struct DraftSize {
  int budget = 0;  // 0: a plain pass
  int depth = 0;
  bool drafting() const { return budget > 0 && depth > 0; }
};

// What one verification pass did.
struct PassRecord {
  int rows = 1;            // rows of the pass (root + tree nodes)
  double pass_ms = 0;      // the forward pass
  double draft_ms = 0;     // the drafter, for this pass
  int tree_depth = 0;      // deepest node of the tree verified
  int accepted = 0;        // depths accepted (the accepted path's length)
  int tested = 0;          // depths tested: accepted, plus one if a draft was rejected below it
  int tokens_emitted = 1;  // accepted + the bonus token
  int context = 0;         // committed tokens of the sequence before the pass
  bool chain = false;      // the size asked for was a chain (budget == depth)
  // ordered: the drafter gave its tree's order (DraftTree::order), and path_order holds the
  // order of each accepted node, the root's child first. A budget tree's first n grown nodes
  // are its tree of budget n, so the pass also tells what every smaller budget would have
  // yielded on the same text.
  bool ordered = false;
  std::vector<int32_t> path_order;
  // The pass did one-time work besides its rows (Model::last_pass_was_warmup: a CUDA graph
  // captured for a new shape), so its time says nothing about the next pass of that shape.
  bool warmup = false;
};

// What the policy assumes of a backend's pass costs before it has measured them. The
// defaults suit a device backend (CUDA: graphs captured per shape, rows nearly free up to a
// tile); cpu() a CPU's.
struct PassCosts {
  // The first pass of a row count may carry one-time work the backend does not flag
  // (PassRecord::warmup), so its time is not kept; false: it is, replaced by the second.
  bool cold_first_passes = true;
  // A row count never measured, wider than every measured one, costs what the widest does
  // (a step function of the rows: CUDA's tiles); false: along the line from the one-row
  // pass through the widest (every row adds about the same).
  bool flat_beyond_widest = true;
  // Extra cost per row, as a share of a one-row pass, until a wider pass is measured.
  double prior_row_cost = 0.08;
  // The first drafted pass is one node, and the drafter is priced at its time (an upper bound)
  // until a steady-state figure exists; false: the first trees are sized as if drafting were
  // free, which costs little where rows are nearly free and the drafter's pass is a fraction of
  // the target's (a GPU), and a CPU up to several one-row passes.
  bool cautious_start = false;
  // A CPU captures nothing, and past a few rows each adds ~0.25 of a one-row pass
  // (Qwen2.5-Coder-1.5B, DEVELOPERS.md session 7) to ~0.3 (SmolLM2-135M).
  static PassCosts cpu() {
    return {.cold_first_passes = false,
            .flat_beyond_widest = false,
            .prior_row_cost = 0.25,
            .cautious_start = true};
  }
};

class SpecPolicy {
 public:
  // Non-adaptive policies always draft with the caps (the explicit --spec modes).
  // budget_trees: the drafter gives every depth in one pass and builds its own tree from a
  // node budget (DFlash: Drafter::drafts_all_depths_at_once). Its sizes are then budgets
  // (depth up to the caps), priced by the tokens measured per budget (below), and a depth not
  // measured costs the drafter what the measured ones do rather than in proportion to depth.
  explicit SpecPolicy(bool adaptive = true, bool budget_trees = false, PassCosts costs = {})
      : adaptive_(adaptive), budget_trees_(budget_trees), costs_(costs) {}

  // The tree size for the next pass, within the caps; !drafting(): a plain pass.
  DraftSize next(int max_budget, int max_depth);
  void record(const PassRecord& pass);
  // A new request on the same backend and drafter: the costs stay (they belong to the backend and
  // the drafter), what belongs to the text goes. Whether drafting paid on the last text (a chat
  // answer, say) says little about the next one (code), so drafting is on again and probes
  // start over (its first drafted passes are not judged); the last text's acceptance stays as
  // a weak prior (kCarriedAcceptance of its counts).
  void new_text();

  // The model behind next(), exposed for tests and statistics.
  double pass_ms(int rows) const;  // estimated time of a pass of `rows` rows (0: unknown)
  // Estimated P(accept at depth | reached depth - 1) for trees, or for chains.
  double acceptance(int depth, bool chain = false) const;
  double expected_tokens(int depth, bool chain = false) const;  // per pass, bonus included
  double expected_rate(DraftSize size) const;                   // tokens per ms; size 0 = plain
  // Budget trees: expected tokens per pass (bonus included) of trees of 0..max_budget nodes.
  std::vector<double> budget_tokens(int max_budget) const;
  double draft_cost(int depth) const;  // the drafter's ms for a tree this deep (0: unknown)
  // The best size within the caps, no deeper than depth_limit (default: max_depth); trees keep
  // the caps' proportion of nodes to depth.
  DraftSize best_size(int max_budget, int max_depth, int depth_limit = 0) const;
  static bool is_chain(DraftSize size) { return size.budget <= size.depth; }

  bool drafting() const { return drafting_; }
  double plain_ms() const { return pass_ms(1); }

 private:
  static constexpr double kAlpha = 0.25;      // EMA weight of the newest pass
  static constexpr double kPlainAlpha = 0.5;  // ... of the newest one-row pass
  // ... of the newest drafted pass's tokens and time. A DFlash tree's tokens range from 1 to 8
  // pass by pass: at 0.125 the average of a text that decodes at 1.39x plain dipped below
  // plain often enough that a simulated code answer spent 35% of its passes plain.
  static constexpr double kRateAlpha = 0.08;
  static constexpr double kForget = 0.98;      // per-pass decay of the acceptance counts
  static constexpr double kPriorWeight = 1.0;  // pseudo-tests at kPriorAcceptance per depth
  static constexpr double kPriorAcceptance = 0.5;
  // A shape whose decayed depth-1 count is below this (one pass ~34 drafted passes ago) is
  // untried and has its prior moved kExplore of the way to 1.
  static constexpr double kUntriedCount = 0.5;
  static constexpr double kExplore = 0.5;
  // Recorded passes after which a row count's figure is stale. Longer than the policy's own
  // cycles of re-visiting sizes (a plain pass every 8-32 drafted ones, a shape untried for ~34
  // drafted passes tried again), so the counts it uses stay fresh; short enough that a count
  // stuck at a wrong figure is re-tried within a few hundred milliseconds on a GPU. Where the
  // figure was right, a re-try loses part of one pass per kStalePasses.
  static constexpr int kStalePasses = 64;
  static constexpr double kMargin = 1.05;     // drafting must win by 5% to start again
  static constexpr double kKeepMargin = 1.0;  // ... and not lose, to go on
  static constexpr int kFirstProbe = 8;       // plain passes before the first re-probe
  static constexpr int kMaxProbeGap = 512;    // longest wait between probes
  static constexpr int kPlainRefresh = 32;    // drafted passes between plain ones that re-measure
  // Drafted over plain rate that needs fewer checks: a plain figure 25% off is needed to turn
  // such a win into a loss. (At 1.5, code on the H200 at 1.35-1.45x drafted 8 passes to a
  // plain one: ~2% of its rate.)
  static constexpr double kClearWin = 1.25;
  // A win this wide re-measures the plain pass 4x less often (every 4 kPlainRefresh drafted
  // passes): only a plain figure off by half could turn it into a loss, and each plain pass costs
  // what a drafted one would have yielded beyond it. (Session 39 on the H200, code at 2.5x plain:
  // ~0.7 ms of a 1.6 ms pass each, one or two per answer of ~50 passes, ~1-2% of auto's time.)
  static constexpr double kWideWin = 2.0;
  // Of the drafted passes' time that verifying a wider budget tree than the chosen one may add.
  static constexpr double kExploreShare = 0.01;
  static constexpr double kProbeShare = 0.015;      // of plain time that failed probes may cost
  static constexpr double kEarlierGainShare = 0.1;  // ... of earlier texts' gains
  // Deepest tree of a probe (and of the first drafted passes): a probe asks whether drafting
  // pays at all, which the first depths answer, and a drafter's cost grows with depth (a DFlash
  // drafter on a CPU runs the LM head once per level), so a failed probe stays cheap.
  static constexpr int kProbeDepth = 3;
  // new_text(): the last text's acceptance counts are kept at this share (~1 pseudo-pass of the
  // ~50 a depth holds in steady state: a chat answer's acceptance says little about code), and
  // the new text's first kNewTextGrace drafted passes are not judged.
  static constexpr double kCarriedAcceptance = 0.02;
  static constexpr int kNewTextGrace = 2;
  // ... and the budget trees' tokens by budget at this share (simulated 70-pass code answers:
  // 0.02 gave 0.95 of the fixed 7-node tree's rate, 0.25 0.98).
  static constexpr double kCarriedBudgets = 0.25;
  // An episode's first kMinJudgedPasses - 1 judged passes keep drafting on a near miss (a rate
  // at least kNearMiss of the one that pays) unless they lost more than kUndecidedLoss one-row
  // passes: one pass is a poor sample of acceptance.
  static constexpr int kMinJudgedPasses = 4;
  static constexpr double kNearMiss = 0.8;
  static constexpr double kUndecidedLoss = 2.0;

  DraftSize tree_for_depth(int depth, int max_budget, int max_depth) const;
  void start_episode();  // a probe or a new text: the episode's accounts start from nothing
  // Budget trees: the tokens the pass's tree, and each smaller budget's, yielded.
  void record_budgets(const PassRecord& pass);
  // Budget trees: now and then the widest tree of about the chosen one's cost instead.
  DraftSize explore_budgets(DraftSize best, int max_budget, int max_depth);
  // acceptance(d, chain) for d = 1..depth in one walk over the counts.
  std::vector<double> acceptance_curve(int depth, bool chain) const;
  // Drafting stopped during the text's opening, on a CPU, for budget trees: the next probe is
  // the one-node probe of record()'s opening rule.
  bool opening_stopped() const {
    return !drafting_ && opening_ && budget_trees_ && costs_.cautious_start;
  }
  // Whether the count's figure was kept within the last kStalePasses recorded passes.
  bool pass_fresh(int rows) const;
  // Both shapes' decayed acceptance counts times `factor` (per-pass forgetting, a new text).
  void scale_acceptance(double factor);
  // A drafter's catch-up of `ms` over `missed` tokens, into the per-token estimate.
  void add_catch_up(double ms, int missed);

  bool adaptive_;
  bool budget_trees_;
  PassCosts costs_;
  // Budget trees: decayed tokens emitted and passes, by the nodes of the tree verified.
  std::vector<double> budget_tokens_, budget_passes_;
  int passes_since_widest_ = 0;           // drafted passes since explore_budgets() last widened one
  std::vector<double> pass_ms_by_rows_;   // [rows] EMA; 0 = not measured
  std::vector<int> passes_by_rows_;       // [rows] passes seen (the first is not kept)
  std::vector<int> measured_at_by_rows_;  // [rows] recorded_passes_ at the last kept pass
  int recorded_passes_ = 0;               // passes given to record()
  std::vector<double> tested_[2], accepted_[2];  // [chain][depth - 1] decayed counts
  bool draft_measured() const;
  std::vector<double> draft_ms_by_depth_;  // [depth] steady-state EMA; < 0 = not measured
  double nodes_per_level_[2] = {0, 0};     // [chain]; 0 = not measured
  // Tokens per ms of drafted passes: EMAs of their tokens and of their time (a ratio of EMAs:
  // an EMA of each pass's rate let one pass that yields a single token weigh too much).
  double drafted_rate_ = 0;
  double drafted_tokens_ = 0, drafted_ms_ = 0;
  bool previous_plain_ = true;  // the last recorded pass had one row
  bool drafting_ = true;
  int plain_passes_since_probe_ = 0;
  int drafted_since_plain_ = 0;
  int probe_gap_ = kFirstProbe;
  // Time the current drafting episode lost against plain passes (negative: gained), with the
  // drafter's actual time, catch-up included.
  double episode_loss_ms_ = 0;
  double episode_worst_loss_ms_ = 0;  // the episode's dearest pass against plain ones
  int episode_passes_ = 0;            // judged drafted passes of the episode
  double episode_tokens_ = 0, episode_ms_ = 0;
  double probe_cost_ms_ = 0;          // what the last failed episode lost, catch-up aside
  double catch_up_ms_per_token_ = 0;  // the drafter's catch-up per plain pass it missed
  // Time all drafted passes saved against plain passes, catch-up included (negative: lost).
  double gain_ms_ = 0;
  // The same over the earlier texts (new_text() moves gain_ms_ here); kEarlierGainShare of it
  // may pay for probes.
  double earlier_gain_ms_ = 0;
  int plain_run_ = 0;        // plain passes since the last drafted one
  int drafted_context_ = 0;  // PassRecord::context of the last drafted pass
  // The first drafted pass (the drafter's whole catch-up, e.g. a draft model's prompt prefill),
  // kept until a steady-state draft cost separates its catch-up part.
  double first_draft_ms_ = 0;
  int first_depth_ = 0, first_missed_ = 0;
  bool first_warmup_ = false;        // ... and its target pass was a warm-up
  double first_pass_ms_ = 0;         // ... its target pass's time
  int first_tokens_ = 0;             // ... and the tokens it emitted
  double plain_ms_since_probe_ = 0;  // plain pass time since drafting stopped or the last probe
  int new_text_grace_ = 0;           // drafted passes of a new text not judged yet
  // A text's opening: no episode of it has paid or stopped yet. The probe after the opening
  // stopped (opening_stopped()) is one node, and its episode is strict (kClearWin to start, no
  // undecided passes); opening_cost_ms_ is the opening's own probe price, which stands again if
  // that probe fails.
  bool opening_ = true;
  bool strict_episode_ = false;
  double opening_cost_ms_ = 0;
};

}  // namespace salvo
