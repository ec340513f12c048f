// `salvo compare ...`: runs tools/compare/compare.py (an OpenAI-API client, so it lives in Python
// next to the servers it talks to) with the remaining arguments, --help included.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace salvo::cli {
namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// $SALVO_TOOLS_DIR/compare/compare.py, else tools/compare/compare.py in a directory above the
// executable (build/<preset>/salvo sits two levels below the checkout).
std::string find_compare_script() {
  const std::string rel = "compare/compare.py";
  if (const char* dir = std::getenv("SALVO_TOOLS_DIR")) {
    const std::string path = std::string(dir) + "/" + rel;
    if (is_file(path)) return path;
    throw CliError("SALVO_TOOLS_DIR=" + std::string(dir) + " holds no " + rel);
  }
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  std::string dir = n > 0 ? std::string(buf.data(), n) : std::string();
  for (int up = 0; up < 4 && dir.find('/') != std::string::npos; ++up) {
    dir = dir.substr(0, dir.find_last_of('/'));
    const std::string path = dir + "/tools/" + rel;
    if (is_file(path)) return path;
  }
  throw CliError("cannot find tools/" + rel +
                 " above the salvo executable (set SALVO_TOOLS_DIR to the checkout's tools/)");
}

[[noreturn]] void exec_compare(const std::vector<std::string>& args) {
  const std::string script = find_compare_script();
  std::vector<std::string> argv_strings = {"python3", script};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);
  execvp("python3", argv.data());
  throw CliError("cannot run python3 for " + script + ": " + std::strerror(errno));
}

}  // namespace

void add_compare_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "compare", "Compare OpenAI-compatible servers under matched conditions (see compare --help)");
  // Every argument, --help included, belongs to compare.py.
  cmd->prefix_command();
  cmd->set_help_flag();
  cmd->callback([cmd] { exec_compare(cmd->remaining()); });
}

}  // namespace salvo::cli
