// The Node.js addon: salvo's C API (include/salvo/salvo.h) as JavaScript classes. Generation
// runs on libuv's worker pool and streams its text back through progress callbacks, so the
// event loop never waits on a forward pass. index.js wraps it; index.d.ts types it.
#include <napi.h>

#include <atomic>
#include <cmath>
#include <string>
#include <vector>

#include "salvo/salvo.h"

namespace {

Napi::Error salvo_error(Napi::Env env) { return Napi::Error::New(env, salvo_last_error()); }

// The strings and arrays a salvo_generate_params points into, kept with it.
struct GenerateParams {
  salvo_generate_params c = salvo_generate_default_params();
  std::string spec, system;
  std::vector<std::string> stops;
  std::vector<const char*> stop_ptrs;
};

double number_field(const Napi::Value& v, const std::string& key) {
  if (!v.IsNumber()) throw Napi::TypeError::New(v.Env(), key + " must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (!std::isfinite(d)) throw Napi::TypeError::New(v.Env(), key + " must be finite");
  return d;
}

int32_t int_field(const Napi::Value& v, const std::string& key) {
  const double d = number_field(v, key);
  if (d != std::floor(d) || d < INT32_MIN || d > INT32_MAX) {
    throw Napi::RangeError::New(v.Env(), key + " must be a 32-bit integer");
  }
  return static_cast<int32_t>(d);
}

std::string string_field(const Napi::Value& v, const std::string& key) {
  if (!v.IsString()) throw Napi::TypeError::New(v.Env(), key + " must be a string");
  return v.As<Napi::String>().Utf8Value();
}

// Fills `out` from a JS options object ({maxTokens, temperature, ...}); unknown keys are errors,
// so a misspelt option does not silently fall back to its default.
void read_generate_options(const Napi::Value& value, GenerateParams& out) {
  Napi::Env env = value.Env();
  if (value.IsUndefined() || value.IsNull()) return;
  if (!value.IsObject()) throw Napi::TypeError::New(env, "options must be an object");
  Napi::Object o = value.As<Napi::Object>();
  Napi::Array keys = o.GetPropertyNames();
  salvo_generate_params& p = out.c;
  for (uint32_t i = 0; i < keys.Length(); ++i) {
    const std::string key = keys.Get(i).ToString().Utf8Value();
    const Napi::Value v = o.Get(key);
    if (v.IsUndefined()) continue;
    if (key == "maxTokens")
      p.max_tokens = int_field(v, key);
    else if (key == "temperature")
      p.temperature = static_cast<float>(number_field(v, key));
    else if (key == "topK")
      p.top_k = int_field(v, key);
    else if (key == "topP")
      p.top_p = static_cast<float>(number_field(v, key));
    else if (key == "minP")
      p.min_p = static_cast<float>(number_field(v, key));
    else if (key == "repeatPenalty")
      p.repeat_penalty = static_cast<float>(number_field(v, key));
    else if (key == "presencePenalty")
      p.presence_penalty = static_cast<float>(number_field(v, key));
    else if (key == "frequencyPenalty")
      p.frequency_penalty = static_cast<float>(number_field(v, key));
    else if (key == "seed") {
      const double d = number_field(v, key);
      if (d != std::floor(d) || d < -1 || d > 9007199254740991.0) {
        throw Napi::RangeError::New(env, "seed must be an integer >= -1");
      }
      p.seed = static_cast<int64_t>(d);
    } else if (key == "spec")
      out.spec = string_field(v, key);
    else if (key == "specBudget")
      p.spec_budget = int_field(v, key);
    else if (key == "specDepth")
      p.spec_depth = int_field(v, key);
    else if (key == "ignoreEos")
      p.ignore_eos = v.ToBoolean().Value() ? 1 : 0;
    else if (key == "raw")
      p.raw = v.ToBoolean().Value() ? 1 : 0;
    else if (key == "system")
      out.system = string_field(v, key);
    else if (key == "stop") {
      if (v.IsString()) {
        out.stops.push_back(v.As<Napi::String>().Utf8Value());
      } else if (v.IsArray()) {
        Napi::Array a = v.As<Napi::Array>();
        for (uint32_t j = 0; j < a.Length(); ++j)
          out.stops.push_back(string_field(a.Get(j), "stop[]"));
      } else {
        throw Napi::TypeError::New(env, "stop must be a string or an array of strings");
      }
    } else {
      throw Napi::TypeError::New(env, "unknown generation option '" + key + "'");
    }
  }
  if (!out.spec.empty()) p.spec = out.spec.c_str();
  if (o.Has("system") && !o.Get("system").IsUndefined()) p.system = out.system.c_str();
  for (const std::string& s : out.stops) out.stop_ptrs.push_back(s.c_str());
  p.stop = out.stop_ptrs.data();
  p.n_stop = static_cast<int32_t>(out.stop_ptrs.size());
}

Napi::Object stats_object(Napi::Env env, const salvo_stats& s) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("promptTokens", s.prompt_tokens);
  o.Set("cachedPromptTokens", s.cached_prompt_tokens);
  o.Set("generatedTokens", s.generated_tokens);
  o.Set("forwardPasses", s.forward_passes);
  o.Set("ttftMs", s.ttft_ms);
  o.Set("prefillTokensPerSecond", s.prefill_tokens_per_second);
  o.Set("decodeTokensPerSecond", s.decode_tokens_per_second);
  o.Set("tokensPerPass", s.tokens_per_pass);
  o.Set("draftedNodes", s.drafted_nodes);
  o.Set("acceptedDraftTokens", s.accepted_draft_tokens);
  o.Set("draftMs", s.draft_ms);
  o.Set("seed", static_cast<double>(s.seed));
  o.Set("peakRssBytes", static_cast<double>(s.peak_rss_bytes));
  o.Set("peakDeviceBytes", static_cast<double>(s.peak_device_bytes));
  o.Set("finishReason", s.finish_reason);
  o.Set("drafter", s.drafter);
  return o;
}

class Model : public Napi::ObjectWrap<Model> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(
        env, "Model",
        {InstanceMethod("name", &Model::Name), InstanceMethod("architecture", &Model::Architecture),
         InstanceMethod("drafter", &Model::Drafter), InstanceMethod("nVocab", &Model::NVocab),
         InstanceMethod("tokenize", &Model::Tokenize),
         InstanceMethod("detokenize", &Model::Detokenize),
         InstanceMethod("applyChatTemplate", &Model::ApplyChatTemplate),
         InstanceMethod("close", &Model::Close)});
  }

  // new Model(path, {threads, device, draftModel, drafter, findDrafter})
  explicit Model(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Model>(info) {
    Napi::Env env = info.Env();
    const std::string path = string_field(info[0], "model");
    salvo_model_params p = salvo_model_default_params();
    std::string device, draft_model, drafter;
    if (info.Length() > 1 && info[1].IsObject()) {
      Napi::Object o = info[1].As<Napi::Object>();
      if (o.Has("threads") && !o.Get("threads").IsUndefined())
        p.threads = int_field(o.Get("threads"), "threads");
      if (o.Has("device") && !o.Get("device").IsUndefined())
        device = string_field(o.Get("device"), "device");
      if (o.Has("draftModel") && !o.Get("draftModel").IsUndefined())
        draft_model = string_field(o.Get("draftModel"), "draftModel");
      if (o.Has("drafter") && !o.Get("drafter").IsUndefined())
        drafter = string_field(o.Get("drafter"), "drafter");
      if (o.Has("findDrafter")) p.find_drafter = o.Get("findDrafter").ToBoolean().Value() ? 1 : 0;
    }
    if (!device.empty()) p.device = device.c_str();
    if (!draft_model.empty()) p.draft_model = draft_model.c_str();
    if (!drafter.empty()) p.drafter = drafter.c_str();
    model_ = salvo_model_load(path.c_str(), &p);
    if (model_ == nullptr) throw salvo_error(env);
  }

  ~Model() override { salvo_model_free(model_); }

  salvo_model* Checked(Napi::Env env) const {
    if (model_ == nullptr) throw Napi::Error::New(env, "the model is closed");
    return model_;
  }
  std::atomic<int> open_sessions{0};

 private:
  Napi::Value Name(const Napi::CallbackInfo& info) {
    return Napi::String::New(info.Env(), salvo_model_name(Checked(info.Env())));
  }
  Napi::Value Architecture(const Napi::CallbackInfo& info) {
    return Napi::String::New(info.Env(), salvo_model_architecture(Checked(info.Env())));
  }
  Napi::Value Drafter(const Napi::CallbackInfo& info) {
    return Napi::String::New(info.Env(), salvo_model_drafter(Checked(info.Env())));
  }
  Napi::Value NVocab(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), salvo_model_n_vocab(Checked(info.Env())));
  }

  // tokenize(text, addSpecial = true, parseSpecial = false) -> number[]
  Napi::Value Tokenize(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const std::string text = string_field(info[0], "text");
    const int add_special = info.Length() > 1 ? info[1].ToBoolean().Value() : 1;
    const int parse_special = info.Length() > 2 ? info[2].ToBoolean().Value() : 0;
    int32_t n = salvo_tokenize(Checked(env), text.data(), text.size(), add_special, parse_special,
                               nullptr, 0);
    if (n < 0) throw salvo_error(env);
    std::vector<int32_t> ids(n);
    n = salvo_tokenize(model_, text.data(), text.size(), add_special, parse_special, ids.data(), n);
    if (n < 0) throw salvo_error(env);
    Napi::Array out = Napi::Array::New(env, n);
    for (int32_t i = 0; i < n; ++i) out.Set(i, ids[i]);
    return out;
  }

  Napi::Value Detokenize(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsArray()) throw Napi::TypeError::New(env, "ids must be an array of numbers");
    Napi::Array a = info[0].As<Napi::Array>();
    std::vector<int32_t> ids(a.Length());
    for (uint32_t i = 0; i < a.Length(); ++i) ids[i] = int_field(a.Get(i), "ids[]");
    char* text = salvo_detokenize(Checked(env), ids.data(), static_cast<int32_t>(ids.size()));
    if (text == nullptr) throw salvo_error(env);
    Napi::String out = Napi::String::New(env, text);
    salvo_string_free(text);
    return out;
  }

  // applyChatTemplate(messagesJson)
  Napi::Value ApplyChatTemplate(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const std::string messages = string_field(info[0], "messages");
    char* text = salvo_apply_chat_template(Checked(env), messages.c_str());
    if (text == nullptr) throw salvo_error(env);
    Napi::String out = Napi::String::New(env, text);
    salvo_string_free(text);
    return out;
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    if (open_sessions.load() > 0) {
      throw Napi::Error::New(info.Env(), "close the model's sessions first");
    }
    salvo_model_free(model_);
    model_ = nullptr;
    return info.Env().Undefined();
  }

  salvo_model* model_ = nullptr;
};

// What a generation runs on: a text prompt, a chat (messages JSON) or token ids.
enum class PromptKind { kText, kChat, kTokens };

class Session;

class GenerateWorker : public Napi::AsyncProgressQueueWorker<char> {
 public:
  GenerateWorker(Napi::Env env, Session* session, PromptKind kind, std::string prompt,
                 std::vector<int32_t> ids, Napi::Function on_text);
  ~GenerateWorker() override;
  Napi::Promise promise() { return deferred_.Promise(); }

  void Execute(const ExecutionProgress& progress) override {
    progress_ = &progress;
    auto forward = [](const char* piece, size_t length, void* user) -> int {
      auto* self = static_cast<GenerateWorker*>(user);
      if (self->has_callback_) self->progress_->Send(piece, length);
      return self->cancelled_.load() ? 0 : 1;
    };
    int rc = -1;
    switch (kind_) {
      case PromptKind::kText:
        rc = salvo_generate(session_c_, prompt_.c_str(), &params.c, forward, this, &result_);
        break;
      case PromptKind::kChat:
        rc = salvo_chat(session_c_, prompt_.c_str(), &params.c, forward, this, &result_);
        break;
      case PromptKind::kTokens:
        rc = salvo_generate_tokens(session_c_, ids_.data(), static_cast<int32_t>(ids_.size()),
                                   &params.c, forward, this, &result_);
        break;
    }
    if (rc != 0) SetError(salvo_last_error());
  }

  void OnProgress(const char* data, size_t count) override {
    if (!has_callback_ || cancelled_.load()) return;
    Napi::Env env = Env();
    try {
      Napi::Value ret = Callback().Call({Napi::String::New(env, data, count)});
      if (ret.IsBoolean() && !ret.As<Napi::Boolean>().Value()) cancelled_ = true;
    } catch (const Napi::Error& e) {  // onText threw: stop, and the promise rejects with it
      callback_error_ = Napi::Persistent(e.Value());
      cancelled_ = true;
    }
  }

  void OnOK() override;
  void OnError(const Napi::Error& e) override;

  GenerateParams params;

 private:
  Napi::Promise::Deferred deferred_;
  Session* session_;
  salvo_session* session_c_;
  PromptKind kind_;
  std::string prompt_;
  std::vector<int32_t> ids_;
  bool has_callback_;
  std::atomic<bool> cancelled_{false};
  const ExecutionProgress* progress_ = nullptr;
  salvo_result result_{};
  Napi::ObjectReference callback_error_;
};

class Session : public Napi::ObjectWrap<Session> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(
        env, "Session",
        {InstanceMethod("generate", &Session::Generate), InstanceMethod("close", &Session::Close)});
  }

  // new Session(model, contextSize = 4096)
  explicit Session(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Session>(info) {
    Napi::Env env = info.Env();
    if (!info[0].IsObject()) throw Napi::TypeError::New(env, "Session needs a Model");
    model_ = Napi::ObjectWrap<Model>::Unwrap(info[0].As<Napi::Object>());
    const int32_t context =
        info.Length() > 1 && !info[1].IsUndefined() ? int_field(info[1], "contextSize") : 0;
    session_ = salvo_session_new(model_->Checked(env), context);
    if (session_ == nullptr) throw salvo_error(env);
    model_ref_ = Napi::Persistent(info[0].As<Napi::Object>());  // the model outlives us
    ++model_->open_sessions;
  }

  ~Session() override { Free(); }

  bool busy = false;

 private:
  void Free() {
    if (session_ == nullptr) return;
    salvo_session_free(session_);
    session_ = nullptr;
    --model_->open_sessions;
    model_ref_.Reset();
  }

  // generate(kind, prompt, options, onText) -> Promise<{text, tokens, stats}>; kind is
  // "text", "chat" (prompt: messages JSON) or "tokens" (prompt: number[]).
  Napi::Value Generate(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (session_ == nullptr) throw Napi::Error::New(env, "the session is closed");
    if (busy) throw Napi::Error::New(env, "the session is already generating");
    const std::string kind_name = string_field(info[0], "kind");
    PromptKind kind;
    std::string prompt;
    std::vector<int32_t> ids;
    if (kind_name == "text" || kind_name == "chat") {
      kind = kind_name == "text" ? PromptKind::kText : PromptKind::kChat;
      prompt = string_field(info[1], "prompt");
    } else if (kind_name == "tokens") {
      kind = PromptKind::kTokens;
      if (!info[1].IsArray()) throw Napi::TypeError::New(env, "prompt ids must be an array");
      Napi::Array a = info[1].As<Napi::Array>();
      for (uint32_t i = 0; i < a.Length(); ++i) ids.push_back(int_field(a.Get(i), "prompt[]"));
    } else {
      throw Napi::TypeError::New(env, "kind must be text, chat or tokens");
    }
    Napi::Function on_text = info[3].IsFunction() ? info[3].As<Napi::Function>() : Napi::Function();
    if (!info[3].IsUndefined() && !info[3].IsNull() && !info[3].IsFunction()) {
      throw Napi::TypeError::New(env, "onText must be a function");
    }
    auto* worker = new GenerateWorker(env, this, kind, std::move(prompt), std::move(ids), on_text);
    try {
      read_generate_options(info[2], worker->params);
    } catch (...) {
      delete worker;
      throw;
    }
    busy = true;
    Ref();  // alive until the worker is done
    Napi::Promise promise = worker->promise();
    worker->Queue();
    return promise;
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    if (busy) throw Napi::Error::New(info.Env(), "the session is generating");
    Free();
    return info.Env().Undefined();
  }

  Model* model_ = nullptr;
  salvo_session* session_ = nullptr;
  Napi::ObjectReference model_ref_;
  friend class GenerateWorker;
};

GenerateWorker::GenerateWorker(Napi::Env env, Session* session, PromptKind kind, std::string prompt,
                               std::vector<int32_t> ids, Napi::Function on_text)
    : Napi::AsyncProgressQueueWorker<char>(
          on_text.IsEmpty() ? Napi::Function::New(env, [](const Napi::CallbackInfo&) {}) : on_text),
      deferred_(Napi::Promise::Deferred::New(env)),
      session_(session),
      session_c_(session->session_),
      kind_(kind),
      prompt_(std::move(prompt)),
      ids_(std::move(ids)),
      has_callback_(!on_text.IsEmpty()) {}

GenerateWorker::~GenerateWorker() { salvo_result_free(&result_); }

void GenerateWorker::OnOK() {
  Napi::Env env = Env();
  session_->busy = false;
  session_->Unref();
  if (!callback_error_.IsEmpty()) {
    deferred_.Reject(callback_error_.Value());
    return;
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("text", Napi::String::New(env, result_.text, result_.text_len));
  Napi::Array tokens = Napi::Array::New(env, result_.n_tokens);
  for (int32_t i = 0; i < result_.n_tokens; ++i) tokens.Set(i, result_.tokens[i]);
  out.Set("tokens", tokens);
  out.Set("stats", stats_object(env, result_.stats));
  deferred_.Resolve(out);
}

void GenerateWorker::OnError(const Napi::Error& e) {
  session_->busy = false;
  session_->Unref();
  deferred_.Reject(e.Value());
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("Model", Model::Define(env));
  exports.Set("Session", Session::Define(env));
  exports.Set("version", Napi::String::New(env, salvo_version()));
  return exports;
}

}  // namespace

NODE_API_MODULE(salvo, Init)
