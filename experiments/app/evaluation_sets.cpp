#include "experiments/app/evaluation_sets.h"

#include <filesystem>
#include <map>

#include "framework/io/experiment_config.h"
#include "framework/io/prompt_loader.h"

namespace speclab {

namespace {

// One evaluation file: its name under the datasets directory, the set it holds, and the JSON
// fields (dotted paths, as prompt files use) whose texts are evaluation prompts.
struct EvaluationFile {
  const char* file;
  const char* set;
  std::vector<const char*> fields;
};

const std::vector<EvaluationFile>& evaluation_files() {
  static const std::vector<EvaluationFile> files = {
      {"mt_bench_questions.jsonl", "MT-bench", {"turns.0", "turns.1"}},
      {"humaneval.jsonl.gz", "HumanEval", {"prompt"}},
      {"gsm8k_test.jsonl", "GSM8K test", {"question"}},
  };
  return files;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

std::string EvaluationSets::normalise(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool gap = false;
  for (char c : text) {
    if (is_space(c)) {
      gap = !out.empty();
      continue;
    }
    if (gap) out.push_back(' ');
    gap = false;
    out.push_back(c);
  }
  return out;
}

EvaluationSets EvaluationSets::load(const std::string& datasets_dir) {
  namespace fs = std::filesystem;
  EvaluationSets sets;
  for (const EvaluationFile& f : evaluation_files()) {
    const std::string path = (fs::path(datasets_dir) / f.file).string();
    std::error_code ec;
    if (!fs::is_regular_file(path, ec)) {
      sets.missing_.push_back(path);
      continue;
    }
    for (const char* field : f.fields) {
      ExperimentConfig c;
      c.source_path = path;  // the file is named relative to its own directory
      c.prompts.files = {f.file};
      c.prompts.field = field;
      for (const Prompt& p : load_prompts(c)) sets.texts_.push_back({f.set, p.id, normalise(p.text)});
    }
  }
  for (size_t i = 0; i < sets.texts_.size(); ++i) {
    const std::string_view t = sets.texts_[i].text;
    if (t.size() >= kMinContainedChars)
      sets.by_prefix_[t.substr(0, kMinContainedChars)].push_back(i);
    else
      sets.short_.emplace(t, i);
  }
  return sets;
}

std::optional<EvaluationText> EvaluationSets::find(const std::string& prompt) const {
  const std::string t = normalise(prompt);
  const std::string_view v = t;
  if (auto it = short_.find(v); it != short_.end()) return texts_[it->second];
  if (v.size() < kMinContainedChars) return std::nullopt;
  for (size_t at = 0; at + kMinContainedChars <= v.size(); ++at) {
    const auto it = by_prefix_.find(v.substr(at, kMinContainedChars));
    if (it == by_prefix_.end()) continue;
    for (size_t i : it->second)
      if (v.compare(at, texts_[i].text.size(), texts_[i].text) == 0) return texts_[i];
  }
  return std::nullopt;
}

std::string EvaluationSets::describe() const {
  std::map<std::string, size_t> counts;
  for (const EvaluationText& t : texts_) ++counts[t.set];
  std::string out;
  for (const EvaluationFile& f : evaluation_files()) {
    const auto it = counts.find(f.set);
    if (it == counts.end()) continue;
    out += (out.empty() ? "" : ", ") + std::string(f.set) + " (" + std::to_string(it->second) + " texts)";
  }
  for (const std::string& m : missing_) out += (out.empty() ? "" : ", ") + std::string("not found: ") + m;
  return out;
}

}  // namespace speclab
