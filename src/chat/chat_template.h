// Chat templates: turning a list of chat messages into the prompt text a model was trained on.
// Templates are the Jinja source Hugging Face ships in tokenizer_config.json (and GGUF files carry
// as tokenizer.chat_template); salvo renders them with its own Jinja subset (jinja_*.cc) so that
// the result equals transformers' apply_chat_template byte for byte.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/gguf.h"
#include "util/status.h"

namespace salvo {

namespace jinja {
struct ParsedTemplate;
}

struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  // Parses Jinja source; a syntax error names line:column ("chat template 3:14: unknown filter
  // 'foo'"). Whitespace handling is transformers' (trim_blocks and lstrip_blocks on).
  static Expected<ChatTemplate> parse(std::string source);

  // Renders like transformers' apply_chat_template(tokenize=False): the template sees `messages`,
  // `add_generation_prompt`, `bos_token`, `eos_token`, `tools` and `documents` (None), and the
  // functions raise_exception and strftime_now. raise_exception's message becomes the error.
  Expected<std::string> render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                               const std::string& bos_token, const std::string& eos_token) const;

  // The same with messages as JSON (an array of objects, e.g. from an OpenAI request): content may
  // be a list of parts and messages may carry tool_calls. `extra_variables` (an object) adds or
  // overrides template variables such as tools.
  Expected<std::string> render_json(
      const nlohmann::ordered_json& messages, bool add_generation_prompt,
      const std::string& bos_token, const std::string& eos_token,
      const nlohmann::ordered_json& extra_variables = nlohmann::ordered_json::object()) const;

  const std::string& source() const { return source_; }

 private:
  ChatTemplate() = default;
  std::string source_;
  std::shared_ptr<const jinja::ParsedTemplate> parsed_;
};

// The template for a model: the GGUF's tokenizer.chat_template, else one salvo ships for the
// architecture (gemma3), else an error naming the architecture.
Expected<std::string> default_chat_template_source(const GgufFile& gguf);

}  // namespace salvo
