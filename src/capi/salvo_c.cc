// The C API (include/salvo/salvo.h) over Engine and Session. Every entry point catches what the
// engine throws and turns it into NULL / -1 and a message in salvo_last_error(), since an
// exception must not cross into C, Python or JavaScript.
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/device.h"
#include "engine/chat_prompt.h"
#include "engine/engine.h"
#include "engine/session.h"
#include "salvo/salvo.h"

struct salvo_model {
  std::unique_ptr<salvo::Engine> engine;
  std::optional<salvo::ChatTemplate> chat_template;  // parsed once at load
  std::string chat_template_error;                   // why there is none
  std::string drafter_dir;
  // Generations share the engine's worker threads, so they run one at a time.
  std::mutex generate_mutex;
};

struct salvo_session {
  salvo_model* model;
  salvo::Session session;
};

namespace {

thread_local std::string last_error;

void set_error(std::string message) { last_error = std::move(message); }

// Runs `body`, turning an exception into `failed` and a message.
template <typename T, typename Body>
T guarded(T failed, Body&& body) {
  try {
    last_error.clear();
    return body();
  } catch (const abi::__forced_unwind&) {
    throw;  // a thread ending (pthread_exit, e.g. a Python daemon thread at exit) must unwind
  } catch (const std::bad_alloc&) {
    set_error("out of memory");
  } catch (const std::exception& e) {
    set_error(e.what());
  } catch (...) {
    set_error("unknown error");
  }
  return failed;
}

char* copy_string(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (out == nullptr) throw std::bad_alloc();
  std::memcpy(out, text.data(), text.size());
  out[text.size()] = '\0';
  return out;
}

template <size_t N>
void copy_field(char (&field)[N], const std::string& text) {
  const size_t n = std::min(text.size(), N - 1);
  std::memcpy(field, text.data(), n);
  field[n] = '\0';
}

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T>
T value_or_throw(salvo::Expected<T> value) {
  if (!value.ok()) throw Failure(value.status().message());
  return std::move(value).value();
}

salvo::GenerateRequest make_request(const salvo_generate_params& p) {
  salvo::GenerateRequest request;
  request.max_tokens = p.max_tokens;
  if (p.max_tokens < 0)
    throw Failure("max_tokens must be >= 0, got " + std::to_string(p.max_tokens));
  request.sampling.temperature = p.temperature;
  request.sampling.top_k = p.top_k;
  request.sampling.top_p = p.top_p;
  request.sampling.min_p = p.min_p;
  request.sampling.repeat_penalty = p.repeat_penalty;
  request.sampling.presence_penalty = p.presence_penalty;
  request.sampling.frequency_penalty = p.frequency_penalty;
  request.sampling.seed = p.seed >= 0 ? static_cast<uint64_t>(p.seed) : std::random_device{}();
  if (salvo::Status st = request.sampling.validate(); !st.ok()) throw Failure(st.message());
  const auto mode = value_or_throw(salvo::parse_spec_mode(p.spec ? p.spec : "auto"));
  request.spec = {.mode = mode, .budget = p.spec_budget, .depth = p.spec_depth};
  if (salvo::Status st = request.spec.validate(); !st.ok()) throw Failure(st.message());
  if (p.n_stop < 0 || (p.n_stop > 0 && p.stop == nullptr)) {
    throw Failure("stop: n_stop is " + std::to_string(p.n_stop) + " but stop is NULL");
  }
  for (int32_t i = 0; i < p.n_stop; ++i) {
    if (p.stop[i] == nullptr) throw Failure("stop[" + std::to_string(i) + "] is NULL");
    request.stop.emplace_back(p.stop[i]);
  }
  request.ignore_eos = p.ignore_eos != 0;
  return request;
}

nlohmann::ordered_json parse_messages(const char* messages_json) {
  if (messages_json == nullptr) throw Failure("messages is NULL");
  auto messages = nlohmann::ordered_json::parse(messages_json, nullptr, /*allow_exceptions=*/false);
  if (messages.is_discarded()) throw Failure("messages: not valid JSON");
  if (!messages.is_array() || messages.empty()) {
    throw Failure("messages: expected a non-empty JSON array of {\"role\", \"content\"} objects");
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string()) {
      throw Failure("messages[" + std::to_string(i) +
                    "]: expected an object with string \"role\" and \"content\"");
    }
  }
  return messages;
}

const salvo::ChatTemplate& chat_template_of(const salvo_model& model) {
  if (!model.chat_template) {
    throw Failure(model.chat_template_error + " (use raw = 1 or salvo_generate_tokens)");
  }
  return *model.chat_template;
}

void fill_result(const salvo::GenerationResult& r, salvo_result* out) {
  out->text = copy_string(r.text);
  out->text_len = r.text.size();
  out->n_tokens = static_cast<int32_t>(r.tokens.size());
  out->tokens = static_cast<int32_t*>(std::malloc(std::max<size_t>(1, r.tokens.size()) * 4));
  if (out->tokens == nullptr) throw std::bad_alloc();
  std::copy(r.tokens.begin(), r.tokens.end(), out->tokens);
  const salvo::GenerationStats& s = r.stats;
  salvo_stats& t = out->stats;
  t.prompt_tokens = s.prompt_tokens;
  t.cached_prompt_tokens = s.cached_prompt_tokens;
  t.generated_tokens = s.generated_tokens;
  t.forward_passes = s.forward_passes;
  t.ttft_ms = s.ttft_ms;
  t.prefill_tokens_per_second = s.prefill_tokens_per_second();
  t.decode_tokens_per_second = s.decode_tokens_per_second();
  t.tokens_per_pass = s.tokens_per_pass();
  t.drafted_nodes = s.drafted_nodes;
  t.accepted_draft_tokens = s.accepted_draft_tokens;
  t.draft_ms = s.draft_ms;
  t.peak_rss_bytes = s.peak_rss_bytes;
  t.peak_device_bytes = s.peak_device_bytes;
  copy_field(t.finish_reason, s.finish_reason);
  copy_field(t.drafter, s.drafter);
}

// The common tail of the three generate calls: `prompt` is the request's ids.
int run_generation(salvo_session* session, std::vector<int32_t> prompt,
                   const salvo::GenerateRequest& base, salvo_text_callback on_text, void* user_data,
                   salvo_result* result) {
  salvo::GenerateRequest request = base;
  request.prompt = std::move(prompt);
  if (salvo::Status st = session->model->engine->tokenizer().check_ids(request.prompt); !st.ok()) {
    throw Failure("prompt: " + st.message());
  }
  std::lock_guard lock(session->model->generate_mutex);
  auto generated = session->session.generate(request, [&](const std::string& piece) {
    return on_text == nullptr || on_text(piece.data(), piece.size(), user_data) != 0;
  });
  if (!generated.ok()) throw Failure(generated.status().message());
  fill_result(*generated, result);
  result->stats.seed = request.sampling.seed;
  return 0;
}

int generate_checked(salvo_session* session, const salvo_generate_params* params,
                     salvo_result* result, auto&& prompt_ids, salvo_text_callback on_text,
                     void* user_data) {
  if (result == nullptr) {
    set_error("result is NULL");
    return -1;
  }
  *result = {};
  if (session == nullptr) {
    set_error("session is NULL");
    return -1;
  }
  const int rc = guarded(-1, [&] {
    const salvo_generate_params p = params ? *params : salvo_generate_default_params();
    const salvo::GenerateRequest request = make_request(p);
    return run_generation(session, prompt_ids(p), request, on_text, user_data, result);
  });
  if (rc != 0) salvo_result_free(result);  // a failure part way leaves nothing allocated
  return rc;
}

}  // namespace

extern "C" {

const char* salvo_version(void) { return "0.1.0"; }

const char* salvo_last_error(void) { return last_error.c_str(); }

salvo_model_params salvo_model_default_params(void) {
  return {.threads = 0,
          .device = nullptr,
          .draft_model = nullptr,
          .drafter = nullptr,
          .find_drafter = 1};
}

salvo_generate_params salvo_generate_default_params(void) {
  const salvo::SamplingParams s;
  return {.max_tokens = 256,
          .temperature = s.temperature,
          .top_k = s.top_k,
          .top_p = s.top_p,
          .min_p = s.min_p,
          .repeat_penalty = s.repeat_penalty,
          .presence_penalty = 0,
          .frequency_penalty = 0,
          .seed = -1,
          .spec = nullptr,
          .spec_budget = salvo::SpecOptions::kDrafterCaps,
          .spec_depth = salvo::SpecOptions::kDrafterCaps,
          .stop = nullptr,
          .n_stop = 0,
          .ignore_eos = 0,
          .raw = 0,
          .system = nullptr};
}

salvo_model* salvo_model_load(const char* model, const salvo_model_params* params) {
  return guarded<salvo_model*>(nullptr, [&]() -> salvo_model* {
    if (model == nullptr || *model == '\0')
      throw Failure("model: give a GGUF path or a model name");
    const salvo_model_params p = params ? *params : salvo_model_default_params();
    const std::string device = p.device ? p.device : "cpu";
    if (device != "cpu" && device != "cuda") {
      throw Failure("device: expected \"cpu\" or \"cuda\", got \"" + device + "\"");
    }
    if (p.threads < 0 || p.threads > 1024) {
      throw Failure("threads: expected 0..1024, got " + std::to_string(p.threads));
    }
    salvo::EngineOptions options{
        .threads = p.threads,
        .draft_model_path = p.draft_model ? salvo::cli::resolve_model(p.draft_model) : "",
        .placement = salvo::cli::placement_for(device),
        .drafter_dir = p.drafter ? p.drafter : "",
        .find_drafter = p.find_drafter != 0,
        .drafter_placement = salvo::cli::drafter_placement_for(device)};
    auto engine = value_or_throw(salvo::Engine::load(salvo::cli::resolve_model(model), options));
    auto out = std::make_unique<salvo_model>();
    out->engine = std::move(engine);
    auto tmpl = salvo::model_chat_template(*out->engine);
    if (tmpl.ok()) {
      out->chat_template.emplace(std::move(tmpl).value());
    } else {
      out->chat_template_error = tmpl.status().message();
    }
    if (out->engine->dflash() != nullptr) out->drafter_dir = out->engine->dflash()->dir();
    return out.release();
  });
}

void salvo_model_free(salvo_model* model) { delete model; }

const char* salvo_model_name(const salvo_model* model) {
  return model ? model->engine->model().config().name.c_str() : "";
}

const char* salvo_model_architecture(const salvo_model* model) {
  return model ? model->engine->model().config().arch.c_str() : "";
}

const char* salvo_model_drafter(const salvo_model* model) {
  return model ? model->drafter_dir.c_str() : "";
}

int32_t salvo_model_n_vocab(const salvo_model* model) {
  return model ? model->engine->tokenizer().n_vocab() : 0;
}

int32_t salvo_tokenize(const salvo_model* model, const char* text, size_t text_len,
                       int32_t add_special, int32_t parse_special, int32_t* ids, int32_t capacity) {
  return guarded<int32_t>(-1, [&]() -> int32_t {
    if (model == nullptr) throw Failure("model is NULL");
    if (text == nullptr && text_len > 0) throw Failure("text is NULL");
    if (capacity < 0 || (capacity > 0 && ids == nullptr)) {
      throw Failure("ids: capacity " + std::to_string(capacity) + " with a NULL array");
    }
    const auto tokens = model->engine->tokenizer().encode(
        std::string_view(text ? text : "", text_len), add_special != 0, parse_special != 0);
    if (tokens.size() > static_cast<size_t>(INT32_MAX)) throw Failure("text too long");
    std::copy_n(tokens.begin(), std::min<size_t>(tokens.size(), capacity), ids);
    return static_cast<int32_t>(tokens.size());
  });
}

char* salvo_detokenize(const salvo_model* model, const int32_t* ids, int32_t n_ids) {
  return guarded<char*>(nullptr, [&]() -> char* {
    if (model == nullptr) throw Failure("model is NULL");
    if (n_ids < 0 || (n_ids > 0 && ids == nullptr)) throw Failure("ids: NULL or a negative count");
    const std::span<const int32_t> span(ids, static_cast<size_t>(n_ids));
    if (salvo::Status st = model->engine->tokenizer().check_ids(span); !st.ok()) {
      throw Failure(st.message());
    }
    return copy_string(model->engine->tokenizer().decode(span));
  });
}

char* salvo_apply_chat_template(const salvo_model* model, const char* messages_json) {
  return guarded<char*>(nullptr, [&]() -> char* {
    if (model == nullptr) throw Failure("model is NULL");
    return copy_string(value_or_throw(salvo::chat_prompt_text(
        *model->engine, chat_template_of(*model), parse_messages(messages_json))));
  });
}

void salvo_string_free(char* text) { std::free(text); }

salvo_session* salvo_session_new(salvo_model* model, int32_t context_size) {
  return guarded<salvo_session*>(nullptr, [&]() -> salvo_session* {
    if (model == nullptr) throw Failure("model is NULL");
    if (context_size == 0) context_size = 4096;
    if (context_size < 16 || context_size > (1 << 20)) {
      throw Failure("context_size: expected 16..1048576 (or 0 for 4096), got " +
                    std::to_string(context_size));
    }
    salvo::Engine& e = *model->engine;
    auto* session =
        new salvo_session{model, salvo::Session(e.model(), e.tokenizer(), e.pool(), context_size)};
    session->session.set_draft_model(e.draft_model());
    session->session.set_dflash_model(e.dflash());
    return session;
  });
}

void salvo_session_free(salvo_session* session) { delete session; }

int salvo_generate(salvo_session* session, const char* prompt, const salvo_generate_params* params,
                   salvo_text_callback on_text, void* user_data, salvo_result* result) {
  return generate_checked(
      session, params, result,
      [&](const salvo_generate_params& p) {
        if (prompt == nullptr) throw Failure("prompt is NULL");
        const salvo::Engine& e = *session->model->engine;
        if (p.raw) {
          auto ids = e.tokenizer().encode(prompt, /*add_special=*/true, /*parse_special=*/true);
          if (ids.empty()) throw Failure("the prompt is empty");
          return ids;
        }
        nlohmann::ordered_json messages = nlohmann::ordered_json::array();
        if (p.system != nullptr) messages.push_back({{"role", "system"}, {"content", p.system}});
        messages.push_back({{"role", "user"}, {"content", prompt}});
        return value_or_throw(
            salvo::chat_prompt_tokens(e, chat_template_of(*session->model), messages));
      },
      on_text, user_data);
}

int salvo_chat(salvo_session* session, const char* messages_json,
               const salvo_generate_params* params, salvo_text_callback on_text, void* user_data,
               salvo_result* result) {
  return generate_checked(
      session, params, result,
      [&](const salvo_generate_params&) {
        return value_or_throw(salvo::chat_prompt_tokens(*session->model->engine,
                                                        chat_template_of(*session->model),
                                                        parse_messages(messages_json)));
      },
      on_text, user_data);
}

int salvo_generate_tokens(salvo_session* session, const int32_t* prompt, int32_t n_prompt,
                          const salvo_generate_params* params, salvo_text_callback on_text,
                          void* user_data, salvo_result* result) {
  return generate_checked(
      session, params, result,
      [&](const salvo_generate_params&) {
        if (n_prompt <= 0 || prompt == nullptr) throw Failure("the prompt is empty");
        return std::vector<int32_t>(prompt, prompt + n_prompt);
      },
      on_text, user_data);
}

void salvo_result_free(salvo_result* result) {
  if (result == nullptr) return;
  std::free(result->text);
  std::free(result->tokens);
  *result = {};
}

}  // extern "C"
