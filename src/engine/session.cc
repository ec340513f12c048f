#include "engine/session.h"

#include <algorithm>
#include <chrono>

#include "sampling/stop_strings.h"
#include "util/check.h"
#include "util/memory.h"

namespace salvo {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
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

Session::Session(Model& model, const Tokenizer& tokenizer, ThreadPool& pool, int context_size,
                 int prefill_chunk)
    : model_(model),
      tokenizer_(tokenizer),
      pool_(pool),
      kv_(model.config(), 1, context_size),
      prefill_chunk_(std::max(1, prefill_chunk)) {}

Status Session::prefill(int n_new) {
  const int total = static_cast<int>(history_.size());
  for (int start = total - n_new; start < total; start += prefill_chunk_) {
    const int len = std::min(prefill_chunk_, total - start);
    batch_.clear();
    batch_.add_chain(history_.data() + start, len, start, 0, /*logits_last_only=*/true);
    SALVO_RETURN_IF_ERROR(model_.forward(pool_, batch_, kv_, logits_));
    kv_.commit_prefix(0, len);
  }
  return Status();
}

Expected<GenerationResult> Session::generate(const GenerateRequest& request,
                                             const TextCallback& on_text) {
  const auto start = Clock::now();
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
  if (!drafter_ || drafter_mode_ != request.spec.mode || drafter_seed_ != request.sampling.seed) {
    SALVO_ASSIGN_OR_RETURN(drafter_,
                           make_drafter(request.spec.mode, {.n_vocab = tokenizer_.n_vocab(),
                                                            .seed = request.sampling.seed,
                                                            .draft_model = draft_model_,
                                                            .pool = &pool_,
                                                            .context_size = context_size()}));
    drafter_mode_ = request.spec.mode;
    drafter_seed_ = request.sampling.seed;
    policy_ = SpecPolicy(/*adaptive=*/request.spec.mode == SpecMode::kAuto);
  }

  // Reuse the KV cache of the longest common prefix with the previous turn; at least one prompt
  // token is recomputed so its logits exist.
  size_t common = 0;
  while (common < history_.size() && common < request.prompt.size() - 1 &&
         history_[common] == request.prompt[common]) {
    ++common;
  }
  kv_.truncate(0, static_cast<int>(common));
  history_.assign(request.prompt.begin(), request.prompt.end());

  GenerationResult result;
  GenerationStats& stats = result.stats;
  stats.prompt_tokens = n_prompt;
  stats.cached_prompt_tokens = static_cast<int>(common);
  SALVO_RETURN_IF_ERROR(prefill(n_prompt - static_cast<int>(common)));
  stats.prefill_ms = ms_since(start);
  stats.forward_passes = 1;

  StreamDecoder decoder(tokenizer_, /*render_special=*/false);
  StopStringMatcher stops(request.stop);
  const int max_new = std::min(request.max_tokens, context_size() - n_prompt);
  Clock::time_point first_token_time = start;
  bool cancelled = false;
  auto emit = [&](const std::string& piece) {
    if (piece.empty() || cancelled) return;
    result.text += piece;
    if (on_text && !on_text(piece)) cancelled = true;
  };

  stats.finish_reason = "length";
  // Returns true when `token` ends the generation. Tokens arrive one at a time whether a pass
  // produced one or several, so the stop rules cut exactly where plain decoding would.
  auto emit_token = [&](int32_t token) {
    result.tokens.push_back(token);
    ++stats.generated_tokens;
    if (stats.generated_tokens == 1) {
      stats.ttft_ms = ms_since(start);
      first_token_time = Clock::now();
    }
    if (!request.ignore_eos && tokenizer_.is_end_of_generation(token)) {
      stats.finish_reason = "stop";
      return true;
    }
    const auto matched = stops.feed(decoder.push(token));
    emit(matched.text);
    if (matched.stopped) {
      stats.finish_reason = "stop";
      return true;
    }
    if (cancelled) {
      stats.finish_reason = "cancelled";
      return true;
    }
    return stats.generated_tokens == max_new;  // no logits needed after the last token
  };

  if (max_new > 0) {
    // The root: sampled, emitted, not committed; row 0 of the next verification pass.
    int32_t root = sampler.sample(logits_, static_cast<int64_t>(history_.size()), history_);
    bool done = emit_token(root);
    while (!done) {
      const int committed = static_cast<int>(history_.size());
      // A pass emits its accepted path plus one bonus token, so the path may be at most
      // remaining - 1 deep; every row must also fit the cache behind the committed tokens.
      const int depth = std::min(request.spec.depth, max_new - stats.generated_tokens - 1);
      const int budget = std::min(request.spec.budget, context_size() - committed - 1);
      history_.push_back(root);
      DraftTree tree;
      double this_draft_ms = 0;
      const DraftSize size = drafter_ ? policy_.next(budget, depth) : DraftSize{};
      if (size.drafting()) {
        const auto draft_start = Clock::now();
        tree = drafter_->propose(history_, size.budget, size.depth);
        this_draft_ms = ms_since(draft_start);
        stats.draft_ms += this_draft_ms;
        SALVO_CHECK(tree.is_valid() && tree.size() <= size.budget &&
                    tree.max_depth() <= size.depth);
      }
      batch_.clear();
      append_draft_rows(tree, root, committed, /*seq_id=*/0, batch_);
      const auto pass_start = Clock::now();
      if (Status st = model_.forward(pool_, batch_, kv_, logits_); !st.ok()) {
        history_.pop_back();  // keep history_ equal to the committed tokens
        return st;
      }
      const double pass_ms = ms_since(pass_start);
      ++stats.forward_passes;

      const AcceptResult accepted = verifier_.accept(tree, logits_, sampler, history_);
      kv_.commit(0, accepted.kept_rows());
      SALVO_CHECK(kv_.committed(0) == static_cast<int>(history_.size()));
      record_acceptance(tree, accepted, stats);
      const int n_accepted = static_cast<int>(accepted.path.size());
      policy_.record({.rows = batch_.size(),
                      .pass_ms = pass_ms,
                      .draft_ms = this_draft_ms,
                      .tree_depth = tree.max_depth(),
                      .accepted = n_accepted,
                      .tested = n_accepted + (accepted.rejected_draft ? 1 : 0),
                      .tokens_emitted = n_accepted + 1});

      for (int32_t token : accepted.tokens(tree)) {
        if ((done = emit_token(token))) break;
      }
      root = accepted.bonus_token;
    }
    // Leave the state plain decoding leaves (every emitted token but the last committed), even
    // when a stop cut an accepted path short, so the next turn reuses the same prefix.
    const int keep = n_prompt + stats.generated_tokens - 1;
    kv_.truncate(0, keep);
    if (static_cast<int>(history_.size()) > keep) history_.resize(keep);
  }
  if (!stops.stopped()) emit(stops.feed(decoder.flush()).text + stops.flush());
  if (stats.generated_tokens > 0) {
    stats.decode_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - first_token_time).count();
  }
  stats.peak_rss_bytes = peak_rss_bytes();
  return result;
}

}  // namespace salvo
