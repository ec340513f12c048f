// `salvo dflash`: one DFlash draft pass from given target features, for tests against
// independent references (a NumPy forward, the trainer's PyTorch output). Reads `features`
// F32 [T, k * n_embd], `root` I32 [1] and, with an adapter, `adapter_prev` I32 [B-1] from a
// safetensors file (reference.safetensors has exactly these), observes the T positions (in
// chunks of --chunk, exercising the incremental context) and writes raw little-endian float32
// logits_1..D [D, n_vocab] to --out (D: --depth, default B-1), then the adapter logits
// [D, n_vocab] to --adapter-out.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/engine.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "speculative/dflash_model.h"

namespace salvo::cli {
namespace {

struct DflashOptions {
  std::string model, drafter, inputs, out, adapter_out;
  int threads = 0;
  int chunk = 0;
  int depth = 0;  // 0: B-1
};

const StTensorInfo& need(const SafetensorsFile& file, const std::string& name, size_t rank) {
  const StTensorInfo* t = file.find(name);
  if (t == nullptr || t->shape.size() != rank) {
    throw CliError("--inputs: tensor '" + name + "' is missing or has the wrong rank");
  }
  return *t;
}

void run_dflash(const DflashOptions& o) {
  auto model = load_model(resolve_model(o.model));
  if (!model.ok()) throw CliError(model.status().message());
  auto drafter = DflashModel::load(o.drafter, **model);
  if (!drafter.ok()) throw CliError(drafter.status().message());
  const DflashModel& d = **drafter;
  const DflashConfig& c = d.config();
  auto inputs = SafetensorsFile::open(o.inputs);
  if (!inputs.ok()) throw CliError(inputs.status().message());
  const SafetensorsFile& in = **inputs;
  const StTensorInfo& features_info = need(in, "features", 2);
  if (features_info.shape[1] != c.feature_width()) {
    throw CliError("--inputs: features have width " + std::to_string(features_info.shape[1]) +
                   ", the drafter expects " + std::to_string(c.feature_width()));
  }
  const std::vector<float> features = in.to_f32(features_info);
  const std::vector<float> root = in.to_f32(need(in, "root", 1));
  const int n_vocab = (*model)->config().n_vocab;
  if (root.size() != 1 || root[0] < 0 || root[0] >= n_vocab) {
    throw CliError("--inputs: 'root' must hold one token id");
  }
  const int T = static_cast<int>(features_info.shape[0]);
  ThreadPool pool(o.threads > 0 ? o.threads : default_thread_count());
  DflashState state = d.new_state();
  const int chunk = o.chunk > 0 ? o.chunk : std::max(T, 1);
  for (int first = 0; first < T; first += chunk) {
    const int n = std::min(chunk, T - first);
    Status st = d.observe(pool, state, first, n, features.data() + first * c.feature_width());
    if (!st.ok()) throw CliError(st.message());
  }
  if (o.depth >= c.block_size) {
    throw CliError("--depth " + std::to_string(o.depth) + " is past the drafter's block (at most " +
                   std::to_string(c.block_size - 1) + ")");
  }
  const int depth = o.depth > 0 ? o.depth : c.block_size - 1;
  std::vector<float> logits;
  d.draft_block(pool, state, static_cast<int32_t>(root[0]), depth, logits);
  write_floats(o.out, logits);
  if (!o.adapter_out.empty()) {
    if (!d.has_adapter()) throw CliError("--adapter-out: the drafter has no adapter");
    const std::vector<float> prev_f = in.to_f32(need(in, "adapter_prev", 1));
    if (static_cast<int>(prev_f.size()) < depth) {
      throw CliError("--inputs: 'adapter_prev' must hold a token id for each depth");
    }
    std::vector<int32_t> prev(prev_f.begin(), prev_f.begin() + depth);
    for (int32_t t : prev) {
      if (t < 0 || t >= n_vocab) throw CliError("--inputs: 'adapter_prev' holds a bad token id");
    }
    std::vector<float> adapted;
    d.adapter_logits(pool, state.y.data() + c.n_embd, prev.data(), depth, adapted);
    write_floats(o.adapter_out, adapted);
  }
}

}  // namespace

void add_dflash_command(CLI::App& app) {
  auto opts = std::make_shared<DflashOptions>();
  auto* cmd = app.add_subcommand(
      "dflash", "One DFlash draft pass from given features (float32 logits [B-1, vocab])");
  cmd->add_option("--model", opts->model, "target model name or GGUF path")->required();
  cmd->add_option("--drafter", opts->drafter, "drafter directory")->required();
  cmd->add_option("--inputs", opts->inputs, "safetensors with features, root, adapter_prev")
      ->required();
  cmd->add_option("--out", opts->out, "output file for the logits")->required();
  cmd->add_option("--adapter-out", opts->adapter_out, "output file for the adapter logits");
  cmd->add_option("--threads", opts->threads, "threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--chunk", opts->chunk, "context positions per observe() (default: all)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--depth", opts->depth, "depths to draft (default: the block's B-1)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->callback([opts] { run_dflash(*opts); });
}

}  // namespace salvo::cli
