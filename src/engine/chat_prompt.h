// Chat messages -> prompt token ids through a chat template, shared by the CLI and the server so
// that both render a conversation exactly alike.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "engine/engine.h"
#include "util/status.h"

namespace salvo {

// The model's own template (or the one salvo ships for its architecture), parsed.
Expected<ChatTemplate> model_chat_template(const Engine& engine);

// Renders `messages` (an array of {role, content} objects) with the generation prompt: the text
// that tokenized with special tokens added and parsed gives chat_prompt_tokens' ids.
Expected<std::string> chat_prompt_text(const Engine& engine, const ChatTemplate& chat_template,
                                       const nlohmann::ordered_json& messages);

// chat_prompt_text, tokenized with special tokens parsed.
Expected<std::vector<int32_t>> chat_prompt_tokens(const Engine& engine,
                                                  const ChatTemplate& chat_template,
                                                  const nlohmann::ordered_json& messages);

}  // namespace salvo
