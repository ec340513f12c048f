// salvo: local LLM inference that commits several tokens per forward pass.
#include <cstdio>
#include <exception>
#include <string>

#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"salvo — local LLM inference engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "salvo 0.1.0");
  salvo::cli::add_run_command(app);
  salvo::cli::add_bench_command(app);
  salvo::cli::add_info_command(app);
  salvo::cli::add_pull_command(app);
  salvo::cli::add_tokenize_command(app);
  salvo::cli::add_template_command(app);
  salvo::cli::add_logits_command(app);
  salvo::cli::add_dflash_command(app);
  salvo::cli::add_serve_command(app);
  salvo::cli::add_compare_command(app);
  std::string names;
  bool known = false;
  for (const CLI::App* sub : app.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    known |= argc > 1 && sub->get_name() == argv[1];
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::fprintf(stderr, "salvo: unknown command '%s' (commands: %s)\n", argv[1], names.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "salvo: %s (see --help)\n", e.what());
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
