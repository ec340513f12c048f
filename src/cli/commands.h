// Each `salvo` subcommand lives in its own file and registers itself on the CLI11 app.
// A command's callback throws CliError for a one-line user error (non-zero exit).
#pragma once

#include <CLI/CLI.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace salvo::cli {

struct CliError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Resolves a short model name (smollm2-135m, qwen2.5-coder-1.5b, ...) or a GGUF path to a
// file path, pulling a known model that is not there yet.
std::string resolve_model(const std::string& name_or_path);
// Writes raw little-endian float32 values (the logits/dflash commands' output files).
void write_floats(const std::string& path, const std::vector<float>& values);

void add_run_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_pull_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_template_command(CLI::App& app);
void add_logits_command(CLI::App& app);
void add_dflash_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_compare_command(CLI::App& app);

}  // namespace salvo::cli
