// Session: one conversation on its own KV cache, generated one sequence at a time (the CLI's
// path). The generation itself is a Sequence (sequence.h) stepped through its passes; the server
// steps several Sequences on one shared cache instead. The sampler is position-seeded, so the
// same (seed, prompt) gives the same text with or without speculation and batching.
#pragma once

#include <string>
#include <vector>

#include "engine/pass_output.h"
#include "engine/sequence.h"
#include "models/kv_cache.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace salvo {

class Session {
 public:
  Session(Model& model, const Tokenizer& tokenizer, ThreadPool& pool, int context_size,
          int prefill_chunk = 512);

  int context_size() const { return kv_.capacity(); }
  // The model --spec draft (and auto) drafts with; it must outlive the session.
  void set_draft_model(Model* draft_model) { sequence_.set_draft_model(draft_model, &pool_); }
  // The DFlash drafter --spec dflash (and auto) drafts with; it must outlive the session.
  void set_dflash_model(const DflashModel* dflash) { sequence_.set_dflash_model(dflash, &pool_); }
  const std::vector<int32_t>& history() const { return sequence_.history(); }

  Expected<GenerationResult> generate(const GenerateRequest& request, const TextCallback& on_text);

 private:
  Model& model_;
  ThreadPool& pool_;
  KvCache kv_;
  int prefill_chunk_;
  Sequence sequence_;  // seq 0 of kv_
  PassOutput output_;
  std::vector<float> hidden_;
  TokenBatch batch_;
};

}  // namespace salvo
