// `salvo serve` runs salvo-serve, built next to salvo, in this process (exec keeps the pid,
// the arguments and the exit status): the HTTP server's library, cpp-httplib as Debian builds
// it, links OpenSSL, whose libraries would otherwise be mapped into every `salvo run`.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace salvo::cli {

void add_serve_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (salvo serve --help)");
  cmd->prefix_command();  // every argument after `serve`, --help included, goes to salvo-serve
  cmd->set_help_flag();
  cmd->callback([cmd] {
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    const std::string program =
        (ec ? std::filesystem::path(".") : self.parent_path()) / "salvo-serve";
    std::vector<std::string> args = {program, "serve"};
    for (const std::string& a : cmd->remaining()) args.push_back(a);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    throw CliError("serve: cannot run " + program + ": " + std::strerror(errno) +
                   " (it is built with salvo: cmake --build --preset release --target salvo)");
  });
}

}  // namespace salvo::cli
