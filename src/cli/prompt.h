// Turning a user's prompt into token ids: through the model's chat template (or a template
// file), or raw.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "engine/engine.h"

namespace salvo::cli {

struct PromptOptions {
  std::string prompt;
  std::string system;
  std::string chat_template_file;  // overrides the model's template
  bool raw = false;                // no template: the prompt is the text
};

std::vector<int32_t> prepare_prompt(Engine& engine, const PromptOptions& options);

// Adds --system, --chat-template and --raw to a command.
void add_prompt_options(CLI::App* cmd, PromptOptions& options);

}  // namespace salvo::cli
