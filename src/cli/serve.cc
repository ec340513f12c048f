// `salvo serve`: the OpenAI-compatible HTTP server (src/server). SIGINT/SIGTERM stop it
// gracefully: no new requests, in-flight ones finish (or are cancelled after a grace period),
// the listener closes and the process exits 0.
#include <pthread.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "cli/device.h"
#include "server/http_server.h"

namespace salvo::cli {
namespace {

struct ServeOptions {
  std::string model;
  std::string draft_model;
  std::string spec = "auto";
  std::string device = "cpu";
  server::ServerOptions server;
};

// The id clients name the model by: the short name, or a GGUF path's file name without .gguf.
std::string model_id(const std::string& name_or_path) {
  const std::filesystem::path path(name_or_path);
  return path.extension() == ".gguf" ? path.stem().string() : path.filename().string();
}

void serve(ServeOptions& o) {
  o.server.model_id = model_id(o.model);
  o.server.model_path = resolve_model(o.model);
  if (!o.draft_model.empty()) {
    o.server.draft_model_path = resolve_model(o.draft_model);
  }
  auto spec_mode = parse_spec_mode(o.spec);
  if (!spec_mode.ok()) throw CliError("--spec: " + spec_mode.status().message());
  o.server.spec.mode = *spec_mode;
  o.server.placement = placement_for(o.device);
  o.server.drafter_placement = drafter_placement_for(o.device);
  if (Status st = o.server.spec.validate(); !st.ok()) throw CliError(st.message());

  // Signals are taken by one thread with sigwait; every other thread (created after this)
  // inherits the blocked mask, so no handler runs at an arbitrary point of the server.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client gone mid-write is an error return, not a kill

  server::HttpServer http(o.server);
  auto port = http.bind();
  if (!port.ok()) throw CliError(port.status().message());
  std::fprintf(stderr, "salvo: listening on http://%s:%d (model %s, %d slots of %d tokens)\n",
               o.server.host.c_str(), *port, o.server.model_id.c_str(), o.server.parallel,
               o.server.context_size);

  bool signalled = false;
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig == SIGINT || sig == SIGTERM) {
      signalled = true;
      std::fprintf(stderr, "salvo: %s, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    http.stop();
  });
  const Status served = http.serve();
  if (!signalled) pthread_kill(signal_thread.native_handle(), SIGTERM);  // wake the waiter
  signal_thread.join();
  if (!served.ok()) throw CliError(served.message());
  std::fprintf(stderr, "salvo: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  server::ServerOptions& s = o->server;
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server");
  cmd->add_option("--model", o->model, "model name (e.g. smollm2-135m) or GGUF path")->required();
  cmd->add_option("--draft-model", o->draft_model, "smaller model with the same vocabulary");
  cmd->add_option("--drafter", o->server.drafter_dir,
                  "DFlash drafter directory (default: drafters/<model>/ when one exists and "
                  "no --draft-model is given)");
  add_device_option(cmd, o->device);
  cmd->add_option("--host", s.host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", s.port, "port (0 = any free port, printed at start)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option("--parallel,--np", s.parallel, "requests generated at once (slots)")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("-c,--ctx", s.context_size, "context size per slot, in tokens")
      ->check(CLI::Range(16, 1 << 20))
      ->capture_default_str();
  cmd->add_option("--queue", s.max_queue, "requests that may wait for a slot (beyond: 429)")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  cmd->add_option("--api-key", s.api_key, "require 'Authorization: Bearer KEY'");
  cmd->add_option("-t,--threads", s.threads, "threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--timeout", s.timeout_s, "seconds a request may take, queueing included")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  // The testing drafters (random, wrong, deep) are accepted but not advertised.
  cmd->add_option("--spec", o->spec,
                  "speculative decoding: auto (drafts while it measurably pays: the draft model if "
                  "one is given, else n-gram), draft, ngram, none")
      ->capture_default_str();
  cmd->add_option("--spec-budget", s.spec.budget,
                  "draft tree nodes per forward pass (default: the drafter's, 7 for a "
                  "DFlash drafter, else 16)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--spec-vocab", s.spec.vocab, kSpecVocabHelp)->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--spec-depth", s.spec.depth,
                  "deepest draft token below the last one (default: the drafter's, its block "
                  "size - 1 for a DFlash drafter, else 8)")
      ->check(CLI::Range(0, 256));
  cmd->callback([o] { serve(*o); });
}

}  // namespace salvo::cli
