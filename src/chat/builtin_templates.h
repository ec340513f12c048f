// Chat templates compiled into salvo, for models whose GGUF has no tokenizer.chat_template.
#pragma once

namespace salvo {

extern const char* const kGemma3ChatTemplate;  // templates/gemma3.jinja

}  // namespace salvo
