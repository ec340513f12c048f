// `--device cpu|cuda`: which backend runs the forward passes.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "engine/engine.h"

namespace salvo::cli {

void add_device_option(CLI::App* cmd, std::string& device);
// The engine's model placement for a device name (the option's check has validated it).
ModelPlacement placement_for(const std::string& device);
// Where a DFlash drafter runs beside a model placed on `device` (empty: the CPU).
DrafterPlacement drafter_placement_for(const std::string& device);

}  // namespace salvo::cli
