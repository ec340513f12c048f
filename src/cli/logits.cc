// `salvo logits`: logits at every position of a token sequence, for tests against independent
// references. Writes raw little-endian float32 [n_tokens, n_vocab]; with --hidden-layers also the
// outputs of those blocks, float32 [n_tokens, n_layers * n_embd], to --hidden-out.
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/engine.h"
#include "models/model.h"

namespace salvo::cli {

void write_floats(const std::string& path, const std::vector<float>& values) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) throw CliError("cannot write '" + path + "'");
  const size_t written = std::fwrite(values.data(), sizeof(float), values.size(), f);
  std::fclose(f);
  if (written != values.size()) throw CliError("short write to '" + path + "'");
}

namespace {

struct LogitsOptions {
  std::string model;
  std::string tokens;
  std::string out;
  int threads = 0;
  int chunk = 0;
  std::string hidden_layers;
  std::string hidden_out;
};

std::vector<int32_t> parse_ids(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      throw CliError(flag + ": '" + item + "' is not a non-negative integer");
    }
  }
  if (ids.empty()) throw CliError(flag + ": no values given");
  return ids;
}

void run_logits(const LogitsOptions& o) {
  const std::vector<int32_t> ids = parse_ids(o.tokens, "--tokens");
  std::vector<int32_t> hidden_layers;
  if (!o.hidden_layers.empty()) hidden_layers = parse_ids(o.hidden_layers, "--hidden-layers");
  if (hidden_layers.empty() != o.hidden_out.empty()) {
    throw CliError("--hidden-layers and --hidden-out go together");
  }
  auto model = load_model(resolve_model(o.model));
  if (!model.ok()) throw CliError(model.status().message());
  const ModelConfig& c = (*model)->config();
  const int n = static_cast<int>(ids.size());
  KvCache kv(c, 1, n);
  ThreadPool pool(o.threads > 0 ? o.threads : default_thread_count());
  // Optional chunking exercises the committed-prefix path of attention.
  const int chunk = o.chunk > 0 ? o.chunk : n;
  std::vector<float> all;
  all.reserve(static_cast<size_t>(n) * c.n_vocab);
  std::vector<float> logits, hidden, all_hidden;
  for (int start = 0; start < n; start += chunk) {
    const int len = std::min(chunk, n - start);
    TokenBatch batch;
    batch.add_chain(ids.data() + start, len, start, 0, /*logits_last_only=*/false);
    batch.hidden_layers = hidden_layers;
    Status st = (*model)->forward(pool, batch, kv, logits, &hidden);
    if (!st.ok()) throw CliError(st.message());
    kv.commit_prefix(0, len);
    all.insert(all.end(), logits.begin(), logits.end());
    if (!hidden_layers.empty()) all_hidden.insert(all_hidden.end(), hidden.begin(), hidden.end());
  }
  write_floats(o.out, all);
  if (!hidden_layers.empty()) write_floats(o.hidden_out, all_hidden);
}

}  // namespace

void add_logits_command(CLI::App& app) {
  auto opts = std::make_shared<LogitsOptions>();
  auto* cmd =
      app.add_subcommand("logits", "Write the logits at every position (float32 [n, vocab])");
  cmd->add_option("--model", opts->model, "model name or GGUF path")->required();
  cmd->add_option("--tokens", opts->tokens, "comma-separated token ids")->required();
  cmd->add_option("--out", opts->out, "output file")->required();
  cmd->add_option("--threads", opts->threads, "threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--chunk", opts->chunk, "prefill chunk size (default: all at once)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--hidden-layers", opts->hidden_layers,
                  "comma-separated block indices whose outputs to write (0-based)");
  cmd->add_option("--hidden-out", opts->hidden_out,
                  "file for the hidden states (float32 [n, n_layers * n_embd])");
  cmd->callback([opts] { run_logits(*opts); });
}

}  // namespace salvo::cli
