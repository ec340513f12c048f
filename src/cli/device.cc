#include "cli/device.h"

#include "backends/cuda/cuda_backend.h"

namespace salvo::cli {

void add_device_option(CLI::App* cmd, std::string& device) {
  cmd->add_option("--device", device, "where the model runs: cpu, or cuda (a CUDA build and GPU)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
}

ModelPlacement placement_for(const std::string& device) {
  if (device == "cuda") return cuda::to_device;
  return {};
}

DrafterPlacement drafter_placement_for(const std::string& device) {
  if (device == "cuda") return cuda::dflash_to_device;
  return {};
}

}  // namespace salvo::cli
