// The OpenAI request and response shapes: validating a JSON body into a GenerateRequest (every
// rejection names the field, as OpenAI's errors do) and building completion objects and
// stream chunks. No HTTP and no model here; http_server.cc ties them together.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/sequence.h"

namespace salvo::server {

using Json = nlohmann::ordered_json;

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, empty if none
  std::string code;   // empty = null
};

// {"error": {"message", "type", "param", "code"}}
Json error_body(const ApiError& error);

enum class Endpoint { kChat, kCompletion };

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kChat;
  std::string model;        // as sent; empty if absent
  Json messages;            // chat: [{role, content: string}], content parts already joined
  std::string prompt_text;  // completion: the prompt as text...
  std::vector<int32_t> prompt_tokens;  // ...or as token ids
  GenerateRequest generate;            // everything but the prompt
  bool max_tokens_given = false;
  bool stream = false;
  bool include_usage = false;
};

// `context_size`: the slot size, the ceiling of max_tokens.
std::optional<ApiError> parse_request(const Json& body, Endpoint endpoint, int context_size,
                                      ParsedRequest& out);

// Response objects. `id` and `created` are shared by all chunks of one stream.
struct ResponseHeader {
  std::string id;
  int64_t created = 0;
  std::string model;
};

Json usage_json(const GenerationStats& stats);
Json completion_response(Endpoint endpoint, const ResponseHeader& header,
                         const GenerationResult& result);
// One stream chunk carrying `text` (and the role in the first chat chunk), or the final one
// with `finish_reason` set.
Json stream_chunk(Endpoint endpoint, const ResponseHeader& header, const std::string& text,
                  bool first, const std::string* finish_reason);
Json usage_chunk(Endpoint endpoint, const ResponseHeader& header, const GenerationStats& stats);

}  // namespace salvo::server
