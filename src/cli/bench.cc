// `salvo bench`: llama-bench-style throughput table. pp<N>: one N-token prompt in one pass
// (tokens/s); tg<N>: N one-token decode passes from an empty context. Each test is repeated
// and reported as mean ± standard deviation. With --draft-model the draft model's tg<N> runs too
// (on the same threads), since its cost per token against the target's decides whether
// draft-model speculation can pay on this machine. --verify adds the cost of a k-row
// verification pass against a 1-row pass (k = 1 ... 64) at a 512-token context, for each form a
// pass may return (argmax ids, the largest logits of each row, every logit).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backends/cpu/matmul.h"
#include "cli/commands.h"
#include "cli/device.h"
#include "engine/engine.h"
#include "engine/pass_output.h"
#include "models/kv_cache.h"
#include "util/memory.h"

namespace salvo::cli {
namespace {

struct BenchOptions {
  std::string model;
  std::string draft_model;
  int n_prompt = 512;
  int n_gen = 128;
  int reps = 5;
  int threads = 0;
  std::string device = "cpu";
  bool verify = false;
  // 9 and 17: an 8- or 16-node tree with its root (on CUDA, one 8-row mma tile more than 8/16).
  std::vector<int> verify_rows = {1, 2, 4, 8, 9, 16, 17, 24, 32, 64};
  int verify_context = 512;
  bool json = false;
};

struct Figure {
  std::string test;
  std::vector<double> tps;
  double mean() const {
    double s = 0;
    for (double v : tps) s += v;
    return tps.empty() ? 0 : s / tps.size();
  }
  double stddev() const {
    if (tps.size() < 2) return 0;
    const double m = mean();
    double s = 0;
    for (double v : tps) s += (v - m) * (v - m);
    return std::sqrt(s / (tps.size() - 1));
  }
};

// Token ids spread over the vocabulary, fixed so every run measures the same work.
std::vector<int32_t> bench_tokens(int n, int n_vocab) {
  std::vector<int32_t> ids(n);
  uint32_t state = 12345;
  for (auto& id : ids) {
    state = state * 1664525u + 1013904223u;
    id = static_cast<int32_t>(state % static_cast<uint32_t>(n_vocab));
  }
  return ids;
}

// The cache is shared by all runs (cleared before each), so a backend's per-cache setup (device
// buffers, captured graphs) is not timed.
double time_prompt(Engine& e, KvCache& kv, const std::vector<int32_t>& ids) {
  kv.clear(0);
  TokenBatch batch;
  batch.add_chain(ids.data(), static_cast<int32_t>(ids.size()), 0, 0, true);
  std::vector<float> logits;
  const auto start = std::chrono::steady_clock::now();
  Status st = e.model().forward(e.pool(), batch, kv, logits);
  if (!st.ok()) throw CliError(st.message());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double time_generation(Model& model, ThreadPool& pool, KvCache& kv,
                       const std::vector<int32_t>& ids) {
  kv.clear(0);
  std::vector<float> logits;
  TokenBatch batch;
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < ids.size(); ++i) {
    batch.clear();
    batch.add_chain(&ids[i], 1, static_cast<int32_t>(i), 0, true);
    Status st = model.forward(pool, batch, kv, logits);
    if (!st.ok()) throw CliError(st.message());
    kv.commit_prefix(0, 1);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Mean milliseconds of a forward pass over a k-row chain behind `context` committed tokens,
// returning what a verification of that form reads: argmax ids (greedy), each row's largest
// logits (top-k sampling on a device) or the logits. Nothing is committed, so every repetition
// does the same work.
double time_verify_pass(Engine& e, KvCache& kv, int context, int k, int reps, LogitsForm form) {
  const auto ids = bench_tokens(k, e.model().config().n_vocab);
  TokenBatch batch;
  batch.add_chain(ids.data(), k, context, 0, /*logits_last_only=*/false);
  PassOutput output;
  auto pass = [&] {
    Status st = output.run(e.model(), e.pool(), batch, kv, form, nullptr);
    if (!st.ok()) throw CliError(st.message());
  };
  pass();  // warm-up (and, on CUDA, graph capture for this shape)
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) pass();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
             .count() /
         reps;
}

struct VerifyTime {
  int rows;
  double greedy_ms, top_ms, logits_ms;
};

void bench(const BenchOptions& o) {
  const std::string path = resolve_model(o.model);
  auto engine = Engine::load(
      path, {.threads = o.threads,
             .draft_model_path = o.draft_model.empty() ? "" : resolve_model(o.draft_model),
             .placement = placement_for(o.device),
             // The benchmark's speculative figures use the draft model, not a DFlash drafter.
             .drafter_dir = {},
             .find_drafter = false,
             .drafter_placement = {}});
  if (!engine.ok()) throw CliError(engine.status().message());
  Engine& e = **engine;
  const ModelConfig& c = e.model().config();

  KvCache kv(c, 1, std::max(o.n_prompt, o.n_gen) + 1);
  std::vector<Figure> figures;
  if (o.n_prompt > 0) {
    const auto ids = bench_tokens(o.n_prompt, c.n_vocab);
    time_prompt(e, kv, ids);  // warm-up: page in the weights
    Figure f{"pp" + std::to_string(o.n_prompt), {}};
    for (int r = 0; r < o.reps; ++r) f.tps.push_back(o.n_prompt / time_prompt(e, kv, ids));
    figures.push_back(f);
  }
  if (o.n_gen > 0) {
    const auto ids = bench_tokens(o.n_gen, c.n_vocab);
    const std::vector<int32_t> warm_up(ids.begin(), ids.begin() + std::min(o.n_gen, 8));
    time_generation(e.model(), e.pool(), kv, warm_up);
    Figure f{"tg" + std::to_string(o.n_gen), {}};
    for (int r = 0; r < o.reps; ++r) {
      f.tps.push_back(o.n_gen / time_generation(e.model(), e.pool(), kv, ids));
    }
    figures.push_back(f);
    if (Model* draft = e.draft_model()) {
      KvCache draft_kv(draft->config(), 1, o.n_gen + 1);
      time_generation(*draft, e.pool(), draft_kv, warm_up);
      Figure d{"draft " + draft->config().name + " tg" + std::to_string(o.n_gen), {}};
      for (int r = 0; r < o.reps; ++r) {
        d.tps.push_back(o.n_gen / time_generation(*draft, e.pool(), draft_kv, ids));
      }
      figures.push_back(d);
    }
  }

  std::vector<VerifyTime> verify_ms;
  if (o.verify) {
    const int context = o.verify_context;
    KvCache kv(c, 1, context + 64);
    const auto ids = bench_tokens(context, c.n_vocab);
    TokenBatch prompt;
    prompt.add_chain(ids.data(), context, 0, 0, true);
    std::vector<float> logits;
    if (Status st = e.model().forward(e.pool(), prompt, kv, logits); !st.ok()) {
      throw CliError(st.message());
    }
    kv.commit_prefix(0, context);
    const bool top = c.n_vocab >= kTopLogits;
    for (int k : o.verify_rows) {
      const int reps = 10 * o.reps;
      verify_ms.push_back({k, time_verify_pass(e, kv, context, k, reps, LogitsForm::kArgmax),
                           top ? time_verify_pass(e, kv, context, k, reps, LogitsForm::kTop) : 0.0,
                           time_verify_pass(e, kv, context, k, reps, LogitsForm::kLogits)});
    }
  }

  const double size_mib = static_cast<double>(e.model().gguf().file_size()) / (1 << 20);
  const std::string backend = e.model().backend_name() == std::string("cpu")
                                  ? std::string("cpu (") + cpu_kernel_path() + ")"
                                  : e.model().backend_name();
  double tg_tps = 0;
  for (const auto& f : figures) {
    if (f.test.rfind("tg", 0) == 0) tg_tps = f.mean();
  }
  const double bytes_per_token = static_cast<double>(e.model().weight_bytes_per_pass());
  const double rss_mib = static_cast<double>(peak_rss_bytes()) / (1 << 20);
  const double device_mib = static_cast<double>(e.model().peak_device_bytes()) / (1 << 20);
  if (o.json) {
    nlohmann::json out = {{"model", c.name},
                          {"path", path},
                          {"size_mib", size_mib},
                          {"weight_bytes_per_pass", bytes_per_token},
                          {"threads", e.pool().size()},
                          {"backend", backend},
                          {"kernel", cpu_kernel_path()},
                          {"weight_gbps", bytes_per_token * tg_tps / 1e9},
                          {"peak_rss_mb", rss_mib},
                          {"peak_device_mb", device_mib},
                          {"results", nlohmann::json::array()}};
    for (const auto& f : figures) {
      out["results"].push_back(
          {{"test", f.test}, {"tps_mean", f.mean()}, {"tps_std", f.stddev()}, {"tps", f.tps}});
    }
    for (const VerifyTime& v : verify_ms) {
      out["verify"].push_back({{"rows", v.rows},
                               {"ms", v.greedy_ms},
                               {"ratio_to_1", v.greedy_ms / verify_ms[0].greedy_ms},
                               {"ms_top", v.top_ms},
                               {"ms_logits", v.logits_ms},
                               {"logits_ratio_to_1", v.logits_ms / verify_ms[0].logits_ms}});
    }
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("| model | size | backend | threads | test | t/s |\n");
  std::printf("| ----- | ---: | ------- | ------: | ---: | --: |\n");
  for (const auto& f : figures) {
    std::printf("| %s | %.1f MiB | %s | %d | %s | %.2f ± %.2f |\n", c.name.c_str(), size_mib,
                backend.c_str(), e.pool().size(), f.test.c_str(), f.mean(), f.stddev());
  }
  std::printf("\nweights read per decode pass: %.1f MiB; peak RSS %.1f MiB",
              bytes_per_token / (1 << 20), rss_mib);
  if (device_mib > 0) std::printf("; peak device memory %.1f MiB", device_mib);
  std::printf("\n");
  if (tg_tps > 0) {
    std::printf("decode reads weights at %.1f GB/s\n", bytes_per_token * tg_tps / 1e9);
  }
  if (!verify_ms.empty()) {
    // greedy: argmax ids back (temperature-0 verification); top: each row's kTopLogits largest
    // logits (sampled verification where the backend selects them); logits: every logit.
    std::printf(
        "\n| rows | greedy ms | ratio to 1 row | top-%d ms | logits ms | ratio to 1 row |\n"
        "| ---: | ---: | ---: | ---: | ---: | ---: |\n",
        kTopLogits);
    for (const VerifyTime& v : verify_ms) {
      std::printf("| %d | %.3f | %.2f | %.3f | %.3f | %.2f |\n", v.rows, v.greedy_ms,
                  v.greedy_ms / verify_ms[0].greedy_ms, v.top_ms, v.logits_ms,
                  v.logits_ms / verify_ms[0].logits_ms);
    }
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand("bench", "Measure prompt and generation throughput");
  cmd->add_option("--model", o->model, "model name or GGUF path")->required();
  cmd->add_option("--draft-model", o->draft_model,
                  "also time a draft model's decoding (name or GGUF path)");
  cmd->add_option("-p,--n-prompt", o->n_prompt, "prompt tokens (pp test)")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("-n,--n-gen", o->n_gen, "generated tokens (tg test)")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("-r,--repetitions", o->reps, "repetitions")->check(CLI::Range(1, 1000));
  cmd->add_option("-t,--threads", o->threads, "threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  add_device_option(cmd, o->device);
  cmd->add_flag("--verify", o->verify,
                "also time k-row verification passes (k = 1..64) at a --verify-context context");
  // Attention's cost grows with the context in steps (a split of keys per block): --verify-context
  // shows where.
  cmd->add_option("--verify-context", o->verify_context,
                  "the context (tokens) of --verify's passes (default 512)")
      ->check(CLI::Range(1, 1 << 15));
  // A profile of one shape (e.g. `--verify-rows 16` under nsys) times only the passes asked for;
  // the first is the ratios' base.
  cmd->add_option("--verify-rows", o->verify_rows,
                  "the k of --verify's passes (default 1,2,4,8,9,16,17,24,32,64)")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--json", o->json, "print JSON");
  cmd->callback([o] { bench(*o); });
}

}  // namespace salvo::cli
