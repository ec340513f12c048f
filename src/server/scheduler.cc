#include "server/scheduler.h"

#include <algorithm>

#include "engine/pass_output.h"
#include "util/check.h"

namespace salvo::server {

bool Job::wait(std::string& text, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return finished_ || !pending_.empty(); });
  text += pending_;
  pending_.clear();
  return finished_;
}

void Job::push_text(const std::string& piece) {
  {
    std::lock_guard lock(mu_);
    pending_ += piece;
  }
  cv_.notify_all();
}

void Job::complete(GenerationResult result) {
  {
    std::lock_guard lock(mu_);
    result_ = std::move(result);
    finished_ = true;
  }
  cv_.notify_all();
}

void Job::fail(Status error, int http_status) {
  {
    std::lock_guard lock(mu_);
    error_ = std::move(error);
    error_http_status_ = http_status;
    finished_ = true;
  }
  cv_.notify_all();
}

Scheduler::Scheduler(Engine& engine, const SchedulerOptions& options, Metrics& metrics)
    : engine_(engine),
      options_(options),
      metrics_(metrics),
      kv_(engine.model().config(), options.parallel, options.context_size) {
  for (int i = 0; i < options_.parallel; ++i) {
    auto sequence = std::make_unique<Sequence>(engine.model(), engine.tokenizer(), kv_, i);
    // Slots take turns with the draft model: the scheduler steps them one at a time.
    sequence->set_draft_model(engine.draft_model(), &engine.pool());
    if (engine.dflash() != nullptr) sequence->set_dflash_model(engine.dflash(), &engine.pool());
    slots_.push_back({std::move(sequence), nullptr, -1});
  }
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() { shutdown(std::chrono::milliseconds(0)); }

SubmitResult Scheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return SubmitResult::kShuttingDown;
    if (static_cast<int>(queue_.size()) >= options_.max_queue) return SubmitResult::kQueueFull;
    queue_.push_back(std::move(job));
    publish_queue_locked();
  }
  cv_.notify_all();
  return SubmitResult::kAccepted;
}

void Scheduler::shutdown(std::chrono::milliseconds grace) {
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      stopping_ = true;
      shutdown_deadline_ = Clock::now() + grace;
      for (auto& job : queue_) job->fail(Status::error("the server is shutting down"), 503);
      queue_.clear();
    }
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Scheduler::publish_queue_locked() {
  int active = 0;
  for (const Slot& slot : slots_) active += slot.job != nullptr;
  metrics_.set_queue(static_cast<int>(queue_.size()), active);
}

void Scheduler::admit() {
  while (!queue_.empty()) {
    std::shared_ptr<Job> job = queue_.front();
    if (job->cancelled()) {
      queue_.pop_front();
      job->fail(Status::error("cancelled while waiting for a slot"), 499);
      continue;
    }
    if (Clock::now() > job->deadline()) {
      queue_.pop_front();
      job->fail(Status::error("the request's time limit passed while it waited for a slot"), 503);
      continue;
    }
    Slot* best = nullptr;
    int best_common = -1;
    for (Slot& slot : slots_) {
      if (slot.job) continue;
      const int common = slot.sequence->common_prefix(job->request().prompt);
      if (common > best_common) best = &slot, best_common = common;
    }
    if (!best) return;
    queue_.pop_front();
    Job* raw = job.get();
    Status started = best->sequence->start(job->request(), [raw](const std::string& piece) {
      raw->push_text(piece);
      return !raw->cancelled();
    });
    if (!started.ok()) {
      job->fail(started, 400);
      continue;
    }
    job->mark_started();
    best->job = std::move(job);
  }
}

void Scheduler::finalize(Slot& slot) {
  GenerationResult result = slot.sequence->take_result();
  metrics_.record_request(
      result.stats, std::chrono::duration<double>(Clock::now() - slot.job->created()).count());
  slot.job->complete(std::move(result));
  std::lock_guard lock(mu_);
  slot.job = nullptr;
  publish_queue_locked();
}

void Scheduler::run() {
  TokenBatch batch;
  std::vector<float> hidden;
  PassOutput output;
  std::vector<int> order;  // slots in the order their rows entered the batch
  while (true) {
    bool past_grace = false;
    {
      std::unique_lock lock(mu_);
      auto any_active = [&] {
        return std::any_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.job; });
      };
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || any_active(); });
      if (stopping_ && queue_.empty() && !any_active()) break;
      admit();
      publish_queue_locked();
      past_grace = shutdown_deadline_ && Clock::now() > *shutdown_deadline_;
    }

    // Requests that ended between passes free their slots before the next one.
    const auto now = Clock::now();
    for (Slot& slot : slots_) {
      if (!slot.job) continue;
      if (slot.job->cancelled() || past_grace) {
        slot.sequence->stop("cancelled");
      } else if (now > slot.job->deadline()) {
        slot.sequence->stop("length");
      }
      if (slot.sequence->done()) finalize(slot);
    }

    // Decode rows first (a handful per slot), then prefill chunks within the row budget, the
    // first turn rotating so that long prompts share the budget over passes.
    batch.clear();
    order.clear();
    for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
      Slot& slot = slots_[i];
      slot.logit_rows = -1;
      if (slot.job && !slot.sequence->prefilling()) {
        slot.logit_rows = slot.sequence->add_rows(batch, 0);
        order.push_back(i);
      }
    }
    int prefill_budget = options_.max_prefill_rows;
    const int n_slots = static_cast<int>(slots_.size());
    for (int k = 0; k < n_slots && prefill_budget > 0; ++k) {
      const int i = (prefill_turn_ + k) % n_slots;
      Slot& slot = slots_[i];
      if (!slot.job || !slot.sequence->prefilling()) continue;
      const int before = batch.size();
      slot.logit_rows = slot.sequence->add_rows(batch, prefill_budget);
      prefill_budget -= batch.size() - before;
      order.push_back(i);
    }
    prefill_turn_ = (prefill_turn_ + 1) % n_slots;
    if (batch.empty()) continue;

    const auto pass_start = Clock::now();
    // When every sequence of the pass decodes greedily, only each row's argmax is read (with
    // top-k sampling, each row's largest logits): a device backend then returns those alone.
    const auto all = [&](auto&& pred) {
      return std::all_of(order.begin(), order.end(),
                         [&](int i) { return pred(*slots_[i].sequence); });
    };
    const LogitsForm form = PassOutput::choose(
        engine_.model(), all([](const Sequence& s) { return s.argmax_suffices(); }),
        all([](const Sequence& s) { return s.top_logits_suffice(kTopLogits); }));
    Status status = output.run(engine_.model(), engine_.pool(), batch, kv_, form, &hidden);
    const double pass_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - pass_start).count();
    metrics_.record_pass(batch.size(), static_cast<int>(order.size()));
    size_t offset = 0;
    for (int i : order) {
      Slot& slot = slots_[i];
      if (!status.ok()) {
        slot.sequence->abort_pass();
        slot.job->fail(status.with_context("forward pass"), 500);
        std::lock_guard lock(mu_);
        slot.job = nullptr;
        continue;
      }
      const LogitRows rows = output.rows(static_cast<int>(offset), slot.logit_rows);
      slot.sequence->finish_pass(
          rows, pass_ms,
          batch.hidden_layers.empty() ? std::span<const float>() : std::span<const float>(hidden),
          engine_.model().last_pass_was_warmup());
      offset += slot.logit_rows;
      if (slot.sequence->done()) finalize(slot);
    }
  }
}

}  // namespace salvo::server
