#include "speculative/spec_policy.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace salvo {
namespace {

double ema(double old_value, double sample, double alpha) {
  return old_value == 0 ? sample : old_value + alpha * (sample - old_value);
}

}  // namespace

bool SpecPolicy::pass_fresh(int rows) const {
  return recorded_passes_ - measured_at_by_rows_[rows] <= kStalePasses;
}

double SpecPolicy::pass_ms(int rows) const {
  const int n = static_cast<int>(pass_ms_by_rows_.size());
  if (rows < 1) return 0;
  // Stale counts are left out while a fresh wider count gives the curve a shape without them;
  // where none does (drafting paused for a while), the stale figures still beat the prior.
  bool fresh_wide = false;
  for (int j = 2; j < n && !fresh_wide; ++j) fresh_wide = pass_ms_by_rows_[j] > 0 && pass_fresh(j);
  auto usable = [&](int j) {
    return pass_ms_by_rows_[j] > 0 && (j == 1 || !fresh_wide || pass_fresh(j));
  };
  // The cheapest usable count wider than `rows` bounds it from above (the one-row pass aside:
  // every comparison is against it as measured).
  double bound = std::numeric_limits<double>::infinity();
  int hi = n;
  for (int j = n - 1; j > rows; --j) {
    if (usable(j)) bound = std::min(bound, pass_ms_by_rows_[j]), hi = j;
  }
  if (rows < n && usable(rows)) {
    return rows == 1 ? pass_ms_by_rows_[1] : std::min(pass_ms_by_rows_[rows], bound);
  }
  int lo = std::min(rows, n) - 1;
  while (lo >= 1 && !usable(lo)) --lo;
  const bool has_lo = lo >= 1, has_hi = hi < n;
  if (!has_lo && !has_hi) return 0;
  const double t_lo = !has_lo   ? 0
                      : lo == 1 ? pass_ms_by_rows_[1]
                                : std::min(pass_ms_by_rows_[lo], bound);
  double estimate;
  if (has_lo && has_hi) {
    const double t = static_cast<double>(rows - lo) / (hi - lo);
    estimate = t_lo + t * (bound - t_lo);
  } else if (costs_.flat_beyond_widest && has_lo && lo > 1 &&
             (rows >= n || pass_ms_by_rows_[rows] == 0)) {
    // A count never measured (a first pass is not kept), wider than every measured one: as dear
    // as the widest, so that it is tried and measured. The line from the one-row pass
    // overestimates where the cost is a step function of the rows (CUDA: 2 rows 1.58 ms, 3 2.03,
    // 4 2.00, 8 2.24, 9 2.91 on the H200), and a count the estimate makes look dear is never
    // chosen, so never corrected: session 18's --spec auto measured 3 rows and priced 8 at 3.5
    // ms. Where the wider count is dearer (a CPU), its first two passes say so and the line
    // takes over.
    estimate = t_lo;
  } else if (has_lo && lo > 1 && usable(1)) {
    // Beyond the usable counts: along the line from the one-row pass to the widest of them.
    const double slope = std::max(0.0, (t_lo - pass_ms_by_rows_[1]) / (lo - 1));
    estimate = t_lo + slope * (rows - lo);
  } else {
    // No such line: the prior cost per row from the nearest count.
    const int ref = has_lo ? lo : hi;
    const double t_ref = has_lo ? t_lo : bound;
    const double per_row = costs_.prior_row_cost;
    estimate = t_ref * (1 + per_row * (rows - 1)) / (1 + per_row * (ref - 1));
  }
  return rows == 1 ? estimate : std::min(estimate, bound);
}

std::vector<double> SpecPolicy::acceptance_curve(int depth, bool chain) const {
  // Each depth's prior is the estimate of the depth above it: a depth not tried lately is
  // assumed as good as the last one measured, so deeper trees get explored. A shape's own
  // counts then sit on that prior with the other shape's counts, moved halfway to 1 while the
  // shape is untried (lately): otherwise the figure the other shape made would keep it from
  // ever being tried. (The prior once held the shape's own counts too, which counted them
  // twice: two misses at depth 2 put it at 0.09 where one count gives 0.3, and session 18's
  // --spec auto drafted 1-deep chains for 90 passes of a code answer.)
  const bool untried = tested_[chain].empty() || tested_[chain][0] < kUntriedCount;
  std::vector<double> curve(depth);
  double pooled = kPriorAcceptance;
  for (int d = 1; d <= depth; ++d) {
    double tested[2] = {0, 0}, accepted[2] = {0, 0};
    for (int s = 0; s < 2; ++s) {
      if (d <= static_cast<int>(tested_[s].size())) {
        tested[s] = tested_[s][d - 1];
        accepted[s] = accepted_[s][d - 1];
      }
    }
    const double other =
        (accepted[!chain] + kPriorWeight * pooled) / (tested[!chain] + kPriorWeight);
    const double prior = untried ? other + kExplore * (1 - other) : other;
    curve[d - 1] = (accepted[chain] + kPriorWeight * prior) / (tested[chain] + kPriorWeight);
    pooled = (accepted[0] + accepted[1] + kPriorWeight * pooled) /
             (tested[0] + tested[1] + kPriorWeight);
  }
  return curve;
}

double SpecPolicy::acceptance(int depth, bool chain) const {
  return depth < 1 ? kPriorAcceptance : acceptance_curve(depth, chain).back();
}

double SpecPolicy::expected_tokens(int depth, bool chain) const {
  double tokens = 1, reach = 1;
  for (double rate : acceptance_curve(depth, chain)) {
    reach *= rate;
    tokens += reach;
  }
  return tokens;
}

DraftSize SpecPolicy::tree_for_depth(int depth, int max_budget, int max_depth) const {
  // Trees keep the user's proportion of nodes to depth (the default 16/8: two per level).
  const int budget = static_cast<int>(
      std::lround(static_cast<double>(depth) * max_budget / std::max(1, max_depth)));
  return {std::clamp(budget, depth, max_budget), depth};
}

bool SpecPolicy::draft_measured() const {
  return std::any_of(draft_ms_by_depth_.begin(), draft_ms_by_depth_.end(),
                     [](double ms) { return ms >= 0; });
}

// The measured depths, fitted by ms = a + b * depth (least squares, a and b >= 0). A DFlash
// drafter costs nearly the same at any depth (one block pass gives every depth; on a GPU it is
// ~0.4 of a target pass), a draft model one pass of its own per level: charging every drafter
// per level, as before, made deep trees look several times dearer than they are for DFlash. With
// one depth measured the cost is taken as proportional to depth, the cautious guess, unless the
// drafter gives every depth in one pass: then it is that depth's cost. (Session 17 on the H200:
// the DFlash drafter's first steady-state passes were 1-node trees at 0.75 ms; charged 0.75 ms
// a level, deeper trees looked dear and --spec auto drafted 1-node trees for 18 passes.)
double SpecPolicy::draft_cost(int depth) const {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t d = 1; d < draft_ms_by_depth_.size(); ++d) {
    const double y = draft_ms_by_depth_[d];
    if (y < 0) continue;
    n += 1, sx += d, sy += y, sxx += static_cast<double>(d) * d, sxy += d * y;
  }
  if (n == 0) {
    // Before a steady-state figure, a cautious start prices the drafter at the first drafted
    // pass's time, an upper bound (it may include the drafter's catch-up); otherwise at
    // nothing, so that the first sizes are generous (a warm-up's time bounds nothing).
    if (!costs_.cautious_start || first_draft_ms_ <= 0 || first_warmup_) return 0;
    return budget_trees_ ? first_draft_ms_ : first_draft_ms_ / std::max(1, first_depth_) * depth;
  }
  if (n == 1) return budget_trees_ ? sy : sy / sx * depth;
  double b = std::max(0.0, (sxy - sx * sy / n) / (sxx - sx * sx / n));
  double a = (sy - b * sx) / n;
  if (a < 0) a = 0, b = sxy / sxx;  // the best line through the origin
  return a + b * depth;
}

// A budget tree's tokens per pass, measured per budget (each pass measures its budget and,
// where the drafter gives its order, every smaller one: record_budgets): the per-depth acceptance
// of a chain describes a tree poorly (a 7-node DFlash tree is ~4 deep and branches where the
// drafter is unsure), and the policy took the rate of its n-node trees for that of n-deep chains.
// Two things are known about the curve, so they shape the estimate: a tree of n nodes contains the
// tree of n - 1 (best-first), so it yields no fewer tokens, and the per-depth model (fed by
// the same passes) gives an optimistic prior (an n-node tree as an n-deep chain) for budgets
// not measured lately, so they get tried. Where a row is nearly free (the H200 up to 8 rows)
// the largest budget of the flat stretch then wins as soon as any budget has been measured.
std::vector<double> SpecPolicy::budget_tokens(int max_budget) const {
  std::vector<double> tokens(std::max(0, max_budget) + 1, 1.0);
  if (max_budget < 1) return tokens;
  const std::vector<double> curve = acceptance_curve(max_budget, /*chain=*/false);
  double model = 1, reach = 1;
  for (int n = 1; n <= max_budget; ++n) {
    reach *= curve[n - 1];
    model += reach;
    const bool seen = n < static_cast<int>(budget_passes_.size());
    const double sum = seen ? budget_tokens_[n] : 0, count = seen ? budget_passes_[n] : 0;
    const double estimate = (sum + kPriorWeight * model) / (count + kPriorWeight);
    tokens[n] = std::max(tokens[n - 1], estimate);
  }
  return tokens;
}

double SpecPolicy::expected_rate(DraftSize size) const {
  if (!size.drafting()) {
    const double t = pass_ms(1);
    return t > 0 ? 1 / t : 0;
  }
  if (budget_trees_) {
    const double t = pass_ms(1 + size.budget) + draft_cost(std::min(size.budget, size.depth));
    return t > 0 ? budget_tokens(size.budget).back() / t : 0;
  }
  const double per_level = nodes_per_level_[is_chain(size)];
  const double nodes =
      per_level > 0 ? std::min<double>(size.budget, per_level * size.depth) : size.budget;
  const double t = pass_ms(1 + static_cast<int>(std::ceil(nodes))) + draft_cost(size.depth);
  return t > 0 ? expected_tokens(size.depth, is_chain(size)) / t : 0;
}

DraftSize SpecPolicy::best_size(int max_budget, int max_depth, int depth_limit) const {
  const int deepest = std::min({max_budget, max_depth, depth_limit > 0 ? depth_limit : max_depth});
  DraftSize best = tree_for_depth(deepest, max_budget, max_depth);
  if (pass_ms(1) == 0) return best;  // nothing measured: the caps
  double best_rate = 0;
  if (budget_trees_) {
    // Budgets up to the caps (or depth_limit), each as deep as the caps allow.
    int most = std::min(max_budget, depth_limit > 0 ? depth_limit : max_budget);
    // A cautious start grows the trees by doubling: a budget not measured yet is priced from an
    // optimistic prior (so that it gets tried), and on a CPU a tree twice the size of any tried
    // costs a few one-row passes if it fails.
    if (costs_.cautious_start) {
      most = std::min(most, std::max(1, 2 * (static_cast<int>(budget_passes_.size()) - 1)));
    }
    const std::vector<double> tokens = budget_tokens(most);
    best = {most, max_depth};
    for (int n = 1; n <= most; ++n) {
      const double t = pass_ms(1 + n) + draft_cost(std::min(n, max_depth));
      const double rate = t > 0 ? tokens[n] / t : 0;
      if (rate > best_rate) {
        best_rate = rate;
        best = {n, max_depth};
      }
    }
    return best;
  }
  for (int depth = 1; depth <= deepest; ++depth) {
    const DraftSize tree = tree_for_depth(depth, max_budget, max_depth);
    for (const DraftSize size : {tree, DraftSize{depth, depth}}) {
      const double rate = expected_rate(size);
      if (rate > best_rate) {
        best_rate = rate;
        best = size;
      }
    }
  }
  return best;
}

DraftSize SpecPolicy::next(int max_budget, int max_depth) {
  if (max_budget <= 0 || max_depth <= 0) return {};
  if (!adaptive_) return {max_budget, std::min(max_depth, max_budget)};
  // Two plain passes first: every later decision compares against their cost, and the first may
  // carry one-time work (a CUDA graph capture: 4.3 ms against 2.5 on the H200), which the second
  // replaces.
  if (passes_by_rows_.size() < 2 || passes_by_rows_[1] < 2) return {};
  // The one-row cost drifts (load, context length) and every comparison depends on it: it is
  // re-measured every kPlainRefresh drafted passes, and four times as often while drafting wins
  // by less than kClearWin, where a stale plain figure could keep a losing drafter on.
  const double win = drafted_rate_ * pass_ms(1);
  const int refresh = win > kWideWin    ? 4 * kPlainRefresh
                      : win > kClearWin ? kPlainRefresh
                                        : kPlainRefresh / 4;
  if (drafting_ && ++drafted_since_plain_ > refresh) {
    drafted_since_plain_ = 0;
    return {};
  }
  if (!drafting_) {
    if (++plain_passes_since_probe_ < probe_gap_) return {};
    // What the probe would lose if it fails again, with the drafter's catch-up over every token
    // since it last ran, is paid from what speculation has gained so far (on this text, and a
    // share of what it gained on earlier ones) plus a small share of the plain time since the
    // last probe. On text where drafting never pays, probes thus cost at most that share; a
    // draft model whose catch-up alone costs more than the share is not probed again unless it
    // has gained before. (Session 18 on the H200: without the earlier texts' gains, a code
    // answer whose first passes drafted poorly waited ~70 plain passes for its next probe,
    // and 2 of 16 code prompts decoded at 1.0x where fixed trees gave 1.4x.)
    const double probe_cost = probe_cost_ms_ + catch_up_ms_per_token_ * plain_run_;
    const double gains =
        std::max(0.0, gain_ms_) + kEarlierGainShare * std::max(0.0, earlier_gain_ms_);
    if (probe_cost > kProbeShare * plain_ms_since_probe_ + gains) return {};
    // The probe after a text's opening stopped (record()) is the cheapest tree, one node.
    if (opening_stopped()) {
      plain_passes_since_probe_ = 0;
      plain_ms_since_probe_ = 0;
      probe_gap_ = std::min(2 * probe_gap_, kMaxProbeGap);
      return {1, 1};
    }
    // Probe: one drafted pass refreshes the estimates; record() decides whether to stay.
    plain_passes_since_probe_ = 0;
    plain_ms_since_probe_ = 0;
    probe_gap_ = std::min(2 * probe_gap_, kMaxProbeGap);
  }
  // A probe, or the first drafted passes (nothing measured yet), stays shallow: whether drafting
  // pays shows at the first depths, and deeper trees follow once it does. A budget-tree drafter
  // costs the same at any depth, and its size is priced from its measured rows already: a
  // shallow probe would only yield fewer tokens and fail more often.
  const bool probing = (!drafting_ || drafted_rate_ == 0) && !budget_trees_;
  // A cautious start: the first drafted pass is not judged (it measures the drafter and carries
  // its catch-up), so it is the cheapest, one node.
  if (costs_.cautious_start && !draft_measured() && first_draft_ms_ == 0) {
    return {1, std::min(1, max_depth)};
  }
  const DraftSize best = best_size(max_budget, max_depth, probing ? kProbeDepth : max_depth);
  return budget_trees_ ? explore_budgets(best, max_budget, max_depth) : best;
}

DraftSize SpecPolicy::explore_budgets(DraftSize best, int max_budget, int max_depth) {
  if (!best.drafting() || best.budget >= max_budget) return best;
  // The widest tree within twice the chosen one's time: a pass of it measures every budget up
  // to it (record_budgets), so budgets above the chosen one keep fresh figures instead of
  // drifting to the prior. It is verified once its extra time, spread over the passes since the
  // last such pass, is at most kExploreShare of theirs. (Session 23, H200, code: --spec auto's
  // trees made 2.8 tokens a pass against 3.26 for the fixed 7-node tree, 1.45x plain against
  // 1.54x: budgets not chosen lately were priced from a prior that kept them unchosen.)
  const double chosen_ms = pass_ms(1 + best.budget) + draft_cost(std::min(best.budget, max_depth));
  // Where every row adds to a pass (a CPU), the next budget up: the widest within twice the
  // time costs ~2x the chosen pass there, so at kExploreShare it came every ~100 drafted passes,
  // never within an answer, and a budget that one unlucky early pass priced low stayed unchosen
  // (session 45, fresh processes: 2-node trees for a whole math answer where the fixed 3-node
  // tree took 40 passes against 52). One node more costs ~10% and is tried every ~10 passes.
  const int most = costs_.flat_beyond_widest ? max_budget : std::min(max_budget, best.budget + 1);
  int widest = best.budget;
  double widest_ms = chosen_ms;
  for (int n = best.budget + 1; n <= most; ++n) {
    const double ms = pass_ms(1 + n) + draft_cost(std::min(n, max_depth));
    if (ms > 2 * chosen_ms) break;
    widest = n, widest_ms = ms;
  }
  if (widest == best.budget) return best;
  ++passes_since_widest_;
  if ((widest_ms - chosen_ms) > kExploreShare * chosen_ms * passes_since_widest_) return best;
  passes_since_widest_ = 0;
  return {widest, max_depth};
}

void SpecPolicy::scale_acceptance(double factor) {
  for (int s = 0; s < 2; ++s) {
    for (size_t d = 0; d < tested_[s].size(); ++d) {
      tested_[s][d] *= factor;
      accepted_[s][d] *= factor;
    }
  }
}

void SpecPolicy::new_text() {
  scale_acceptance(kCarriedAcceptance);
  // A budget tree's curve (how the tokens grow with the budget) is more the drafter's than the
  // text's: more of it is kept, so a new text does not start from the prior's small trees.
  for (size_t n = 0; n < budget_passes_.size(); ++n) {
    budget_tokens_[n] *= kCarriedBudgets;
    budget_passes_[n] *= kCarriedBudgets;
  }
  passes_since_widest_ = 0;
  // The first drafted pass of the new text is a probe (shallow, its rate standing alone), and
  // the accounts of gains and losses start from nothing.
  drafted_rate_ = 0;
  drafting_ = true;
  new_text_grace_ = kNewTextGrace;
  opening_ = true;
  previous_plain_ = true;
  plain_passes_since_probe_ = 0;
  drafted_since_plain_ = 0;
  probe_gap_ = kFirstProbe;
  start_episode();
  probe_cost_ms_ = 0;
  earlier_gain_ms_ += gain_ms_;
  gain_ms_ = 0;
  plain_run_ = 0;
  drafted_context_ = 0;
  plain_ms_since_probe_ = 0;
}

void SpecPolicy::add_catch_up(double ms, int missed) {
  if (missed > 0)
    catch_up_ms_per_token_ = ema(catch_up_ms_per_token_, std::max(0.0, ms) / missed, kAlpha);
}

void SpecPolicy::record(const PassRecord& measured) {
  if (!adaptive_ || measured.rows < 1) return;
  if (static_cast<int>(pass_ms_by_rows_.size()) <= measured.rows) {
    pass_ms_by_rows_.resize(measured.rows + 1, 0);
    passes_by_rows_.resize(measured.rows + 1, 0);
    measured_at_by_rows_.resize(measured.rows + 1, 0);
  }
  // A stale figure is the one this count is being re-measured to replace: averaged in, it would
  // keep the count looking as dear as when it went stale for several more passes.
  const bool stale =
      measured.rows > 1 && pass_ms_by_rows_[measured.rows] > 0 && !pass_fresh(measured.rows);
  ++recorded_passes_;
  // The first pass of a row count may carry one-time work (a CUDA graph captured for the new
  // shape: 2-7 ms on the H200 against a 2.5 ms pass), and a cost that high would keep that
  // count from being chosen again to be re-measured. So it is not kept: the count stays
  // estimated from its neighbours, and the pass is judged at that estimate where one exists.
  // (Session 9: --spec auto's first 9-row trees measured 4.8-9.1 ms, against 3.0 ms later, and
  // it drafted 3-deep chains from then on, 1.88 tokens a pass against 2.68 for fixed trees.)
  // The one-row count keeps its first pass (every estimate starts from it), replaced by the
  // second. So does every count on a backend whose first passes are not cold (a CPU: nothing
  // is captured, and a first pass's time is what the count costs): judged at the prior's
  // estimate instead, a CPU's first 6-8-row passes looked like 1.5 one-row passes where they
  // cost 2.5-3.5, and SmolLM2-135M's DFlash drafter went on drafting at a loss (bench_spec,
  // 96 tokens: auto/none 0.91-0.97 on code, chat and grounded).
  // A pass the backend flags as warm-up (a graph captured for another of its shapes: the logits
  // form, the hidden layers, a one-row pass too) is treated the same way. (Session 14: with the
  // one-row pass at 1.3 ms on the H200, the captures of a new text's first 2-5-row passes, 3-5.6
  // ms, kept --spec auto plain, 1.03-1.18 tokens a pass, where fixed DFlash trees gave 1.16-1.73x.)
  PassRecord pass = measured;
  const bool first_of_count = pass.rows > 1 && passes_by_rows_[pass.rows] == 0;
  const bool not_kept =
      (first_of_count && costs_.cold_first_passes) || (pass.warmup && pass_ms(pass.rows) > 0);
  if (not_kept) {
    const double estimate = pass_ms(pass.rows);
    if (estimate > 0) pass.pass_ms = std::min(pass.pass_ms, estimate);
  } else if (passes_by_rows_[pass.rows] <= 1) {
    pass_ms_by_rows_[pass.rows] = pass.pass_ms;
  } else if (stale) {
    pass_ms_by_rows_[pass.rows] = pass.pass_ms;
  } else {
    // While drafting, plain passes are the sparse re-measurements: each must count.
    const double alpha = pass.rows == 1 ? kPlainAlpha : kAlpha;
    pass_ms_by_rows_[pass.rows] = ema(pass_ms_by_rows_[pass.rows], pass.pass_ms, alpha);
  }
  if (!not_kept) measured_at_by_rows_[pass.rows] = recorded_passes_;
  ++passes_by_rows_[pass.rows];
  const bool after_plain = previous_plain_;
  previous_plain_ = pass.rows == 1;
  if (pass.rows == 1) {
    ++plain_run_;
    if (!drafting_) plain_ms_since_probe_ += pass.pass_ms;
    return;
  }
  plain_run_ = 0;
  gain_ms_ += pass.tokens_emitted * pass_ms(1) - pass.pass_ms - pass.draft_ms;
  // Tokens the drafter has not seen: those since its last pass (the whole context at first, or
  // when a new request replaced the context).
  const int missed =
      pass.context >= drafted_context_ ? pass.context - drafted_context_ : pass.context;
  drafted_context_ = pass.context;

  // Both shapes forget with every drafted pass, so one not tried lately drifts to the pooled
  // estimate and gets tried again.
  scale_acceptance(kForget);
  // Budget trees keep their per-depth counts as trees (the prior of budget_tokens()), whatever
  // the budget/depth proportion of the size made the pass look like.
  const bool chain = pass.chain && !budget_trees_;
  if (budget_trees_) record_budgets(pass);
  std::vector<double>& tested = tested_[chain];
  std::vector<double>& accepted = accepted_[chain];
  if (static_cast<int>(tested.size()) < pass.tested) {
    tested.resize(pass.tested, 0);
    accepted.resize(pass.tested, 0);
  }
  for (int d = 0; d < pass.tested; ++d) {
    tested[d] += 1;
    if (d < pass.accepted) accepted[d] += 1;
  }
  // The first drafted pass after plain ones includes the drafter catching up with every token
  // it missed (a draft model's cache runs them all), which later passes do not pay: its draft
  // time is replaced by the steady-state estimate (nothing, before one exists).
  double draft_ms = pass.draft_ms;
  if (after_plain) {
    // Without a steady-state estimate yet, this pass's time says nothing about the rate:
    // drafting continues for one more pass, which measures it, and this one joins the episode's
    // accounts then (its tokens at that estimate).
    if (!draft_measured() && pass.draft_ms > 0) {
      first_draft_ms_ = pass.draft_ms;
      first_depth_ = pass.tree_depth;
      first_missed_ = missed;
      first_warmup_ = pass.warmup;
      first_pass_ms_ = pass.pass_ms;
      first_tokens_ = pass.tokens_emitted;
      return;
    }
    draft_ms = draft_cost(pass.tree_depth);
    if (!pass.warmup) add_catch_up(pass.draft_ms - draft_ms, missed);
  } else if (pass.tree_depth > 0) {
    const bool first_estimate = !draft_measured();
    if (static_cast<int>(draft_ms_by_depth_.size()) <= pass.tree_depth) {
      draft_ms_by_depth_.resize(pass.tree_depth + 1, -1);
    }
    double& at_depth = draft_ms_by_depth_[pass.tree_depth];
    at_depth = at_depth < 0 ? pass.draft_ms : at_depth + kAlpha * (pass.draft_ms - at_depth);
    // A drafted pass on a warming backend (its graphs captured) carries the drafter's one-time
    // work too: its extra time is no catch-up. (Session 15 on the H200: the DFlash drafter's
    // first pass, 3.3 ms against 0.6, made every later probe's catch-up look dearer than the
    // probe share allows, and --spec auto never probed again.)
    if (first_estimate && !first_warmup_) {
      add_catch_up(first_draft_ms_ - draft_cost(first_depth_), first_missed_);
    }
    // The first drafted pass's tokens are evidence like any other pass's: judged on this pass
    // alone, one unlucky pass after a good one stopped drafting for ~60 plain passes (session
    // 45, CPU, fresh processes: a 1-node pass accepted its node, the 2-node pass after it
    // nothing; math-00 then took 82 passes for 128 tokens and grounded-02 68, where the fixed
    // 3-node tree took 37 and 21).
    if (first_estimate && drafting_ && budget_trees_) {
      const double ms = first_pass_ms_ + draft_cost(first_depth_);
      const double loss = ms - first_tokens_ * pass_ms(1);
      episode_loss_ms_ += loss;
      episode_worst_loss_ms_ = std::max(episode_worst_loss_ms_, loss);
      ++episode_passes_;
      episode_tokens_ += first_tokens_;
      episode_ms_ += ms;
    }
  }
  if (pass.tree_depth > 0) {
    double& per_level = nodes_per_level_[chain];
    per_level = ema(per_level, static_cast<double>(pass.rows - 1) / pass.tree_depth, kAlpha);
  }
  // A probe starts a new episode; what it loses against plain passes, catch-up aside (next()
  // predicts that from the tokens missed), decides how long the next probe waits.
  if (!drafting_) start_episode();
  if (opening_stopped()) strict_episode_ = true;  // the probe next() gave after the opening
  const double pass_loss = pass.pass_ms + draft_ms - pass.tokens_emitted * pass_ms(1);
  episode_loss_ms_ += pass_loss;
  episode_worst_loss_ms_ = std::max(episode_worst_loss_ms_, pass_loss);
  ++episode_passes_;
  episode_tokens_ += pass.tokens_emitted;
  episode_ms_ += pass.pass_ms + draft_ms;
  // A probe's rate stands alone: the drafted passes before it are from text that has changed.
  // An episode's first passes are pooled (an EMA would let its latest pass weigh most); then
  // the EMA follows the text.
  if (episode_passes_ <= kMinJudgedPasses) {
    drafted_tokens_ = episode_tokens_ / episode_passes_;
    drafted_ms_ = episode_ms_ / episode_passes_;
  } else {
    drafted_tokens_ = ema(drafted_tokens_, pass.tokens_emitted, kRateAlpha);
    drafted_ms_ = ema(drafted_ms_, pass.pass_ms + draft_ms, kRateAlpha);
  }
  drafted_rate_ = drafted_tokens_ / drafted_ms_;
  // Measured tokens per millisecond, drafted against plain: drafting starts where it wins by
  // kMargin and goes on while it does not lose (kKeepMargin): a rate near the margin otherwise
  // flips on every unlucky pass, and each stop costs the plain passes until the next probe.
  const double margin = drafting_ ? kKeepMargin : strict_episode_ ? kClearWin : kMargin;
  const bool pays = drafted_rate_ > margin * expected_rate({});
  // Tokens per pass vary a lot from pass to pass (a tree that yields 2.8 on average yields 1
  // often), so a near miss in an episode's first few passes decides nothing: drafting goes on
  // while the pooled rate is within kNearMiss of paying and the episode has lost at most
  // kUndecidedLoss plain passes. A clear loss (a drafter as dear as a pass, little accepted: a
  // CPU) still stops at once. (Session 15 on the H200, code: the first judged pass of a 3-deep
  // chain yielded 2 tokens, 0.3% short of the margin, and --spec auto decoded plain from then
  // on, 1.04 tokens a pass, where fixed 8-node trees gave 2.78 and 1.17x plain.)
  const bool near_miss = drafted_rate_ >= kNearMiss * kMargin * expected_rate({});
  const bool undecided = !pays && near_miss && episode_passes_ < kMinJudgedPasses &&
                         episode_loss_ms_ <= kUndecidedLoss * pass_ms(1) && !strict_episode_;
  if (pays && !drafting_) probe_gap_ = kFirstProbe;
  if (pays || !drafting_) opening_ = false;
  if (!pays && !undecided) {
    // The episode (or the probe) failed: the next probe waits until its loss is a small share.
    if (drafting_) plain_ms_since_probe_ = 0;
    // What the next probe loses if it fails like this episode: up to kMinJudgedPasses passes
    // at the episode's loss per pass (a clear loss stops at its first pass, a near miss goes on
    // for a few), and no more than kUndecidedLoss plain passes and the dearest pass. Priced at
    // the whole episode's loss, a long episode that stopped paying, or an unlucky start, made
    // the next probe wait far longer than its risk. (Session 24, H200: the first code answer
    // of a run drafted 8 passes at 2.4 tokens each, stopped, and its remaining 180 tokens all
    // decoded plain, where fixed trees gave 1.5x. Replayed (RecordedCodeAnswers...): that
    // answer 0.71 -> 0.82 of the fixed trees' rate.)
    const double per_pass = episode_loss_ms_ / std::max(1, episode_passes_);
    const double failed_probe = kUndecidedLoss * pass_ms(1) + episode_worst_loss_ms_;
    probe_cost_ms_ =
        std::clamp(std::min(episode_loss_ms_, kMinJudgedPasses * per_pass), 0.0, failed_probe);
    // A text's opening (its first episode, on a CPU, of budget trees) that stops: the next
    // probe is priced as a failed one-node tree and is one (next()), so it comes after ~30 plain
    // passes instead of ~65. An answer's first tokens (an opening sentence) often draft poorly
    // where its body (code, a copied passage) drafts well: replayed grounded-editing answers
    // (CPU costs, tests/data/h200_grounded_position_orders.txt) spent the rest of a 128-token
    // answer plain after two passes that accepted nothing, 0.90 of the best fixed tree (now
    // 0.94). That probe is judged alone and must win clearly (kClearWin, no undecided passes),
    // and if it fails, the opening's own price stands for the probes after it: where drafting
    // never pays it costs one one-node pass per text.
    if (strict_episode_) probe_cost_ms_ = std::max(probe_cost_ms_, opening_cost_ms_);
    if (opening_ && budget_trees_ && costs_.cautious_start) {
      opening_cost_ms_ = probe_cost_ms_;
      probe_cost_ms_ =
          std::min(probe_cost_ms_, std::max(0.0, pass_ms(2) + draft_cost(1) - pass_ms(1)));
    }
  }
  // A new text's first drafted passes are not judged (as a fresh policy's are not): the first
  // carries the drafter's catch-up over the whole prompt, and one unlucky pass would otherwise
  // stop drafting for the rest of a short answer (session 10, CPU: grounded prompts after a chat
  // one drafted at 1.01 tokens a pass against 3.37 from a fresh policy).
  if (new_text_grace_ > 0) {
    --new_text_grace_;
    return;
  }
  drafting_ = pays || undecided;
}

void SpecPolicy::record_budgets(const PassRecord& pass) {
  const int nodes = pass.rows - 1;
  if (static_cast<int>(budget_passes_.size()) <= nodes) {
    budget_passes_.resize(nodes + 1, 0);
    budget_tokens_.resize(nodes + 1, 0);
  }
  // Every budget forgets with each drafted pass, as the per-depth counts do: a budget not
  // measured lately drifts to the prior and gets tried again (the drafter's order, where given,
  // measures every budget below the one verified).
  for (size_t n = 0; n < budget_passes_.size(); ++n) {
    budget_tokens_[n] *= kForget;
    budget_passes_[n] *= kForget;
  }
  auto add = [&](int n, double tokens) {
    budget_passes_[n] += 1;
    budget_tokens_[n] += tokens;
  };
  // Without the drafter's order only the budget verified is known.
  if (!pass.ordered || static_cast<int>(pass.path_order.size()) != pass.accepted) {
    add(nodes, pass.tokens_emitted);
    return;
  }
  // The tree of budget n holds the accepted path's first j nodes when their orders are all
  // below n: it would have emitted those j and the target's token after them (the same bonus
  // the walk takes there). Every budget up to the one verified is thus measured on the same
  // passes, so two budgets are compared on the same text rather than each on the passes that
  // chose it (session 23: --spec auto's DFlash trees averaged 2.8 tokens a pass on code where
  // the fixed 7-node tree made 3.26, and 1.45x plain where it made 1.54x).
  // A node is grown after its parent, so the orders rise along the path and the tree of
  // budget n holds the nodes before the first of order n or more.
  int held = 0;
  for (int n = 1; n <= nodes; ++n) {
    while (held < pass.accepted && pass.path_order[held] < n) ++held;
    add(n, 1 + held);
  }
}

void SpecPolicy::start_episode() {
  strict_episode_ = false;
  episode_loss_ms_ = 0;
  episode_worst_loss_ms_ = 0;
  episode_passes_ = 0;
  episode_tokens_ = 0;
  episode_ms_ = 0;
}

}  // namespace salvo
