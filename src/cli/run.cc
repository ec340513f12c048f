// `salvo run`: generate an answer to one prompt, streaming the text, then the statistics.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/device.h"
#include "cli/prompt.h"
#include "engine/engine.h"
#include "engine/session.h"

namespace salvo::cli {
namespace {

struct RunOptions {
  std::string model;
  PromptOptions prompt;
  int max_tokens = 256;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.05f;
  float repeat_penalty = 1.0f;
  int64_t seed = -1;
  int threads = 0;
  std::string device = "cpu";
  int ctx = 4096;
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool json = false;
  std::string spec = "auto";
  std::string draft_model;
  std::string drafter;
  std::string spec_tree = "auto";
  int spec_budget = SpecOptions{}.budget;
  int spec_depth = SpecOptions{}.depth;
  int spec_vocab = SpecOptions{}.vocab;
  // JSONL, one {"prompt": "..."} per line: every prompt is generated in a fresh session of one
  // loaded model, with one JSON line out per prompt (tests sweep many prompts in one process).
  std::string prompts_file;
};

void print_stats(const GenerationStats& s, const Engine& engine) {
  std::fprintf(stderr,
               "\n\n[salvo] prompt %d tokens (%d cached), generated %d tokens (%s)\n"
               "[salvo] time to first token %.1f ms | prefill %.1f tok/s | decode %.1f tok/s\n"
               "[salvo] tokens per forward pass %.2f | peak memory %.1f MiB | model load %.0f ms\n",
               s.prompt_tokens, s.cached_prompt_tokens, s.generated_tokens, s.finish_reason.c_str(),
               s.ttft_ms, s.prefill_tokens_per_second(), s.decode_tokens_per_second(),
               s.tokens_per_pass(), static_cast<double>(s.peak_rss_bytes) / (1 << 20),
               engine.load_ms());
  if (s.peak_device_bytes > 0) {
    std::fprintf(stderr, "[salvo] peak device memory %.1f MiB (%s)\n",
                 static_cast<double>(s.peak_device_bytes) / (1 << 20),
                 engine.model().backend_name());
  }
  if (s.drafted_nodes > 0) {
    std::string per_depth;
    for (double rate : s.acceptance_per_depth()) {
      per_depth +=
          (per_depth.empty() ? "" : " ") + std::to_string(static_cast<int>(rate * 100 + 0.5)) + "%";
    }
    std::fprintf(stderr,
                 "[salvo] speculation (%s): %d of %d drafted tokens accepted | per depth %s | "
                 "drafting %.1f%% of decode time\n",
                 s.drafter.c_str(), s.accepted_draft_tokens, s.drafted_nodes, per_depth.c_str(),
                 100.0 * s.draft_share());
  }
}

std::vector<std::string> read_prompts_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw CliError("cannot open the prompts file " + path);
  std::vector<std::string> prompts;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto value = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (value.is_string()) {
      prompts.push_back(value.get<std::string>());
    } else if (value.is_object() && value.contains("prompt") && value["prompt"].is_string()) {
      prompts.push_back(value["prompt"].get<std::string>());
    } else {
      throw CliError(path + ":" + std::to_string(line_no) +
                     ": expected a JSON string or an object with a string \"prompt\"");
    }
  }
  return prompts;
}

void run(const RunOptions& o) {
  SamplingParams sampling;
  sampling.temperature = o.temperature;
  sampling.top_k = o.top_k;
  sampling.top_p = o.top_p;
  sampling.min_p = o.min_p;
  sampling.repeat_penalty = o.repeat_penalty;
  sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  if (Status st = sampling.validate(); !st.ok()) throw CliError(st.message());
  auto spec_mode = parse_spec_mode(o.spec);
  if (!spec_mode.ok()) throw CliError("--spec: " + spec_mode.status().message());
  auto spec_tree = parse_spec_tree(o.spec_tree);
  if (!spec_tree.ok()) throw CliError("--spec-tree: " + spec_tree.status().message());
  SpecOptions spec{.mode = *spec_mode,
                   .budget = o.spec_budget,
                   .depth = o.spec_depth,
                   .tree = *spec_tree,
                   .vocab = o.spec_vocab};
  if (Status st = spec.validate(); !st.ok()) throw CliError(st.message());
  if (spec.mode == SpecMode::kDraft && o.draft_model.empty()) {
    throw CliError(
        "--spec draft needs a draft model: add --draft-model M (e.g. a smaller "
        "model with the same vocabulary)");
  }
  if (o.prompt.prompt.empty() == o.prompts_file.empty()) {
    throw CliError("give exactly one of --prompt and --prompts-file");
  }
  const std::vector<std::string> prompts = o.prompts_file.empty()
                                               ? std::vector<std::string>{o.prompt.prompt}
                                               : read_prompts_file(o.prompts_file);

  // Without --spec draft, a draft model serves --spec auto; other modes do not use it.
  auto engine =
      Engine::load(resolve_model(o.model),
                   {.threads = o.threads,
                    .draft_model_path = o.draft_model.empty() ? "" : resolve_model(o.draft_model),
                    .placement = placement_for(o.device),
                    .drafter_dir = o.drafter,
                    .find_drafter = uses_found_drafter(spec.mode, !o.draft_model.empty()),
                    .drafter_placement = drafter_placement_for(o.device)});
  if (!engine.ok()) throw CliError(engine.status().message());
  Engine& e = **engine;
  if (!e.drafter_note().empty()) {
    std::fprintf(stderr, "[salvo] DFlash drafter not used: %s\n", e.drafter_note().c_str());
  }
  if (spec.mode == SpecMode::kDflash && e.dflash() == nullptr) {
    throw CliError("--spec dflash needs a DFlash drafter: add --drafter DIR (none found for " +
                   o.model + ")");
  }

  // One Session for every prompt, as a server slot would be: the prompts share what stays valid
  // (the cached prefix, the speculation policy's measured pass and drafter costs; SpecPolicy::
  // new_text() resets what belongs to one text), so later prompts do not start cold.
  Session session(e.model(), e.tokenizer(), e.pool(), o.ctx);
  session.set_draft_model(e.draft_model());
  session.set_dflash_model(e.dflash());
  for (const std::string& prompt_text : prompts) {
    PromptOptions prompt_options = o.prompt;
    prompt_options.prompt = prompt_text;
    GenerateRequest request;
    request.prompt = prepare_prompt(e, prompt_options);
    request.max_tokens = o.max_tokens;
    request.sampling = sampling;
    request.stop = o.stop;
    request.ignore_eos = o.ignore_eos;
    request.spec = spec;

    auto result = session.generate(request, [&](const std::string& piece) {
      if (!o.json) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
      return true;
    });
    if (!result.ok()) throw CliError(result.status().message());
    const GenerationStats& s = result->stats;
    if (o.json) {
      nlohmann::json out = {
          {"model", e.model().config().name},
          {"text", result->text},
          {"tokens", result->tokens},
          {"prompt_tokens", request.prompt},
          {"finish_reason", s.finish_reason},
          {"seed", sampling.seed},
          {"n_prompt", s.prompt_tokens},
          {"n_generated", s.generated_tokens},
          {"forward_passes", s.forward_passes},
          {"ttft_ms", s.ttft_ms},
          {"prefill_tps", s.prefill_tokens_per_second()},
          {"decode_tps", s.decode_tokens_per_second()},
          {"tokens_per_pass", s.tokens_per_pass()},
          {"peak_rss_mb", static_cast<double>(s.peak_rss_bytes) / (1 << 20)},
          {"peak_device_mb", static_cast<double>(s.peak_device_bytes) / (1 << 20)},
          {"load_ms", e.load_ms()},
          {"spec", spec_mode_name(spec.mode)},
          {"draft_model", e.draft_model() ? e.draft_model()->config().name : ""},
          {"drafter", e.dflash() ? e.dflash()->dir() : ""},
          {"spec_tree", spec_tree_name(spec.tree)},
          {"spec_vocab", spec.vocab},
          {"drafted_nodes", s.drafted_nodes},
          {"accepted_draft_tokens", s.accepted_draft_tokens},
          {"acceptance_per_depth", s.acceptance_per_depth()},
          {"draft_ms", s.draft_ms},
          {"draft_share", s.draft_share()},
      };
      // Invalid UTF-8 from a model is replaced rather than aborting the dump.
      std::printf("%s\n",
                  out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      print_stats(s, e);
    }
  }
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Generate text from a prompt");
  cmd->add_option("--model", o->model, "model name (e.g. smollm2-135m) or GGUF path")->required();
  cmd->add_option("-m,-p,--prompt", o->prompt.prompt, "the prompt");
  cmd->add_option("--prompts-file", o->prompts_file,
                  "JSONL file of prompts ({\"prompt\": ...} per line), one result line each");
  add_prompt_options(cmd, o->prompt);
  cmd->add_option("-n,--max-tokens", o->max_tokens, "tokens to generate at most")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--temperature,--temp", o->temperature, "0 = greedy")
      ->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", o->top_k, "0 = off")->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--top-p", o->top_p, "nucleus probability, 1 = off")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--min-p", o->min_p, "0 = off")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--repeat-penalty", o->repeat_penalty, "1 = off")->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--seed", o->seed, "random seed (default: random)");
  cmd->add_option("-t,--threads", o->threads, "threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  add_device_option(cmd, o->device);
  cmd->add_option("-c,--ctx", o->ctx, "context size in tokens")->check(CLI::Range(16, 1 << 20));
  cmd->add_option("--stop", o->stop, "stop string (repeatable)");
  cmd->add_flag("--ignore-eos", o->ignore_eos, "keep generating after end-of-generation tokens");
  cmd->add_flag("--json", o->json, "print one JSON object with the text, token ids and figures");
  // The testing drafters (random, wrong, deep) are accepted but not advertised.
  cmd->add_option(
         "--spec", o->spec,
         "speculative decoding: auto (drafts sized to what measurably pays, with --drafter, "
         "else --draft-model, else the DFlash drafter found for the model, else n-gram lookup), "
         "dflash, draft, ngram, none")
      ->capture_default_str();
  cmd->add_option("--draft-model", o->draft_model,
                  "smaller model with the same vocabulary that drafts for --model (name or GGUF "
                  "path); used by --spec draft and auto");
  cmd->add_option("--drafter", o->drafter,
                  "DFlash drafter directory (config.json + model.safetensors); default: "
                  "drafters/<model>/ when one exists; used by --spec dflash and auto");
  cmd->add_option("--spec-tree", o->spec_tree,
                  "DFlash tree: auto (adapter if the drafter has one, else best), best, adapter, "
                  "chain");
  cmd->add_option("--spec-budget", o->spec_budget,
                  "draft tree nodes per forward pass (default: the drafter's, 7 for a "
                  "DFlash drafter, else 16)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--spec-vocab", o->spec_vocab, kSpecVocabHelp)->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--spec-depth", o->spec_depth,
                  "deepest draft token below the last one (default: the drafter's, its block "
                  "size - 1 for a DFlash drafter, else 8)")
      ->check(CLI::Range(0, 256));
  cmd->callback([o] { run(*o); });
}

}  // namespace salvo::cli
