#include "server/openai_api.h"

#include <limits>
#include <random>

namespace salvo::server {
namespace {

ApiError bad(const std::string& param, const std::string& message,
             const std::string& code = "invalid_value") {
  return ApiError{400, message, "invalid_request_error", param, code};
}

ApiError unsupported(const std::string& param, const std::string& what) {
  return ApiError{400, what + " is not supported by salvo", "invalid_request_error", param,
                  "unsupported_parameter"};
}

const char* type_name(const Json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

// A present, non-null number in [lo, hi]; `integer` also requires a whole number.
std::optional<ApiError> read_number(const Json& body, const char* key, double lo, double hi,
                                    bool integer, std::optional<double>& out) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number() || (integer && !it->is_number_integer())) {
    return bad(key,
               std::string("'") + key + "' must be " + (integer ? "an integer" : "a number") +
                   ", got " + type_name(*it),
               "invalid_type");
  }
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    return bad(key, std::string("'") + key + "' is " + it->dump() + "; it must be within [" +
                        Json(lo).dump() + ", " + Json(hi).dump() + "]");
  }
  out = v;
  return std::nullopt;
}

std::optional<ApiError> read_bool(const Json& body, const char* key, bool& out) {
  const auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) {
    return bad(key, std::string("'") + key + "' must be a boolean, got " + type_name(*it),
               "invalid_type");
  }
  out = it->get<bool>();
  return std::nullopt;
}

bool present(const Json& body, const char* key) {
  const auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

std::optional<ApiError> check_unsupported(const Json& body, Endpoint endpoint) {
  if (present(body, "n")) {
    const Json& n = body["n"];
    if (!n.is_number_integer() || n.get<int64_t>() != 1) {
      return unsupported("n", "'n' other than 1 (several choices per request)");
    }
  }
  for (const char* key : {"tools", "functions"}) {
    if (present(body, key) && !(body[key].is_array() && body[key].empty())) {
      return unsupported(key, std::string("'") + key + "' (tool calling)");
    }
  }
  for (const char* key : {"tool_choice", "function_call"}) {
    if (present(body, key) && body[key] != "none") {
      return unsupported(key, std::string("'") + key + "' (tool calling)");
    }
  }
  if (present(body, "logprobs") &&
      !(body["logprobs"].is_boolean() && !body["logprobs"].get<bool>())) {
    return unsupported("logprobs", "'logprobs'");
  }
  if (present(body, "top_logprobs")) return unsupported("top_logprobs", "'top_logprobs'");
  if (present(body, "logit_bias") &&
      !(body["logit_bias"].is_object() && body["logit_bias"].empty())) {
    return unsupported("logit_bias", "'logit_bias'");
  }
  if (present(body, "response_format")) {
    const Json& f = body["response_format"];
    if (!f.is_object() || f.value("type", "") != "text") {
      return unsupported("response_format", "'response_format' other than {\"type\": \"text\"}");
    }
  }
  if (endpoint == Endpoint::kCompletion) {
    if (present(body, "echo") && body["echo"] != false) return unsupported("echo", "'echo'");
    if (present(body, "suffix") && body["suffix"] != "") return unsupported("suffix", "'suffix'");
    if (present(body, "best_of") && body["best_of"] != 1) {
      return unsupported("best_of", "'best_of' other than 1");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> parse_messages(const Json& body, Json& out) {
  const auto it = body.find("messages");
  if (it == body.end() || it->is_null()) {
    return bad("messages", "'messages' is required", "missing_required_parameter");
  }
  if (!it->is_array() || it->empty()) {
    return bad("messages", "'messages' must be a non-empty array of messages");
  }
  out = Json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& m = (*it)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return bad(where, where + " must be an object", "invalid_type");
    if (!m.contains("role") || !m["role"].is_string()) {
      return bad(where + ".role", where + ".role must be a string", "invalid_type");
    }
    std::string role = m["role"];
    if (role == "developer") role = "system";
    if (role == "tool" || role == "function")
      return unsupported(where + ".role", "role '" + role + "'");
    if (role != "system" && role != "user" && role != "assistant") {
      return bad(where + ".role",
                 where + ".role '" + role + "' is not one of system, developer, user, assistant");
    }
    if (present(m, "tool_calls")) return unsupported(where + ".tool_calls", "'tool_calls'");
    const auto content = m.find("content");
    std::string text;
    if (content == m.end() || content->is_null()) {
      return bad(where + ".content", where + ".content is required", "missing_required_parameter");
    } else if (content->is_string()) {
      text = content->get<std::string>();
    } else if (content->is_array()) {
      for (const Json& part : *content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return unsupported(where + ".content",
                             "content parts other than {\"type\": \"text\", \"text\": ...}");
        }
        text += part["text"].get<std::string>();
      }
    } else {
      return bad(
          where + ".content",
          where + ".content must be a string or an array of text parts, got " + type_name(*content),
          "invalid_type");
    }
    out.push_back({{"role", role}, {"content", text}});
  }
  return std::nullopt;
}

std::optional<ApiError> parse_prompt(const Json& body, ParsedRequest& out) {
  const auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) {
    return bad("prompt", "'prompt' is required", "missing_required_parameter");
  }
  const Json* p = &*it;
  // A batch of one prompt is the same as the prompt.
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    out.prompt_text = p->get<std::string>();
    if (out.prompt_text.empty()) return bad("prompt", "'prompt' is empty");
    return std::nullopt;
  }
  if (p->is_array() && !p->empty() &&
      std::all_of(p->begin(), p->end(), [](const Json& t) { return t.is_number_integer(); })) {
    for (const Json& t : *p) {
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
        return bad("prompt", "token id " + std::to_string(id) + " is out of range");
      }
      out.prompt_tokens.push_back(static_cast<int32_t>(id));
    }
    return std::nullopt;
  }
  if (p->is_array() && p->size() > 1) return unsupported("prompt", "a batch of several prompts");
  return bad("prompt", "'prompt' must be a string or an array of token ids", "invalid_type");
}

std::optional<ApiError> parse_stop(const Json& body, std::vector<std::string>& out) {
  const auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    out.push_back(*it);
    return std::nullopt;
  }
  if (!it->is_array() || it->size() > 16 ||
      !std::all_of(it->begin(), it->end(), [](const Json& s) { return s.is_string(); })) {
    return bad("stop", "'stop' must be a string or an array of at most 16 strings", "invalid_type");
  }
  for (const Json& s : *it) out.push_back(s);
  return std::nullopt;
}

}  // namespace

Json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? Json(nullptr) : Json(e.param)},
            {"code", e.code.empty() ? Json(nullptr) : Json(e.code)}}}};
}

std::optional<ApiError> parse_request(const Json& body, Endpoint endpoint, int context_size,
                                      ParsedRequest& out) {
  if (!body.is_object()) return bad("", "the request body must be a JSON object", "invalid_type");
  out = ParsedRequest();
  out.endpoint = endpoint;
  if (present(body, "model")) {
    if (!body["model"].is_string()) return bad("model", "'model' must be a string", "invalid_type");
    out.model = body["model"];
  }
  if (auto e = check_unsupported(body, endpoint)) return e;
  if (endpoint == Endpoint::kChat) {
    if (auto e = parse_messages(body, out.messages)) return e;
  } else {
    if (auto e = parse_prompt(body, out)) return e;
  }

  GenerateRequest& g = out.generate;
  SamplingParams& s = g.sampling;
  std::optional<double> v;
  if (auto e = read_number(body, "temperature", 0, 2, false, v)) return e;
  if (v) s.temperature = static_cast<float>(*v), v.reset();
  if (auto e = read_number(body, "top_p", 0, 1, false, v)) return e;
  if (v) {
    // top_p = 0 keeps only the most likely token.
    if (*v == 0)
      s.top_k = 1, s.top_p = 1;
    else
      s.top_p = static_cast<float>(*v);
    v.reset();
  }
  if (auto e = read_number(body, "top_k", 0, 1 << 24, true, v)) return e;
  if (v) s.top_k = s.top_k == 1 ? 1 : static_cast<int>(*v), v.reset();
  if (auto e = read_number(body, "min_p", 0, 1, false, v)) return e;
  if (v) s.min_p = static_cast<float>(*v), v.reset();
  if (auto e = read_number(body, "presence_penalty", -2, 2, false, v)) return e;
  if (v) s.presence_penalty = static_cast<float>(*v), v.reset();
  if (auto e = read_number(body, "frequency_penalty", -2, 2, false, v)) return e;
  if (v) s.frequency_penalty = static_cast<float>(*v), v.reset();
  if (auto e = read_number(body, "repeat_penalty", 0.01, 10, false, v)) return e;
  if (v) s.repeat_penalty = static_cast<float>(*v), v.reset();
  if (present(body, "seed")) {
    const Json& seed = body["seed"];
    if (!seed.is_number_integer()) return bad("seed", "'seed' must be an integer", "invalid_type");
    s.seed = seed.is_number_unsigned() ? seed.get<uint64_t>()
                                       : static_cast<uint64_t>(seed.get<int64_t>());
  } else {
    s.seed = (static_cast<uint64_t>(std::random_device{}()) << 32) | std::random_device{}();
  }
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    if (auto e = read_number(body, key, 0, context_size, true, v)) {
      if (e->code == "invalid_value") {
        e->message = std::string("'") + key + "' is " + body[key].dump() +
                     "; it must be between 0 and the context size " + std::to_string(context_size);
      }
      return e;
    }
    if (v) g.max_tokens = static_cast<int>(*v), out.max_tokens_given = true, v.reset();
  }
  if (!out.max_tokens_given) g.max_tokens = context_size;  // until the context is full
  if (auto e = parse_stop(body, g.stop)) return e;
  if (auto e = read_bool(body, "ignore_eos", g.ignore_eos)) return e;
  if (auto e = read_bool(body, "stream", out.stream)) return e;
  if (present(body, "stream_options")) {
    const Json& o = body["stream_options"];
    if (!o.is_object()) {
      return bad("stream_options", "'stream_options' must be an object", "invalid_type");
    }
    if (auto e = read_bool(o, "include_usage", out.include_usage)) {
      e->param = "stream_options.include_usage";
      return e;
    }
  }
  if (Status st = s.validate(); !st.ok()) return bad("", st.message());
  return std::nullopt;
}

Json usage_json(const GenerationStats& s) {
  return {{"prompt_tokens", s.prompt_tokens},
          {"completion_tokens", s.generated_tokens},
          {"total_tokens", s.prompt_tokens + s.generated_tokens},
          {"prompt_tokens_details", {{"cached_tokens", s.cached_prompt_tokens}}},
          {"forward_passes", s.forward_passes},
          {"tokens_per_pass", s.tokens_per_pass()}};
}

static Json header_json(Endpoint endpoint, const ResponseHeader& h, bool chunk) {
  const char* object = endpoint == Endpoint::kChat
                           ? (chunk ? "chat.completion.chunk" : "chat.completion")
                           : "text_completion";
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

Json completion_response(Endpoint endpoint, const ResponseHeader& header,
                         const GenerationResult& result) {
  Json out = header_json(endpoint, header, false);
  Json choice = {{"index", 0}};
  if (endpoint == Endpoint::kChat) {
    choice["message"] = {{"role", "assistant"}, {"content", result.text}};
  } else {
    choice["text"] = result.text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = result.stats.finish_reason;
  out["choices"] = Json::array({choice});
  out["usage"] = usage_json(result.stats);
  return out;
}

Json stream_chunk(Endpoint endpoint, const ResponseHeader& header, const std::string& text,
                  bool first, const std::string* finish_reason) {
  Json out = header_json(endpoint, header, true);
  Json choice = {{"index", 0}};
  if (endpoint == Endpoint::kChat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!finish_reason) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason ? Json(*finish_reason) : Json(nullptr);
  out["choices"] = Json::array({choice});
  return out;
}

Json usage_chunk(Endpoint endpoint, const ResponseHeader& header, const GenerationStats& stats) {
  Json out = header_json(endpoint, header, true);
  out["choices"] = Json::array();
  out["usage"] = usage_json(stats);
  return out;
}

}  // namespace salvo::server
