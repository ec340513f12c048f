#include "cli/prompt.h"

#include <fstream>
#include <optional>
#include <sstream>

#include "chat/chat_template.h"
#include "cli/commands.h"
#include "engine/chat_prompt.h"

namespace salvo::cli {

void add_prompt_options(CLI::App* cmd, PromptOptions& o) {
  cmd->add_option("--system", o.system, "system message (chat mode)");
  cmd->add_option("--chat-template", o.chat_template_file, "Jinja chat template file to use")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--raw", o.raw, "use the prompt as it is, without the chat template");
}

std::vector<int32_t> prepare_prompt(Engine& engine, const PromptOptions& o) {
  const Tokenizer& tok = engine.tokenizer();
  if (o.raw) {
    std::vector<int32_t> ids = tok.encode(o.prompt, /*add_special=*/true, /*parse_special=*/true);
    if (ids.empty()) throw CliError("the prompt is empty");
    return ids;
  }
  std::optional<ChatTemplate> tmpl;
  if (!o.chat_template_file.empty()) {
    std::ifstream in(o.chat_template_file, std::ios::binary);
    if (!in) throw CliError("cannot read chat template '" + o.chat_template_file + "'");
    std::stringstream buffer;
    buffer << in.rdbuf();
    auto parsed = ChatTemplate::parse(buffer.str());
    if (!parsed.ok()) throw CliError("chat template: " + parsed.status().message());
    tmpl.emplace(std::move(parsed).value());
  } else {
    auto builtin = model_chat_template(engine);
    if (!builtin.ok())
      throw CliError(builtin.status().message() + " (use --raw or --chat-template)");
    tmpl.emplace(std::move(builtin).value());
  }
  // The server renders its requests' messages through the same function.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
  messages.push_back({{"role", "user"}, {"content", o.prompt}});
  auto ids = chat_prompt_tokens(engine, *tmpl, messages);
  if (!ids.ok()) throw CliError(ids.status().message());
  return std::move(ids).value();
}

}  // namespace salvo::cli
