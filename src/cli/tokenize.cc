// salvo tokenize: text -> token ids (or ids -> text with --decode), matching llama.cpp's
// llama_tokenize. --jsonl tokenizes one JSON string per line in a single process so tests can
// compare hundreds of strings cheaply.
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "io/gguf.h"
#include "tokenizer/tokenizer.h"

namespace salvo::cli {
namespace {

struct TokenizeOptions {
  std::string model;
  std::string prompt;
  std::string jsonl;
  std::string ids;
  bool no_special = false;
  bool no_parse_special = false;
  bool decode = false;
};

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model) {
  auto gguf = GgufFile::open(resolve_model(model));
  if (!gguf.ok()) throw CliError(gguf.status().message());
  auto tokenizer = Tokenizer::from_gguf(**gguf);
  if (!tokenizer.ok()) throw CliError(tokenizer.status().message());
  return std::move(tokenizer).value();
}

std::vector<int32_t> parse_ids(const std::string& list) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos < list.size()) {
    size_t comma = list.find(',', pos);
    if (comma == std::string::npos) comma = list.size();
    const std::string item = list.substr(pos, comma - pos);
    try {
      size_t used = 0;
      const long value = std::stol(item, &used);
      if (used != item.size() || value < INT32_MIN || value > INT32_MAX) throw std::exception();
      ids.push_back(static_cast<int32_t>(value));
    } catch (const std::exception&) {
      throw CliError("--ids: '" + item + "' is not a token id (expected e.g. --ids 1,2,3)");
    }
    pos = comma + 1;
  }
  return ids;
}

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CliError("--jsonl: cannot open '" + path + "'");
  std::vector<nlohmann::json> values;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    try {
      values.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      throw CliError(path + ":" + std::to_string(line_no) + ": not JSON: " + e.what());
    }
  }
  return values;
}

// Each line holds a JSON array of ids; prints {"text": decoded, "stream": [chunks]} where the
// chunks are what StreamDecoder emitted token by token (then flush), so tests can check that no
// chunk ends inside a UTF-8 character.
void decode_jsonl(const Tokenizer& tokenizer, const std::string& path) {
  std::string out;
  for (const nlohmann::json& value : read_jsonl(path)) {
    std::vector<int32_t> ids;
    try {
      ids = value.get<std::vector<int32_t>>();
    } catch (const nlohmann::json::exception&) {
      throw CliError(path + ": expected a JSON array of token ids per line");
    }
    for (int32_t id : ids) {
      if (id < 0 || id >= tokenizer.n_vocab()) {
        throw CliError(path + ": token id " + std::to_string(id) + " is outside the vocabulary");
      }
    }
    StreamDecoder stream(tokenizer);
    nlohmann::json chunks = nlohmann::json::array();
    for (int32_t id : ids) chunks.push_back(stream.push(id));
    chunks.push_back(stream.flush());
    const nlohmann::json result = {{"text", tokenizer.decode(ids)}, {"stream", chunks}};
    // Invalid UTF-8 is written as U+FFFD rather than aborting; the comparison then fails.
    out += result.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    out += '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

void run_tokenize(const TokenizeOptions& o) {
  const int inputs = !o.prompt.empty() + !o.jsonl.empty() + !o.ids.empty();
  if (inputs != 1 || (o.decode && !o.prompt.empty()) || (!o.decode && !o.ids.empty())) {
    throw CliError(
        "tokenize: give one of -p TEXT or --jsonl FILE, or --decode with --ids or --jsonl");
  }
  const auto tokenizer = load_tokenizer(o.model);
  if (o.decode && !o.jsonl.empty()) {
    decode_jsonl(*tokenizer, o.jsonl);
    return;
  }
  if (o.decode) {
    for (int32_t id : parse_ids(o.ids)) {
      if (id < 0 || id >= tokenizer->n_vocab()) {
        throw CliError("--ids: " + std::to_string(id) + " is outside the vocabulary (0.." +
                       std::to_string(tokenizer->n_vocab() - 1) + ")");
      }
    }
    const std::string text = tokenizer->decode(parse_ids(o.ids));
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return;
  }
  const bool add_special = !o.no_special;
  const bool parse_special = !o.no_parse_special;
  if (!o.prompt.empty()) {
    const nlohmann::json ids = tokenizer->encode(o.prompt, add_special, parse_special);
    std::printf("%s\n", ids.dump().c_str());
    return;
  }
  std::string out;
  for (const nlohmann::json& value : read_jsonl(o.jsonl)) {
    if (!value.is_string()) throw CliError(o.jsonl + ": expected a JSON string per line");
    const nlohmann::json ids =
        tokenizer->encode(value.get_ref<const std::string&>(), add_special, parse_special);
    out += ids.dump();
    out += '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (or decode ids)");
  cmd->add_option("--model,-m", options->model, "Model name or GGUF path")->required();
  cmd->add_option("-p,--prompt", options->prompt, "Text to tokenize");
  cmd->add_option("--jsonl", options->jsonl,
                  "File with one JSON string per line; prints one JSON array per line");
  cmd->add_flag("--no-special", options->no_special, "Do not add BOS/EOS");
  cmd->add_flag("--no-parse-special", options->no_parse_special,
                "Treat control-token text such as <|im_start|> as plain text");
  cmd->add_flag("--decode", options->decode,
                "Decode --ids (or --jsonl lines of id arrays) to text instead");
  cmd->add_option("--ids", options->ids, "Comma-separated token ids for --decode");
  cmd->callback([options] { run_tokenize(*options); });
}

}  // namespace salvo::cli
