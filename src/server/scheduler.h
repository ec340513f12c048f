// Scheduler: one thread that owns the model's forward passes and serves N slots (sequences of
// one shared KvCache). Every pass packs the rows of every active slot — prefill chunks, decode
// roots and draft trees — into one TokenBatch (continuous batching: waiting requests join
// between passes). Requests beyond the free slots wait in a bounded queue.
//
// A Job is one request's mailbox between the HTTP thread that waits on it and the scheduler
// that fills it: text pieces as they are emitted, then the result or an error.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/sequence.h"
#include "server/metrics.h"

namespace salvo::server {

using Clock = std::chrono::steady_clock;

class Job {
 public:
  Job(GenerateRequest request, Clock::time_point deadline)
      : request_(std::move(request)), deadline_(deadline), created_(Clock::now()) {}

  const GenerateRequest& request() const { return request_; }
  Clock::time_point deadline() const { return deadline_; }
  Clock::time_point created() const { return created_; }

  // HTTP side. Waits up to `timeout` for new text or the end; moves the pending text into
  // `text` and returns true once the job has finished (its result or error is then final).
  bool wait(std::string& text, std::chrono::milliseconds timeout);
  // The client went away: the scheduler frees the slot before its next pass.
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }
  // Whether a slot took the job and its request was valid (only a failed forward pass can end
  // it with an error from here on).
  bool started() const { return started_; }
  // After wait() returned true: the result, or the error (with an HTTP status).
  const GenerationResult& result() const { return result_; }
  const std::optional<Status>& error() const { return error_; }
  int error_http_status() const { return error_http_status_; }

  // Scheduler side.
  void mark_started() { started_ = true; }
  void push_text(const std::string& piece);
  void complete(GenerationResult result);
  void fail(Status error, int http_status);

 private:
  GenerateRequest request_;
  Clock::time_point deadline_, created_;
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> started_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::string pending_;
  bool finished_ = false;
  GenerationResult result_;
  std::optional<Status> error_;
  int error_http_status_ = 500;
};

struct SchedulerOptions {
  int parallel = 4;            // slots
  int context_size = 4096;     // per slot
  int max_queue = 64;          // waiting requests beyond the busy slots
  int max_prefill_rows = 512;  // prompt rows per pass, over all slots
};

enum class SubmitResult { kAccepted, kQueueFull, kShuttingDown };

class Scheduler {
 public:
  Scheduler(Engine& engine, const SchedulerOptions& options, Metrics& metrics);
  ~Scheduler();

  SubmitResult submit(std::shared_ptr<Job> job);
  // Stops accepting, fails the queued jobs, lets running ones finish for `grace` and then
  // cancels them, and joins the thread.
  void shutdown(std::chrono::milliseconds grace);

  const SchedulerOptions& options() const { return options_; }

 private:
  struct Slot {
    std::unique_ptr<Sequence> sequence;
    std::shared_ptr<Job> job;
    int logit_rows = 0;  // in the pass in flight; -1 = not in it
  };

  void run();
  // Moves queued jobs into free slots (the slot whose cached prefix is longest first).
  void admit();
  void finalize(Slot& slot);
  void publish_queue_locked();

  Engine& engine_;
  SchedulerOptions options_;
  Metrics& metrics_;
  KvCache kv_;
  std::vector<Slot> slots_;
  std::mutex mu_;  // guards queue_, stopping_, shutdown_deadline_ and the slots' job pointers
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::optional<Clock::time_point> shutdown_deadline_;
  int prefill_turn_ = 0;  // the slot that gets the prefill budget first, rotating
  std::thread thread_;
};

}  // namespace salvo::server
