// `salvo template`: prints the prompt a chat template makes of a message list, exactly as the
// engine would feed it to the tokenizer (no trailing newline added), for checking templates
// against transformers.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "io/gguf.h"

namespace salvo::cli {
namespace {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CliError(std::string("cannot open ") + what + " '" + path + "'");
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// The text of a special token named by its id key, or "" when the model has none.
std::string special_token(const GgufFile& gguf, const char* id_key) {
  int64_t id = gguf.get_int_or(id_key, -1);
  if (id < 0) return "";
  auto tokens = gguf.get_string_array("tokenizer.ggml.tokens");
  if (!tokens.ok() || static_cast<size_t>(id) >= tokens->size()) return "";
  return (*tokens)[static_cast<size_t>(id)];
}

struct TemplateArgs {
  std::string model;
  std::string chat_template_path;
  std::string messages_path;
  bool no_generation_prompt = false;
};

void run_template(const TemplateArgs& args) {
  std::string model_path = resolve_model(args.model);
  auto gguf = GgufFile::open(model_path);
  if (!gguf.ok()) throw CliError(gguf.status().message());

  std::string source;
  if (!args.chat_template_path.empty()) {
    source = read_file(args.chat_template_path, "chat template");
  } else {
    auto found = default_chat_template_source(**gguf);
    if (!found.ok()) throw CliError(found.status().message());
    source = std::move(*found);
  }
  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl.ok()) throw CliError(tmpl.status().message());

  // The file is either a message array or {"messages": [...], <other template variables>}.
  nlohmann::ordered_json doc =
      nlohmann::ordered_json::parse(read_file(args.messages_path, "messages file"), nullptr,
                                    /*allow_exceptions=*/false);
  if (doc.is_discarded())
    throw CliError("messages file '" + args.messages_path + "' is not valid JSON");
  nlohmann::ordered_json messages = doc;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  if (doc.is_object()) {
    if (!doc.contains("messages"))
      throw CliError("messages file: object has no \"messages\" array");
    messages = doc["messages"];
    for (const auto& [k, v] : doc.items()) {
      if (k != "messages") extra[k] = v;
    }
  }
  if (!messages.is_array()) throw CliError("messages file: expected a JSON array of messages");

  auto prompt = tmpl->render_json(messages, !args.no_generation_prompt,
                                  special_token(**gguf, "tokenizer.ggml.bos_token_id"),
                                  special_token(**gguf, "tokenizer.ggml.eos_token_id"), extra);
  if (!prompt.ok()) throw CliError(prompt.status().message());
  std::cout << *prompt << std::flush;
}

}  // namespace

void add_template_command(CLI::App& app) {
  auto args = std::make_shared<TemplateArgs>();
  CLI::App* cmd = app.add_subcommand("template", "Render a chat template for a list of messages");
  cmd->add_option("--model", args->model, "Model name or GGUF path (template and special tokens)")
      ->required();
  cmd->add_option("--chat-template", args->chat_template_path,
                  "Jinja template file to use instead of the model's");
  cmd->add_option("--messages", args->messages_path,
                  "JSON file: an array of {role, content} messages")
      ->required();
  cmd->add_flag("--no-generation-prompt", args->no_generation_prompt,
                "Do not append the assistant turn opener (add_generation_prompt=false)");
  cmd->callback([args] { run_template(*args); });
}

}  // namespace salvo::cli
