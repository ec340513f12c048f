#include "cli/prompt.h"

#include <fstream>
#include <sstream>

#include "chat/chat_template.h"
#include "cli/commands.h"

namespace salvo::cli {

void add_prompt_options(CLI::App* cmd, PromptOptions& o) {
  cmd->add_option("--system", o.system, "system message (chat mode)");
  cmd->add_option("--chat-template", o.chat_template_file, "Jinja chat template file to use")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--raw", o.raw, "use the prompt as it is, without the chat template");
}

std::vector<int32_t> prepare_prompt(Engine& engine, const PromptOptions& o) {
  const Tokenizer& tok = engine.tokenizer();
  std::string text = o.prompt;
  if (!o.raw) {
    std::string source;
    if (!o.chat_template_file.empty()) {
      std::ifstream in(o.chat_template_file, std::ios::binary);
      if (!in) throw CliError("cannot read chat template '" + o.chat_template_file + "'");
      std::stringstream buffer;
      buffer << in.rdbuf();
      source = buffer.str();
    } else {
      auto builtin = default_chat_template_source(engine.model().gguf());
      if (!builtin.ok())
        throw CliError(builtin.status().message() + " (use --raw or --chat-template)");
      source = *builtin;
    }
    auto tmpl = ChatTemplate::parse(source);
    if (!tmpl.ok()) throw CliError("chat template: " + tmpl.status().message());
    std::vector<ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system});
    messages.push_back({"user", o.prompt});
    const std::string bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
    const std::string eos = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
    auto rendered = tmpl->render(messages, /*add_generation_prompt=*/true, bos, eos);
    if (!rendered.ok()) throw CliError("chat template: " + rendered.status().message());
    text = *rendered;
    // Templates that write the BOS text themselves would get a second BOS from the tokenizer.
    if (tok.add_bos() && !bos.empty() && text.rfind(bos, 0) == 0) text.erase(0, bos.size());
  }
  std::vector<int32_t> ids = tok.encode(text, /*add_special=*/true, /*parse_special=*/true);
  if (ids.empty()) throw CliError("the prompt is empty");
  return ids;
}

}  // namespace salvo::cli
