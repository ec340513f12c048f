#include "engine/sequence.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "util/check.h"
#include "util/memory.h"

namespace salvo {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// A pass's times as the policy is given them: whole microseconds, which the trace's "%.3f ms"
// prints exactly, so a replay sees the very numbers the run's policy saw (a time rounded in the
// trace alone once tipped a choice that sat on a threshold).
double whole_us(double ms) { return std::round(ms * 1000.0) / 1000.0; }

// SALVO_SPEC_TRACE=1: a line per decode pass on stderr (rows, depth, shape, pass and draft
// time, depths accepted and tested, the caps, the policy's plain-pass estimate, the accepted
// nodes' orders), and a line where a policy starts or a new text begins, to see what --spec
// auto chooses (tests/tools/spec_trace_replay replays it).
bool spec_trace() {
  static const bool on = [] {
    const char* env = std::getenv("SALVO_SPEC_TRACE");
    return env != nullptr && *env != 0 && *env != '0';
  }();
  return on;
}

void record_acceptance(const DraftTree& tree, const AcceptResult& accepted,
                       GenerationStats& stats) {
  stats.drafted_nodes += tree.size();
  stats.accepted_draft_tokens += static_cast<int>(accepted.path.size());
  // Depths 1..path were tested and accepted; the next one was tested only if the walk stopped
  // at a node with children.
  const size_t tested = accepted.path.size() + (accepted.rejected_draft ? 1 : 0);
  if (stats.tested_per_depth.size() < tested) {
    stats.tested_per_depth.resize(tested, 0);
    stats.accepted_per_depth.resize(tested, 0);
  }
  for (size_t d = 0; d < tested; ++d) {
    ++stats.tested_per_depth[d];
    if (d < accepted.path.size()) ++stats.accepted_per_depth[d];
  }
}

}  // namespace

double GenerationStats::prefill_tokens_per_second() const {
  const int n = prompt_tokens - cached_prompt_tokens;
  return prefill_ms > 0 ? n * 1000.0 / prefill_ms : 0.0;
}

double GenerationStats::decode_tokens_per_second() const {
  return decode_ms > 0 && generated_tokens > 1 ? (generated_tokens - 1) * 1000.0 / decode_ms : 0.0;
}

double GenerationStats::tokens_per_pass() const {
  return forward_passes > 0 ? static_cast<double>(generated_tokens) / forward_passes : 0.0;
}

std::vector<double> GenerationStats::acceptance_per_depth() const {
  std::vector<double> rates;
  for (size_t d = 0; d < tested_per_depth.size(); ++d) {
    rates.push_back(tested_per_depth[d] > 0
                        ? static_cast<double>(accepted_per_depth[d]) / tested_per_depth[d]
                        : 0.0);
  }
  return rates;
}

double GenerationStats::draft_share() const { return decode_ms > 0 ? draft_ms / decode_ms : 0.0; }

Sequence::Sequence(Model& model, const Tokenizer& tokenizer, KvCache& kv, int seq_id)
    : model_(model), tokenizer_(tokenizer), kv_(kv), seq_id_(seq_id) {}

int Sequence::common_prefix(std::span<const int32_t> prompt) const {
  // At least one prompt token is recomputed so its logits exist.
  size_t common = 0;
  while (common < history_.size() && common + 1 < prompt.size() &&
         history_[common] == prompt[common]) {
    ++common;
  }
  return static_cast<int>(common);
}

Status Sequence::start(const GenerateRequest& request, TextCallback on_text) {
  SALVO_CHECK(!active());
  const int n_prompt = static_cast<int>(request.prompt.size());
  if (n_prompt == 0) return Status::error("the prompt is empty");
  if (request.max_tokens < 0) return Status::error("max_tokens must be >= 0");
  if (n_prompt >= context_size()) {
    return Status::error("the prompt has " + std::to_string(n_prompt) +
                         " tokens, which does not fit the context size of " +
                         std::to_string(context_size()) + " (raise --ctx)");
  }
  SALVO_ASSIGN_OR_RETURN(Sampler sampler,
                         Sampler::create(request.sampling, model_.config().n_vocab));
  SALVO_RETURN_IF_ERROR(request.spec.validate());
  // Only the adversarial drafters draw on the seed. Keeping any other drafter across seeds
  // keeps its observed hidden states (so the cached prefix is reused) and the policy's
  // measurements: requests without a seed get a random one each.
  const bool seeded =
      request.spec.mode == SpecMode::kRandom || request.spec.mode == SpecMode::kWrong;
  if (!drafter_ || drafter_mode_ != request.spec.mode ||
      (seeded && drafter_seed_ != request.sampling.seed) || drafter_tree_ != request.spec.tree ||
      drafter_vocab_ != request.spec.vocab) {
    SALVO_ASSIGN_OR_RETURN(drafter_,
                           make_drafter(request.spec.mode, {.n_vocab = tokenizer_.n_vocab(),
                                                            .seed = request.sampling.seed,
                                                            .draft_model = draft_model_,
                                                            .pool = draft_pool_,
                                                            .context_size = context_size(),
                                                            .dflash = dflash_,
                                                            .tree = request.spec.tree,
                                                            .dflash_vocab = request.spec.vocab}));
    drafter_mode_ = request.spec.mode;
    drafter_tree_ = request.spec.tree;
    drafter_vocab_ = request.spec.vocab;
    drafter_seed_ = request.sampling.seed;
    // The CPU backend's pass costs follow from its first passes; a device's first pass of a
    // shape may carry one-time work it does not flag (SpecPolicy's defaults).
    const bool on_cpu = std::string_view(model_.backend_name()) == "cpu";
    const bool adaptive = request.spec.mode == SpecMode::kAuto;
    const bool budget_trees = drafter_ && drafter_->drafts_all_depths_at_once();
    policy_ = SpecPolicy(adaptive, budget_trees, on_cpu ? PassCosts::cpu() : PassCosts());
    if (spec_trace()) {
      std::fprintf(stderr, "spec trace: policy adaptive %d budget-trees %d costs %s\n", adaptive,
                   budget_trees, on_cpu ? "cpu" : "device");
    }
  } else {
    policy_.new_text();
    if (spec_trace()) std::fprintf(stderr, "spec trace: new text\n");
  }

  start_time_ = first_token_time_ = Clock::now();
  request_ = request;
  // Caps the request leaves unset are the drafter's.
  const auto [own_budget, own_depth] = drafter_ ? drafter_->default_caps() : std::pair{0, 0};
  if (request_.spec.budget == SpecOptions::kDrafterCaps) request_.spec.budget = own_budget;
  if (request_.spec.depth == SpecOptions::kDrafterCaps) request_.spec.depth = own_depth;
  on_text_ = std::move(on_text);
  sampler_.emplace(std::move(sampler));
  decoder_.emplace(tokenizer_, /*render_special=*/false);
  stops_.emplace(request.stop);
  result_ = GenerationResult();
  if (drafter_) result_.stats.drafter = drafter_->name();
  cancelled_ = false;
  tree_.clear();

  int common = common_prefix(request.prompt);
  // A drafter fed with hidden states must see every committed position: recompute what it lacks.
  if (drafter_ && !drafter_->hidden_layers().empty()) {
    common = std::min(common, static_cast<int>(drafter_->observed()));
  }
  kv_.truncate(seq_id_, common);
  history_.assign(request.prompt.begin(), request.prompt.end());
  result_.stats.prompt_tokens = n_prompt;
  result_.stats.cached_prompt_tokens = common;
  result_.stats.finish_reason = "length";
  prefilled_ = common;
  max_new_ = std::min(request.max_tokens, context_size() - n_prompt);
  phase_ = Phase::kPrefill;
  return Status();
}

int Sequence::add_rows(TokenBatch& batch, int max_prefill_rows) {
  SALVO_CHECK(active());
  pass_first_row_ = batch.size();
  if (drafter_ && !drafter_->hidden_layers().empty()) {
    const std::span<const int32_t> layers = drafter_->hidden_layers();
    if (batch.hidden_layers.empty()) batch.hidden_layers.assign(layers.begin(), layers.end());
    // Sequences sharing a pass share the engine and so its drafter's layers.
    SALVO_CHECK(std::equal(layers.begin(), layers.end(), batch.hidden_layers.begin(),
                           batch.hidden_layers.end()));
  }
  if (phase_ == Phase::kPrefill) {
    const int total = static_cast<int>(history_.size());
    pass_prefill_ = std::min(std::max(1, max_prefill_rows), total - prefilled_);
    batch.add_chain(history_.data() + prefilled_, pass_prefill_, prefilled_, seq_id_,
                    /*logits_last_only=*/true);
    return 1;
  }
  const int committed = static_cast<int>(history_.size());
  GenerationStats& stats = result_.stats;
  // A pass emits its accepted path plus one bonus token, so the path may be at most
  // remaining - 1 deep; every row must also fit the cache behind the committed tokens.
  const int depth = std::min(request_.spec.depth, max_new_ - stats.generated_tokens - 1);
  const int budget = std::min(request_.spec.budget, context_size() - committed - 1);
  history_.push_back(root_);
  tree_.clear();
  pass_draft_ms_ = 0;
  pass_caps_ = {budget, depth};
  const DraftSize size = drafter_ ? policy_.next(budget, depth) : DraftSize{};
  pass_size_ = size;
  if (size.drafting()) {
    const auto draft_start = Clock::now();
    tree_ = drafter_->propose(history_, size.budget, size.depth);
    pass_draft_ms_ = whole_us(ms_since(draft_start));
    stats.draft_ms += pass_draft_ms_;
    SALVO_CHECK(tree_.is_valid() && tree_.size() <= size.budget && tree_.max_depth() <= size.depth);
  }
  pass_context_ = committed;
  const int first_row = batch.size();
  append_draft_rows(tree_, root_, committed, seq_id_, batch);
  pass_rows_ = batch.size() - first_row;
  return pass_rows_;
}

void Sequence::abort_pass() {
  // Keep history_ equal to the committed tokens: the pass committed nothing.
  if (phase_ == Phase::kDecode) history_.pop_back();
  if (phase_ == Phase::kPrefill) history_.resize(prefilled_);
  phase_ = Phase::kIdle;
}

void Sequence::stop(const std::string& reason) {
  SALVO_CHECK(active());
  result_.stats.finish_reason = reason;
  // Only the committed part of an interrupted prompt stays (still a valid prefix to reuse).
  if (phase_ == Phase::kPrefill) history_.resize(prefilled_);
  finish();
}

void Sequence::emit(const std::string& piece) {
  if (piece.empty() || cancelled_) return;
  result_.text += piece;
  if (on_text_ && !on_text_(piece)) cancelled_ = true;
}

// Tokens arrive one at a time whether a pass produced one or several, so the stop rules cut
// exactly where plain decoding would.
bool Sequence::emit_token(int32_t token) {
  GenerationStats& stats = result_.stats;
  result_.tokens.push_back(token);
  ++stats.generated_tokens;
  if (stats.generated_tokens == 1) {
    stats.ttft_ms = ms_since(start_time_);
    first_token_time_ = Clock::now();
  }
  if (!request_.ignore_eos && tokenizer_.is_end_of_generation(token)) {
    stats.finish_reason = "stop";
    return true;
  }
  const auto matched = stops_->feed(decoder_->push(token));
  emit(matched.text);
  if (matched.stopped) {
    stats.finish_reason = "stop";
    return true;
  }
  if (cancelled_) {
    stats.finish_reason = "cancelled";
    return true;
  }
  return stats.generated_tokens == max_new_;  // no logits needed after the last token
}

void Sequence::observe_rows(std::span<const float> hidden, std::span<const int32_t> rows,
                            int32_t first) {
  if (!drafter_ || drafter_->hidden_layers().empty() || hidden.empty()) return;
  const size_t width = drafter_->hidden_layers().size() * model_.config().n_embd;
  std::vector<float> features(rows.size() * width);
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t row = static_cast<size_t>(pass_first_row_ + rows[i]);
    SALVO_CHECK((row + 1) * width <= hidden.size());
    std::copy_n(hidden.data() + row * width, width, features.data() + i * width);
  }
  drafter_->observe(first, static_cast<int32_t>(rows.size()), features.data());
}

bool Sequence::argmax_suffices() const {
  SALVO_CHECK(active());
  return sampler_->argmax_suffices();
}

bool Sequence::top_logits_suffice(int k) const {
  SALVO_CHECK(active());
  return sampler_->top_logits_suffice(k);
}

void Sequence::finish_pass(const LogitRows& rows, double pass_ms, std::span<const float> hidden,
                           bool warmup) {
  SALVO_CHECK(active());
  GenerationStats& stats = result_.stats;
  if (phase_ == Phase::kPrefill) {
    if (!hidden.empty() && drafter_ && !drafter_->hidden_layers().empty()) {
      std::vector<int32_t> rows(pass_prefill_);
      for (int i = 0; i < pass_prefill_; ++i) rows[i] = i;
      observe_rows(hidden, rows, prefilled_);
    }
    kv_.commit_prefix(seq_id_, pass_prefill_);
    prefilled_ += pass_prefill_;
    if (prefilled_ < static_cast<int>(history_.size())) return;
    // The drafter's own prompt processing (a draft model's prefill) is prefill time too.
    if (drafter_) drafter_->prepare(history_);
    stats.prefill_ms = ms_since(start_time_);
    stats.forward_passes = 1;
    phase_ = Phase::kDecode;
    if (max_new_ == 0) return finish();
    // The root: sampled, emitted, not committed; row 0 of the next verification pass.
    root_ = sampler_->sample_row(rows, 0, static_cast<int64_t>(history_.size()), history_);
    if (emit_token(root_)) finish();
    return;
  }
  ++stats.forward_passes;
  const int32_t root_position = static_cast<int32_t>(history_.size()) - 1;
  const AcceptResult accepted = verifier_.accept(tree_, rows, *sampler_, history_);
  kv_.commit(seq_id_, accepted.kept_rows());
  observe_rows(hidden, accepted.kept_rows(), root_position);
  SALVO_CHECK(kv_.committed(seq_id_) == static_cast<int>(history_.size()));
  record_acceptance(tree_, accepted, stats);
  const int n_accepted = static_cast<int>(accepted.path.size());
  const bool chain = SpecPolicy::is_chain(pass_size_);
  std::vector<int32_t> path_order;
  if (tree_.has_order()) {
    for (int32_t node : accepted.path) path_order.push_back(tree_.order(node));
  }
  pass_ms = whole_us(pass_ms);
  policy_.record({.rows = pass_rows_,
                  .pass_ms = pass_ms,
                  .draft_ms = pass_draft_ms_,
                  .tree_depth = tree_.max_depth(),
                  .accepted = n_accepted,
                  .tested = n_accepted + (accepted.rejected_draft ? 1 : 0),
                  .tokens_emitted = n_accepted + 1,
                  .context = pass_context_,
                  .chain = chain,
                  .ordered = tree_.has_order(),
                  .path_order = path_order,
                  .warmup = warmup});
  if (spec_trace()) {
    // The accepted nodes' orders (which budgets would have held them) let a replay price
    // every smaller budget from a run of fixed trees.
    std::string orders;
    for (int32_t o : path_order) {
      if (!orders.empty()) orders += ',';
      orders += std::to_string(o);
    }
    // With the tested depths, the context and the caps the line holds all the policy was told
    // and asked, so tests/tools/spec_trace_replay reproduces its choices from a trace.
    std::fprintf(stderr,
                 "spec trace: rows %d depth %d %s pass %.3f ms%s draft %.3f ms accepted %d "
                 "tested %d context %d caps %d/%d size %d/%d | plain %.3f ms drafting %d "
                 "orders %s\n",
                 pass_rows_, tree_.max_depth(), chain ? "chain" : "tree", pass_ms,
                 warmup ? " (warm-up)" : "", pass_draft_ms_, n_accepted,
                 n_accepted + (accepted.rejected_draft ? 1 : 0), pass_context_, pass_caps_.budget,
                 pass_caps_.depth, pass_size_.budget, pass_size_.depth, policy_.plain_ms(),
                 policy_.drafting() ? 1 : 0,
                 !tree_.has_order() ? "none" : (orders.empty() ? "-" : orders.c_str()));
  }
  for (int32_t token : accepted.tokens(tree_)) {
    if (emit_token(token)) return finish();
  }
  root_ = accepted.bonus_token;
}

void Sequence::finish() {
  GenerationStats& stats = result_.stats;
  if (phase_ == Phase::kDecode && stats.generated_tokens > 0) {
    // Leave the state plain decoding leaves (every emitted token but the last committed), even
    // when a stop cut an accepted path short, so the next turn reuses the same prefix.
    const int keep = stats.prompt_tokens + stats.generated_tokens - 1;
    kv_.truncate(seq_id_, keep);
    if (static_cast<int>(history_.size()) > keep) history_.resize(keep);
  }
  if (!stops_->stopped()) emit(stops_->feed(decoder_->flush()).text + stops_->flush());
  if (stats.generated_tokens > 0) {
    stats.decode_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - first_token_time_).count();
  }
  stats.peak_rss_bytes = peak_rss_bytes();
  stats.peak_device_bytes = model_.peak_device_bytes();
  phase_ = Phase::kDone;
}

GenerationResult Sequence::take_result() {
  SALVO_CHECK(done());
  phase_ = Phase::kIdle;
  on_text_ = nullptr;
  return std::move(result_);
}

}  // namespace salvo
