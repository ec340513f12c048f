#include "chat/chat_template.h"

#include "chat/builtin_templates.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_render.h"

namespace salvo {
namespace {

std::string error_at(const jinja::JinjaError& e) {
  if (e.pos().line == 0) return std::string("chat template: ") + e.what();
  return "chat template " + std::to_string(e.pos().line) + ":" + std::to_string(e.pos().column) +
         ": " + e.what();
}

// JSON nesting is bounded so a hostile request cannot recurse the converter off the stack.
constexpr int kMaxJsonDepth = 64;

jinja::Value from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxJsonDepth)
    throw jinja::JinjaError(jinja::kNoPos, "message JSON nested too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return jinja::Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return jinja::Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return jinja::Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return jinja::Value(static_cast<double>(u));
      return jinja::Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return jinja::Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return jinja::Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      jinja::ValueList items;
      for (const auto& item : j) items.push_back(from_json(item, depth + 1));
      return jinja::Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::Value d = jinja::Value::dict();
      for (const auto& [k, v] : j.items()) d.as_dict().set(k, from_json(v, depth + 1));
      return d;
    }
    default:
      throw jinja::JinjaError(jinja::kNoPos, "unsupported JSON value in messages");
  }
}

jinja::ValueDict base_variables(jinja::Value messages, bool add_generation_prompt,
                                const std::string& bos_token, const std::string& eos_token) {
  jinja::ValueDict vars;
  vars.set("messages", std::move(messages));
  vars.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  vars.set("bos_token", jinja::Value(bos_token));
  vars.set("eos_token", jinja::Value(eos_token));
  // transformers passes tools=None and documents=None when the caller gives none.
  vars.set("tools", jinja::Value::none());
  vars.set("documents", jinja::Value::none());
  return vars;
}

}  // namespace

Expected<ChatTemplate> ChatTemplate::parse(std::string source) {
  ChatTemplate tmpl;
  try {
    jinja::LexerOptions options;
    tmpl.parsed_ = jinja::parse_template(source, options);
  } catch (const jinja::JinjaError& e) {
    return Status::error(error_at(e));
  }
  tmpl.source_ = std::move(source);
  return tmpl;
}

Expected<std::string> ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                           bool add_generation_prompt, const std::string& bos_token,
                                           const std::string& eos_token) const {
  jinja::ValueList list;
  for (const ChatMessage& m : messages) {
    jinja::Value d = jinja::Value::dict();
    d.as_dict().set("role", jinja::Value(m.role));
    d.as_dict().set("content", jinja::Value(m.content));
    list.push_back(std::move(d));
  }
  try {
    jinja::ValueDict vars = base_variables(jinja::Value::list(std::move(list)),
                                           add_generation_prompt, bos_token, eos_token);
    return jinja::render_template(*parsed_, vars, jinja::RenderLimits{});
  } catch (const jinja::JinjaError& e) {
    return Status::error(error_at(e));
  }
}

Expected<std::string> ChatTemplate::render_json(
    const nlohmann::ordered_json& messages, bool add_generation_prompt,
    const std::string& bos_token, const std::string& eos_token,
    const nlohmann::ordered_json& extra_variables) const {
  if (!messages.is_array()) return Status::error("messages must be a JSON array");
  if (!extra_variables.is_object())
    return Status::error("template variables must be a JSON object");
  try {
    jinja::ValueDict vars =
        base_variables(from_json(messages, 0), add_generation_prompt, bos_token, eos_token);
    for (const auto& [k, v] : extra_variables.items()) vars.set(k, from_json(v, 0));
    return jinja::render_template(*parsed_, vars, jinja::RenderLimits{});
  } catch (const jinja::JinjaError& e) {
    return Status::error(error_at(e));
  }
}

Expected<std::string> default_chat_template_source(const GgufFile& gguf) {
  std::string source = gguf.get_string_or("tokenizer.chat_template", "");
  if (!source.empty()) return source;
  std::string arch = gguf.get_string_or("general.architecture", "");
  if (arch == "gemma3") return std::string(kGemma3ChatTemplate);
  return Status::error(
      "model has no tokenizer.chat_template and salvo ships no template for architecture '" +
      (arch.empty() ? std::string("unknown") : arch) + "'; pass one with --chat-template");
}

}  // namespace salvo
