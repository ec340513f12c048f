// Engine::load places a --draft-model as it places the model (--device cuda): a draft model left
// on the CPU beside a CUDA target cost every drafted pass a CPU forward, which made `--spec auto`
// 0.55-0.85x plain decoding on the H200 (session 13). The placement here stands in for
// cuda::to_device: it records what it was given and hands the model back, or fails.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace salvo {
namespace {

std::string model_path(const char* name) {
  const char* env = std::getenv("SALVO_MODELS");
  return std::string(env ? env : SALVO_SOURCE_DIR "/models") + "/" + name + ".gguf";
}

TEST(EnginePlacement, PlacesTheDraftModelLikeTheModel) {
  const std::string path = model_path("smollm2-135m");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found (set SALVO_MODELS)";
  std::vector<const Model*> placed;
  EngineOptions options;
  options.threads = 1;
  options.draft_model_path = path;  // the model itself: the same vocabulary
  options.find_drafter = false;
  options.placement = [&](std::unique_ptr<Model> m) -> Expected<std::unique_ptr<Model>> {
    placed.push_back(m.get());
    return m;
  };
  auto engine = Engine::load(path, options);
  ASSERT_TRUE(engine.ok()) << engine.status().message();
  ASSERT_EQ(placed.size(), 2u);
  EXPECT_EQ(placed[0], &(*engine)->model());
  EXPECT_EQ(placed[1], (*engine)->draft_model());
}

TEST(EnginePlacement, AFailedDraftPlacementNamesTheDraftModel) {
  const std::string path = model_path("smollm2-135m");
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found (set SALVO_MODELS)";
  int calls = 0;
  EngineOptions options;
  options.threads = 1;
  options.draft_model_path = path;
  options.find_drafter = false;
  options.placement = [&](std::unique_ptr<Model> m) -> Expected<std::unique_ptr<Model>> {
    if (++calls == 2) return Status::error("no device memory left");
    return m;
  };
  auto engine = Engine::load(path, options);
  ASSERT_FALSE(engine.ok());
  const std::string& message = engine.status().message();
  EXPECT_NE(message.find("draft model " + path), std::string::npos) << message;
  EXPECT_NE(message.find("no device memory left"), std::string::npos) << message;
}

}  // namespace
}  // namespace salvo
