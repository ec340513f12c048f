#include "engine/engine.h"

#include <chrono>
#include <thread>

#include "speculative/draft_model_drafter.h"

namespace salvo {

int default_thread_count() {
  const unsigned n = std::thread::hardware_concurrency();
  return n > 0 ? static_cast<int>(n) : 1;
}

Expected<std::unique_ptr<Engine>> Engine::load(const std::string& model_path,
                                               const EngineOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<Engine> engine(new Engine());
  SALVO_ASSIGN_OR_RETURN(engine->model_, load_model(model_path));
  if (options.placement) {
    auto placed = options.placement(std::move(engine->model_));
    if (!placed.ok()) return placed.status().with_context(model_path);
    engine->model_ = std::move(placed).value();
  }
  auto tokenizer = Tokenizer::from_gguf(engine->model_->gguf());
  if (!tokenizer.ok()) return tokenizer.status().with_context(model_path);
  engine->tokenizer_ = std::move(tokenizer).value();
  engine->model_->gguf().release_all_pages();
  if (!options.draft_model_path.empty()) {
    const std::string& path = options.draft_model_path;
    auto draft = load_model(path);
    if (!draft.ok()) return draft.status().with_context("draft model " + path);
    engine->draft_model_ = std::move(draft).value();
    // The draft model runs where the target runs: a CPU draft beside a CUDA target cost every
    // drafted pass a CPU forward (and the prompt's prefill on the CPU at each new text), which
    // made `--spec auto` with a draft model 0.55-0.85x plain decoding on the H200 (session 13).
    if (options.placement) {
      auto placed = options.placement(std::move(engine->draft_model_));
      if (!placed.ok()) return placed.status().with_context("draft model " + path);
      engine->draft_model_ = std::move(placed).value();
    }
    auto draft_tokenizer = Tokenizer::from_gguf(engine->draft_model_->gguf());
    if (!draft_tokenizer.ok()) return draft_tokenizer.status().with_context(path);
    SALVO_RETURN_IF_ERROR(check_draft_vocabulary(*engine->tokenizer_, engine->model_->config(),
                                                 **draft_tokenizer,
                                                 engine->draft_model_->config()));
    engine->draft_model_->gguf().release_all_pages();
  }
  // The drafter runs beside its target: on the target's device when it has one.
  auto load_drafter = [&](const std::string& dir) -> Expected<std::unique_ptr<DflashModel>> {
    SALVO_ASSIGN_OR_RETURN(std::unique_ptr<DflashModel> dflash,
                           DflashModel::load(dir, *engine->model_));
    if (options.drafter_placement) {
      SALVO_ASSIGN_OR_RETURN(std::shared_ptr<const DflashDevice> device,
                             options.drafter_placement(*dflash, *engine->model_));
      dflash->set_device(std::move(device));
    } else if (!dflash->has_cpu_forward()) {
      return Status::error(dir + ": the model runs on the " + engine->model_->backend_name() +
                           " backend and the drafter has no runner there");
    }
    return dflash;
  };
  if (!options.drafter_dir.empty()) {
    auto dflash = load_drafter(options.drafter_dir);
    if (!dflash.ok()) return dflash.status().with_context("drafter " + options.drafter_dir);
    engine->dflash_ = std::move(dflash).value();
  } else if (options.find_drafter) {
    const std::string dir = find_drafter_dir(model_path);
    if (!dir.empty()) {
      auto dflash = load_drafter(dir);
      if (dflash.ok()) {
        engine->dflash_ = std::move(dflash).value();
      } else {
        engine->drafter_note_ = dflash.status().message();
      }
    }
  }
  engine->pool_ =
      std::make_unique<ThreadPool>(options.threads > 0 ? options.threads : default_thread_count());
  engine->load_ms_ =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return engine;
}

}  // namespace salvo
