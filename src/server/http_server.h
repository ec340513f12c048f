// The HTTP front of `salvo serve`: OpenAI-compatible routes on cpp-httplib, one Scheduler
// behind them. Every error leaves through one function as OpenAI-shaped JSON with its status.
#pragma once

#include <memory>
#include <string>

#include "engine/engine.h"
#include "speculative/drafter.h"
#include "util/status.h"

namespace salvo::server {

struct ServerOptions {
  std::string model_id;                // the name /v1/models lists and requests must use
  std::string model_path;              // GGUF file
  std::string draft_model_path;        // empty = none; else drafts under --spec draft and auto
  std::string drafter_dir;             // DFlash drafter; empty = drafters/<model>/ when one exists
  ModelPlacement placement;            // empty = the CPU (the front end picks the backend)
  DrafterPlacement drafter_placement;  // the DFlash drafter beside a placed model
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 = any free port
  int parallel = 4;
  int context_size = 4096;  // per slot
  int max_queue = 64;
  std::string api_key;     // empty = no authentication
  int threads = 0;         // 0 = all cores
  double timeout_s = 600;  // per request, from its arrival
  SpecOptions spec;        // for every request
  size_t max_body_bytes = 8u << 20;
  int shutdown_grace_ms = 5000;  // in-flight requests may finish for this long after a signal
};

class HttpServer {
 public:
  explicit HttpServer(ServerOptions options);
  ~HttpServer();

  // Binds the listening socket; returns the port (useful with port 0).
  Expected<int> bind();
  // Loads the model in the background (GET /health answers 503 until it is ready) and serves
  // until stop(). Returns the load error, if loading failed.
  Status serve();
  // Graceful: refuses new generations, lets in-flight ones finish within the grace period
  // (then cancels them), waits for their responses to be written and closes the listener.
  // Safe to call from any thread and more than once.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace salvo::server
