// salvo-serve: the `salvo serve` command as a program of its own, which salvo execs
// (cli/serve_exec.cc), so that only the server maps cpp-httplib and the OpenSSL it links.
#include <cstdio>
#include <exception>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"salvo serve — OpenAI-compatible HTTP server"};
  app.require_subcommand(1);
  salvo::cli::add_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "salvo: %s (see salvo serve --help)\n", e.what());
    return 2;
  } catch (const salvo::cli::CliError& e) {
    std::fprintf(stderr, "salvo: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "salvo: %s\n", e.what());
    return 1;
  }
  return 0;
}
