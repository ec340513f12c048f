#include "engine/chat_prompt.h"

namespace salvo {

Expected<ChatTemplate> model_chat_template(const Engine& engine) {
  SALVO_ASSIGN_OR_RETURN(std::string source, default_chat_template_source(engine.model().gguf()));
  auto parsed = ChatTemplate::parse(std::move(source));
  if (!parsed.ok()) return parsed.status().with_context("chat template");
  return parsed;
}

Expected<std::string> chat_prompt_text(const Engine& engine, const ChatTemplate& chat_template,
                                       const nlohmann::ordered_json& messages) {
  const Tokenizer& tok = engine.tokenizer();
  const std::string bos = tok.bos_id() >= 0 ? tok.token_text(tok.bos_id()) : "";
  const std::string eos = tok.eos_id() >= 0 ? tok.token_text(tok.eos_id()) : "";
  auto rendered = chat_template.render_json(messages, /*add_generation_prompt=*/true, bos, eos);
  if (!rendered.ok()) return rendered.status().with_context("chat template");
  std::string text = std::move(rendered).value();
  // Templates that write the BOS text themselves would get a second BOS from the tokenizer.
  if (tok.add_bos() && !bos.empty() && text.rfind(bos, 0) == 0) text.erase(0, bos.size());
  return text;
}

Expected<std::vector<int32_t>> chat_prompt_tokens(const Engine& engine,
                                                  const ChatTemplate& chat_template,
                                                  const nlohmann::ordered_json& messages) {
  SALVO_ASSIGN_OR_RETURN(std::string text, chat_prompt_text(engine, chat_template, messages));
  std::vector<int32_t> ids =
      engine.tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/true);
  if (ids.empty()) return Status::error("the prompt is empty");
  return ids;
}

}  // namespace salvo
