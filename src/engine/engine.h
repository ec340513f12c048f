// Engine: a loaded model with its tokenizer and worker threads, shared by the sessions that
// use it (the CLI has one session; the server will have one per slot).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "models/model.h"
#include "speculative/dflash_model.h"
#include "speculative/dflash_runner.h"
#include "tokenizer/tokenizer.h"
#include "util/status.h"
#include "util/thread_pool.h"

namespace salvo {

// Moves a loaded (CPU) model onto another backend, e.g. cuda::to_device. The front end picks
// it, so the engine does not depend on any backend.
using ModelPlacement =
    std::function<Expected<std::unique_ptr<Model>>(std::unique_ptr<Model> cpu_model)>;

// Puts a DFlash drafter on the backend of its (placed) target, e.g. cuda::dflash_to_device.
using DrafterPlacement = std::function<Expected<std::shared_ptr<const DflashDevice>>(
    const DflashModel& drafter, const Model& target)>;

struct EngineOptions {
  int threads = 0;  // 0 = all cores
  // A smaller GGUF with the same vocabulary that drafts for the model (--draft-model); empty:
  // none. Checked for vocabulary compatibility at load.
  std::string draft_model_path;
  ModelPlacement placement;  // empty = run on the CPU
  // A DFlash drafter directory (--drafter): loaded and checked against the model, an error if
  // it does not fit. Empty: drafters/<model file stem>/ is used when one is found (see
  // find_drafter_dir) and fits; otherwise none.
  std::string drafter_dir;
  bool find_drafter = true;
  // Where the drafter runs when the model is placed: set with `placement` (the drafter runs
  // beside its target). Empty: on the CPU.
  DrafterPlacement drafter_placement;
};

class Engine {
 public:
  static Expected<std::unique_ptr<Engine>> load(const std::string& model_path,
                                                const EngineOptions& options);

  Model& model() { return *model_; }
  const Model& model() const { return *model_; }
  // nullptr without a draft model. Sessions of this engine draft with it one at a time.
  Model* draft_model() { return draft_model_.get(); }
  // nullptr without a DFlash drafter. Shared by the sessions (each keeps its own state).
  const DflashModel* dflash() const { return dflash_.get(); }
  // Why a discovered drafter was not used (empty when none was found or it loaded).
  const std::string& drafter_note() const { return drafter_note_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  ThreadPool& pool() { return *pool_; }
  double load_ms() const { return load_ms_; }

 private:
  std::unique_ptr<Model> model_;
  std::unique_ptr<Model> draft_model_;
  std::unique_ptr<DflashModel> dflash_;
  std::string drafter_note_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ThreadPool> pool_;
  double load_ms_ = 0;
};

int default_thread_count();

}  // namespace salvo
