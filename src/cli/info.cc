// `salvo info MODEL [--json]`: what a GGUF file holds, read from its header only (no weights
// are touched, so it is instant even for large models).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli/commands.h"
#include "io/gguf.h"

namespace salvo::cli {
namespace {

// ordered_json keeps metadata in file order, which is how llama.cpp and gguf-py list it.
using Json = nlohmann::ordered_json;

// Arrays longer than this are summarised in --json output: token lists run to 100k+ entries.
constexpr size_t kMaxJsonArray = 16;
constexpr int kTemplateLinesShown = 6;

struct InfoOptions {
  std::string model;
  bool json = false;
};

Json scalar_json(const GgufValue& v) {
  switch (v.type) {
    case GgufType::kUint8:
    case GgufType::kUint16:
    case GgufType::kUint32:
    case GgufType::kUint64:
      return v.u;
    case GgufType::kInt8:
    case GgufType::kInt16:
    case GgufType::kInt32:
    case GgufType::kInt64:
      return v.i;
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      return v.f;
    case GgufType::kBool:
      return v.u != 0;
    case GgufType::kString:
      return v.s;
    case GgufType::kArray:
      break;
  }
  return nullptr;
}

Json value_json(const GgufValue& v) {
  if (v.type != GgufType::kArray) return scalar_json(v);
  if (v.array_size() > kMaxJsonArray) {
    return Json{{"type", std::string(gguf_type_name(v.elem_type))}, {"length", v.array_size()}};
  }
  Json items = Json::array();
  switch (v.elem_type) {
    case GgufType::kString:
      for (const auto& s : v.strings) items.push_back(std::string(s));
      break;
    case GgufType::kArray:
      for (const auto& inner : v.arrays) items.push_back(value_json(inner));
      break;
    case GgufType::kFloat32:
    case GgufType::kFloat64:
      for (double f : v.floats) items.push_back(f);
      break;
    case GgufType::kBool:
      for (int64_t x : v.ints) items.push_back(x != 0);
      break;
    default:
      for (int64_t x : v.ints) items.push_back(x);
      break;
  }
  return items;
}

// A hyper-parameter as JSON: null when absent; arrays (per-layer head counts) kept as arrays.
Json hparam_json(const GgufFile& g, const std::string& key) {
  const GgufValue* v = g.find(key);
  return v == nullptr ? Json(nullptr) : value_json(*v);
}

std::string hparam_text(const Json& j) {
  if (j.is_null()) return "-";
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

std::string human_count(int64_t n) {
  if (n >= 1'000'000'000) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1'000'000) return fmt::format("{:.1f}M", n / 1e6);
  if (n >= 1'000) return fmt::format("{:.1f}K", n / 1e3);
  return std::to_string(n);
}

std::string human_bytes(size_t n) {
  if (n >= (size_t{1} << 30)) return fmt::format("{:.2f} GiB", n / double(size_t{1} << 30));
  if (n >= (size_t{1} << 20)) return fmt::format("{:.1f} MiB", n / double(size_t{1} << 20));
  if (n >= (size_t{1} << 10)) return fmt::format("{:.1f} KiB", n / double(size_t{1} << 10));
  return fmt::format("{} B", n);
}

// Type name -> tensor count, most common first.
std::vector<std::pair<std::string, int>> tensor_type_counts(const GgufFile& g) {
  std::map<std::string, int> counts;
  for (const auto& t : g.tensors()) ++counts[std::string(traits(t.type).name)];
  std::vector<std::pair<std::string, int>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return sorted;
}

Json summary_json(const GgufFile& g) {
  const std::string arch = g.get_string_or("general.architecture", "");
  int64_t n_params = 0;
  for (const auto& t : g.tensors()) n_params += t.n_elements;
  const GgufValue* tokens = g.find("tokenizer.ggml.tokens");
  const GgufValue* chat_template = g.find("tokenizer.chat_template");

  Json j;
  j["path"] = g.path();
  j["gguf_version"] = g.version();
  j["architecture"] = arch.empty() ? Json(nullptr) : Json(arch);
  j["name"] = hparam_json(g, "general.name");
  j["parameters"] = n_params;
  j["file_size"] = g.file_size();
  j["data_offset"] = g.data_offset();
  j["alignment"] = g.alignment();
  j["context_length"] = hparam_json(g, arch + ".context_length");
  j["block_count"] = hparam_json(g, arch + ".block_count");
  j["embedding_length"] = hparam_json(g, arch + ".embedding_length");
  j["head_count"] = hparam_json(g, arch + ".attention.head_count");
  j["head_count_kv"] = hparam_json(g, arch + ".attention.head_count_kv");
  j["vocab_size"] = tokens != nullptr ? Json(tokens->array_size()) : Json(nullptr);
  j["tokenizer_model"] = hparam_json(g, "tokenizer.ggml.model");
  j["tokenizer_pre"] = hparam_json(g, "tokenizer.ggml.pre");
  j["chat_template"] = chat_template != nullptr && chat_template->type == GgufType::kString
                           ? Json(chat_template->s)
                           : Json(nullptr);
  Json types = Json::object();
  for (const auto& [name, count] : tensor_type_counts(g)) types[name] = count;
  j["tensor_types"] = std::move(types);
  return j;
}

void print_json(const GgufFile& g) {
  Json j = summary_json(g);
  Json metadata = Json::object();
  for (const auto& kv : g.metadata()) metadata[kv.key] = value_json(kv.value);
  j["metadata"] = std::move(metadata);
  Json tensors = Json::array();
  for (const auto& t : g.tensors()) {
    tensors.push_back(Json{{"name", t.name},
                           {"type", std::string(traits(t.type).name)},
                           {"dims", t.dims},
                           {"offset", t.offset},
                           {"size", t.size_bytes}});
  }
  j["tensors"] = std::move(tensors);
  // Strings in a GGUF need not be valid UTF-8; replace bad bytes rather than throw.
  std::puts(j.dump(1, ' ', false, Json::error_handler_t::replace).c_str());
}

void print_text(const GgufFile& g) {
  const Json j = summary_json(g);
  const int64_t n_params = j["parameters"].get<int64_t>();
  const auto row = [](std::string_view label, const std::string& value) {
    fmt::print("{:<16}{}\n", label, value);
  };
  row("file", g.path());
  row("file size", fmt::format("{} ({} bytes), GGUF v{}", human_bytes(g.file_size()), g.file_size(),
                               g.version()));
  row("architecture", hparam_text(j["architecture"]));
  row("name", hparam_text(j["name"]));
  const double bits_per_weight = n_params > 0 ? 8.0 * g.file_size() / n_params : 0.0;
  row("parameters", fmt::format("{} ({}), {:.2f} bits per weight", human_count(n_params), n_params,
                                bits_per_weight));
  std::string types;
  for (const auto& [name, count] : tensor_type_counts(g)) {
    types += fmt::format("{}{} x{}", types.empty() ? "" : ", ", name, count);
  }
  row("tensors", fmt::format("{}: {}", g.tensors().size(), types.empty() ? "-" : types));
  row("context length", hparam_text(j["context_length"]));
  row("layers", hparam_text(j["block_count"]));
  row("embedding", hparam_text(j["embedding_length"]));
  row("heads",
      fmt::format("{} (kv {})", hparam_text(j["head_count"]), hparam_text(j["head_count_kv"])));
  row("vocabulary", hparam_text(j["vocab_size"]));
  row("tokenizer", fmt::format("{} (pre: {})", hparam_text(j["tokenizer_model"]),
                               hparam_text(j["tokenizer_pre"])));
  if (j["chat_template"].is_null()) {
    row("chat template", "none");
    return;
  }
  const std::string& tmpl = j["chat_template"].get_ref<const std::string&>();
  std::vector<std::string> lines;
  for (size_t start = 0; start <= tmpl.size();) {
    const size_t end = std::min(tmpl.find('\n', start), tmpl.size());
    lines.push_back(tmpl.substr(start, end - start));
    start = end + 1;
  }
  fmt::print("chat template   {} lines, {} bytes\n", lines.size(), tmpl.size());
  for (size_t k = 0; k < lines.size() && k < kTemplateLinesShown; ++k) {
    fmt::print("  | {}\n", lines[k]);
  }
  if (lines.size() > kTemplateLinesShown) {
    fmt::print("  | ... ({} more lines)\n", lines.size() - kTemplateLinesShown);
  }
}

void run_info(const InfoOptions& options) {
  const std::string path = resolve_model(options.model);
  auto file = GgufFile::open(path);
  if (!file.ok()) throw CliError(file.status().message());
  if (options.json) {
    print_json(**file);
  } else {
    print_text(**file);
  }
}

}  // namespace

void add_info_command(CLI::App& app) {
  auto options = std::make_shared<InfoOptions>();
  CLI::App* cmd = app.add_subcommand("info", "Show a model's metadata, tensors and size");
  cmd->add_option("model", options->model, "model name (e.g. smollm2-135m) or GGUF path")
      ->required();
  cmd->add_flag("--json", options->json,
                "print one JSON object with every metadata key and every tensor");
  cmd->callback([options] { run_info(*options); });
}

}  // namespace salvo::cli
