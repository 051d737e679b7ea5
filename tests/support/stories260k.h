// Shared test fixture: the real stories260K model (llama2.c, ../shared) loaded once per test
// process, and the upstream run.c reference records.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "models/llama/llama_model.h"
#include "models/model_loader.h"

namespace speclab::testing {

struct Stories {
  LoadedModel info;  // config, tokenizer (weights moved into `model`)
  std::unique_ptr<LlamaModel> model;
};

// stories260K (llama2.c file and tokenizer from ../shared) placed as `placement` says.
inline Stories load_stories(const Placement& placement = {}) {
  Stories out;
  ModelSource src;
  src.path = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K/stories260K.bin";
  src.tokenizer = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K/tok512.bin";
  src.format = "llama2c";
  out.info = load_model(src);
  out.model = std::make_unique<LlamaModel>(out.info, Activations::kInt8, 0, placement);
  return out;
}

inline Stories& stories() {
  static Stories s = load_stories();
  return s;
}

// Every record of ../shared/reference/stories260K_greedy.jsonl: upstream run.c's 5 prompts and
// outputs. Throws std::runtime_error when the file is missing or holds fewer than 5 records, so
// that no test looping over them can pass having run nothing.
inline std::vector<nlohmann::json> stories_reference_records() {
  const std::string path = std::string(SPECLAB_SHARED_DIR) + "/reference/stories260K_greedy.jsonl";
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  if (out.size() < 5)
    throw std::runtime_error(path + ": expected the 5 run.c reference records, found " + std::to_string(out.size()));
  return out;
}

}  // namespace speclab::testing
