#include "server/http_server.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>

#include "engine/chat_prompt.h"
#include "engine/engine.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/scheduler.h"

namespace salvo::server {
namespace {

std::string dump(const Json& value) {
  // Text from a model can hold invalid UTF-8 (a token boundary inside a character at the very
  // end); it is replaced rather than failing the response.
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// The one place errors become HTTP responses.
void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_content(dump(error_body(error)), "application/json");
}

void send_json(httplib::Response& res, const Json& body) {
  res.status = 200;
  res.set_content(dump(body), "application/json");
}

std::string sse(const Json& value) { return "data: " + dump(value) + "\n\n"; }

bool write(httplib::DataSink& sink, const std::string& data) {
  return sink.write(data.data(), data.size());
}

ApiError status_error(int status, const std::string& message, const std::string& type,
                      const std::string& code) {
  return ApiError{status, message, type, "", code};
}

// The error of a job that failed (job.error() is set).
ApiError job_error(const Job& job) {
  const int status = job.error_http_status();
  return status_error(status, job.error()->message(),
                      status >= 500 ? "server_error" : "invalid_request_error", "");
}

// Counts the requests whose responses are still being produced, so shutdown can wait for them.
class InFlight {
 public:
  explicit InFlight(std::atomic<int>& n) : n_(n) { ++n_; }
  ~InFlight() { --n_; }

 private:
  std::atomic<int>& n_;
};

}  // namespace

struct HttpServer::Impl {
  ServerOptions options;
  httplib::Server http;
  Metrics metrics;
  std::atomic<bool> loaded{false}, stopping{false};
  std::unique_ptr<Engine> engine;
  std::optional<ChatTemplate> chat_template;
  Status chat_template_status;
  std::unique_ptr<Scheduler> scheduler;
  std::atomic<int> in_flight{0};
  std::atomic<uint64_t> next_id{1};
  std::mutex stop_mu;
  bool stopped = false;
  Status load_status;

  void routes();
  bool parse_body(const httplib::Request& req, httplib::Response& res, Json& body);
  void generate(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  // The non-streaming response of a job that is still generating (see generate()).
  void respond_when_done(httplib::Response& res, std::shared_ptr<Job> job,
                         const ResponseHeader& header, Endpoint endpoint);
  void tokenize(const httplib::Request& req, httplib::Response& res);
  void detokenize(const httplib::Request& req, httplib::Response& res);
  bool check_ready(httplib::Response& res);
  void load();
};

bool HttpServer::Impl::check_ready(httplib::Response& res) {
  if (stopping) {
    send_error(res, status_error(503, "the server is shutting down", "unavailable_error",
                                 "shutting_down"));
    return false;
  }
  if (!loaded) {
    send_error(res, status_error(503, "the model is loading", "unavailable_error", "loading"));
    return false;
  }
  return true;
}

bool HttpServer::Impl::parse_body(const httplib::Request& req, httplib::Response& res, Json& body) {
  try {
    body = Json::parse(req.body);
  } catch (const Json::parse_error& e) {
    // nlohmann's messages name the byte offset and the problem (e.g. ill-formed UTF-8).
    send_error(res, status_error(400, std::string("malformed JSON body: ") + e.what(),
                                 "invalid_request_error", "invalid_json"));
    return false;
  }
  return true;
}

void HttpServer::Impl::generate(const httplib::Request& req, httplib::Response& res,
                                Endpoint endpoint) {
  InFlight guard(in_flight);
  if (!check_ready(res)) return;
  Json body;
  if (!parse_body(req, res, body)) return;
  ParsedRequest parsed;
  if (auto e = parse_request(body, endpoint, options.context_size, parsed)) {
    return send_error(res, *e);
  }
  if (!parsed.model.empty() && parsed.model != options.model_id) {
    return send_error(
        res, ApiError{404,
                      "the model '" + parsed.model + "' does not exist; this server serves '" +
                          options.model_id + "'",
                      "invalid_request_error", "model", "model_not_found"});
  }
  std::vector<int32_t>& prompt = parsed.generate.prompt;
  if (endpoint == Endpoint::kChat) {
    if (!chat_template) {
      return send_error(res, ApiError{400, chat_template_status.message(), "invalid_request_error",
                                      "messages", "no_chat_template"});
    }
    auto ids = chat_prompt_tokens(*engine, *chat_template, parsed.messages);
    if (!ids.ok()) {
      return send_error(res, ApiError{400, ids.status().message(), "invalid_request_error",
                                      "messages", "invalid_value"});
    }
    prompt = std::move(ids).value();
  } else if (!parsed.prompt_tokens.empty()) {
    if (Status st = engine->tokenizer().check_ids(parsed.prompt_tokens); !st.ok()) {
      return send_error(
          res, ApiError{400, st.message(), "invalid_request_error", "prompt", "invalid_value"});
    }
    prompt = parsed.prompt_tokens;
  } else {
    prompt = engine->tokenizer().encode(parsed.prompt_text, /*add_special=*/true,
                                        /*parse_special=*/true);
  }
  if (static_cast<int>(prompt.size()) >= options.context_size) {
    return send_error(
        res, ApiError{400,
                      "the prompt has " + std::to_string(prompt.size()) +
                          " tokens; the context size is " + std::to_string(options.context_size) +
                          " (start the server with a larger --ctx)",
                      "invalid_request_error", endpoint == Endpoint::kChat ? "messages" : "prompt",
                      "context_length_exceeded"});
  }
  if (!parsed.max_tokens_given) {
    parsed.generate.max_tokens = options.context_size - static_cast<int>(prompt.size());
  }

  parsed.generate.spec = options.spec;
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(options.timeout_s * 1000));
  auto job = std::make_shared<Job>(std::move(parsed.generate), deadline);
  switch (scheduler->submit(job)) {
    case SubmitResult::kAccepted:
      break;
    case SubmitResult::kQueueFull:
      return send_error(res, status_error(429,
                                          "every slot is busy and the wait queue is full; "
                                          "retry later",
                                          "rate_limit_error", "rate_limit_exceeded"));
    case SubmitResult::kShuttingDown:
      return send_error(res, status_error(503, "the server is shutting down", "unavailable_error",
                                          "shutting_down"));
  }

  ResponseHeader header;
  header.id = (endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(next_id++);
  header.created = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  header.model = options.model_id;

  if (!parsed.stream) {
    // A request that finishes quickly, or fails before it starts generating, gets a plain
    // response with its own status. One that runs longer answers 200 once it has started and
    // keeps probing the connection: the body is the JSON object after leading spaces (valid
    // JSON), one space every 250 ms while the job runs, so a client that went away makes a
    // write fail and its generation is cancelled, as with streaming. cpp-httplib 0.11 gives a
    // plain handler no other way to notice a closed socket. Should a forward pass fail after
    // that, the error object arrives in the body of the 200.
    std::string ignored;
    bool finished = false;
    const auto plain_until = Clock::now() + std::chrono::milliseconds(250);
    while (!(finished = job->wait(ignored, std::chrono::milliseconds(50))) &&
           !(job->started() && Clock::now() >= plain_until)) {
      ignored.clear();
    }
    if (!finished) return respond_when_done(res, job, header, endpoint);
    if (job->error()) return send_error(res, job_error(*job));
    return send_json(res, completion_response(endpoint, header, job->result()));
  }

  // Streaming: the provider runs on this connection's thread after the headers are sent.
  // A client that goes away makes a write (or the writability check) fail; the job is then
  // cancelled and its slot freed before the scheduler's next pass.
  struct StreamState {
    bool first = true;
  };
  auto state = std::make_shared<StreamState>();
  const bool include_usage = parsed.include_usage;
  res.set_header("Cache-Control", "no-cache");
  auto* in_flight_counter = &in_flight;
  ++*in_flight_counter;  // until the releaser runs: the stream outlives this handler
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, state, header, endpoint, include_usage](size_t, httplib::DataSink& sink) {
        std::string text;
        const bool finished = job->wait(text, std::chrono::milliseconds(50));
        if (!sink.is_writable()) {
          job->cancel();
          return false;
        }
        if (!text.empty()) {
          if (!write(sink, sse(stream_chunk(endpoint, header, text, state->first, nullptr)))) {
            job->cancel();
            return false;
          }
          state->first = false;
        }
        if (!finished) return true;
        if (job->error()) {
          write(sink, sse(error_body(job_error(*job))));
        } else {
          const GenerationResult& result = job->result();
          write(sink,
                sse(stream_chunk(endpoint, header, "", state->first, &result.stats.finish_reason)));
          if (include_usage) write(sink, sse(usage_chunk(endpoint, header, result.stats)));
        }
        write(sink, "data: [DONE]\n\n");
        sink.done();
        return true;
      },
      [job, in_flight_counter](bool success) {
        if (!success) job->cancel();
        --*in_flight_counter;
      });
}

void HttpServer::Impl::respond_when_done(httplib::Response& res, std::shared_ptr<Job> job,
                                         const ResponseHeader& header, Endpoint endpoint) {
  auto* in_flight_counter = &in_flight;
  ++*in_flight_counter;  // until the releaser runs: the response outlives the handler
  res.set_chunked_content_provider(
      "application/json",
      [job, header, endpoint](size_t, httplib::DataSink& sink) {
        std::string ignored;
        if (!job->wait(ignored, std::chrono::milliseconds(250))) {
          if (!sink.is_writable() || !write(sink, " ")) {
            job->cancel();
            return false;
          }
          return true;
        }
        if (job->error()) {
          write(sink, dump(error_body(job_error(*job))));
        } else {
          write(sink, dump(completion_response(endpoint, header, job->result())));
        }
        sink.done();
        return true;
      },
      [job, in_flight_counter](bool success) {
        if (!success) job->cancel();
        --*in_flight_counter;
      });
}

void HttpServer::Impl::tokenize(const httplib::Request& req, httplib::Response& res) {
  InFlight guard(in_flight);
  if (!check_ready(res)) return;
  Json body;
  if (!parse_body(req, res, body)) return;
  if (!body.is_object() || !body.contains("content") || !body["content"].is_string()) {
    return send_error(res, ApiError{400, "'content' must be a string", "invalid_request_error",
                                    "content", "invalid_type"});
  }
  bool add_special = true, parse_special = true;
  for (auto [key, flag] :
       {std::pair{"add_special", &add_special}, std::pair{"parse_special", &parse_special}}) {
    if (body.contains(key)) {
      if (!body[key].is_boolean()) {
        return send_error(res, ApiError{400, std::string("'") + key + "' must be a boolean",
                                        "invalid_request_error", key, "invalid_type"});
      }
      *flag = body[key].get<bool>();
    }
  }
  send_json(res, {{"tokens", engine->tokenizer().encode(body["content"].get<std::string>(),
                                                        add_special, parse_special)}});
}

void HttpServer::Impl::detokenize(const httplib::Request& req, httplib::Response& res) {
  InFlight guard(in_flight);
  if (!check_ready(res)) return;
  Json body;
  if (!parse_body(req, res, body)) return;
  const int32_t n_vocab = engine->tokenizer().n_vocab();
  if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array()) {
    return send_error(res, ApiError{400, "'tokens' must be an array of token ids",
                                    "invalid_request_error", "tokens", "invalid_type"});
  }
  std::vector<int32_t> ids;
  for (const Json& t : body["tokens"]) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab) {
      return send_error(res, ApiError{400,
                                      "'tokens' holds " + t.dump() + ", not a token id in [0, " +
                                          std::to_string(n_vocab) + ")",
                                      "invalid_request_error", "tokens", "invalid_value"});
    }
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  send_json(res, {{"content", engine->tokenizer().decode(ids, /*render_special=*/true)}});
}

void HttpServer::Impl::routes() {
  http.set_payload_max_length(options.max_body_bytes);
  http.set_keep_alive_timeout(5);
  // Every waiting or generating request holds a connection thread, plus a few for the cheap
  // endpoints, so that /health and /metrics answer while every slot is busy.
  const size_t n_threads = options.parallel + options.max_queue + 8;
  http.new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };

  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (options.api_key.empty() || req.path == "/health")
      return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") != "Bearer " + options.api_key) {
      send_error(res,
                 status_error(401, "missing or wrong API key (send 'Authorization: Bearer <key>')",
                              "invalid_request_error", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;  // a handler's own error
    switch (res.status) {
      case 404:
        send_error(res, status_error(404, "no such endpoint: " + req.method + " " + req.path,
                                     "invalid_request_error", "not_found"));
        break;
      case 413:
        send_error(res, status_error(413,
                                     "the request body is larger than the limit of " +
                                         std::to_string(options.max_body_bytes) + " bytes",
                                     "invalid_request_error", "request_too_large"));
        break;
      default:
        send_error(res,
                   status_error(res.status, "the HTTP request could not be processed",
                                res.status >= 500 ? "server_error" : "invalid_request_error", ""));
    }
  });
  http.set_logger([this](const httplib::Request&, const httplib::Response& res) {
    metrics.record_response(res.status);
  });

  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (!loaded) {
      return send_error(res,
                        status_error(503, "the model is loading", "unavailable_error", "loading"));
    }
    if (stopping) {
      // Load balancers stop sending requests here while the in-flight ones finish.
      return send_error(res, status_error(503, "the server is shutting down", "unavailable_error",
                                          "shutting_down"));
    }
    send_json(res, {{"status", "ok"}});
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.prometheus(), "text/plain; version=0.0.4");
  });
  auto model_object = [this] {
    return Json{
        {"id", options.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "salvo"}};
  };
  http.Get("/v1/models", [model_object](const httplib::Request&, httplib::Response& res) {
    send_json(res, {{"object", "list"}, {"data", Json::array({model_object()})}});
  });
  http.Get(R"(/v1/models/(.+))", [this, model_object](const httplib::Request& req,
                                                      httplib::Response& res) {
    if (req.matches[1] != options.model_id) {
      return send_error(
          res, ApiError{404, "the model '" + std::string(req.matches[1]) + "' does not exist",
                        "invalid_request_error", "model", "model_not_found"});
    }
    send_json(res, model_object());
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, Endpoint::kChat);
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    generate(req, res, Endpoint::kCompletion);
  });
  http.Post("/tokenize",
            [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
  http.Post("/detokenize",
            [this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); });

  // A known path with the wrong method gets 405 (httplib alone would say 404).
  auto wrong_method = [](const char* allowed) {
    return [allowed](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allowed);
      send_error(res,
                 status_error(
                     405, req.method + " is not allowed on " + req.path + " (use " + allowed + ")",
                     "invalid_request_error", "method_not_allowed"));
    };
  };
  for (const char* path : {"/health", "/metrics", "/v1/models"}) {
    http.Post(path, wrong_method("GET"));
    http.Put(path, wrong_method("GET"));
    http.Delete(path, wrong_method("GET"));
    http.Patch(path, wrong_method("GET"));
  }
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize"}) {
    http.Get(path, wrong_method("POST"));
    http.Put(path, wrong_method("POST"));
    http.Delete(path, wrong_method("POST"));
    http.Patch(path, wrong_method("POST"));
  }
}

void HttpServer::Impl::load() {
  auto loaded_engine = Engine::load(
      options.model_path,
      {.threads = options.threads,
       .draft_model_path = options.draft_model_path,
       .placement = options.placement,
       .drafter_dir = options.drafter_dir,
       // Only the modes that draft with it load one: its weights are tens of MB held for nothing.
       .find_drafter = uses_found_drafter(options.spec.mode, !options.draft_model_path.empty()),
       .drafter_placement = options.drafter_placement});
  if (!loaded_engine.ok()) {
    load_status = loaded_engine.status();
    return;
  }
  engine = std::move(loaded_engine).value();
  metrics.set_speculation(
      spec_mode_name(options.spec.mode),
      drafter_description(options.spec.mode, engine->dflash(), engine->draft_model()));
  auto parsed = model_chat_template(*engine);
  if (parsed.ok()) {
    chat_template.emplace(std::move(parsed).value());
  } else {
    // Completions still work; chat requests get this message.
    chat_template_status = parsed.status();
  }
  // Published under stop_mu: a stop() during loading either sees the scheduler or none at all.
  std::lock_guard lock(stop_mu);
  if (stopped) return;
  scheduler = std::make_unique<Scheduler>(*engine,
                                          SchedulerOptions{.parallel = options.parallel,
                                                           .context_size = options.context_size,
                                                           .max_queue = options.max_queue},
                                          metrics);
  loaded = true;
}

HttpServer::HttpServer(ServerOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->routes();
}

HttpServer::~HttpServer() { stop(); }

Expected<int> HttpServer::bind() {
  const ServerOptions& o = impl_->options;
  int port = o.port;
  if (port == 0) {
    port = impl_->http.bind_to_any_port(o.host);
    if (port < 0) return Status::error("cannot listen on " + o.host + " (any port)");
  } else if (!impl_->http.bind_to_port(o.host, port)) {
    return Status::error("cannot listen on " + o.host + ":" + std::to_string(port) +
                         " (in use, or not an address of this machine)");
  }
  return port;
}

Status HttpServer::serve() {
  std::thread loader([this] {
    impl_->load();
    if (!impl_->load_status.ok()) {
      // stop() before listen_after_bind() started would be lost.
      while (!impl_->http.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      impl_->http.stop();
    } else {
      std::fprintf(stderr, "salvo: model loaded, ready\n");
    }
  });
  impl_->http.listen_after_bind();
  loader.join();
  return impl_->load_status;
}

void HttpServer::stop() {
  Impl& s = *impl_;
  std::lock_guard lock(s.stop_mu);
  if (s.stopped) return;
  s.stopped = true;
  s.stopping = true;
  if (s.scheduler) s.scheduler->shutdown(std::chrono::milliseconds(s.options.shutdown_grace_ms));
  // Every job has finished now; give the connection threads a moment to write the last bytes.
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (s.in_flight > 0 && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  while (!s.http.is_running() && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  s.http.stop();
}

}  // namespace salvo::server
