// EvaluationSets — the evaluation prompts a drafter must never be trained on (issue 13): MT-bench
// (both turns of each question), HumanEval (the prompts) and GSM8K test (the questions), read
// from the shared datasets directory (`<dir>/mt_bench_questions.jsonl`, `humaneval.jsonl.gz`,
// `gsm8k_test.jsonl`). `speclab train-draft` checks every training prompt against them by content,
// so a renamed copy of an evaluation file, or a template around its questions, is caught as well
// as the file names train_config.cpp refuses up front.
//
// Texts are compared after normalisation: runs of whitespace become one space, and the ends are
// trimmed. A training prompt overlaps a set when its normalised text contains a normalised
// evaluation text of at least kMinContainedChars characters, or equals a shorter one (a short
// text such as a second turn's "Why?" would match unrelated prompts as a substring).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace speclab {

struct EvaluationText {
  std::string set;   // "MT-bench", "HumanEval", "GSM8K test"
  std::string id;    // where it is: "mt_bench_questions.jsonl:3" (file name and line)
  std::string text;  // normalised
};

class EvaluationSets {
 public:
  static constexpr size_t kMinContainedChars = 32;

  // Reads the three files from `datasets_dir`. A file that is missing is listed in missing()
  // (the check then covers the others); one that cannot be parsed is Error(kBadInput) naming it.
  static EvaluationSets load(const std::string& datasets_dir);

  // The evaluation text `prompt` contains (or equals, for a short one); nullopt when none.
  std::optional<EvaluationText> find(const std::string& prompt) const;

  // "MT-bench (160 texts), HumanEval (164), GSM8K test (1319)", with any missing file named.
  std::string describe() const;
  const std::vector<std::string>& missing() const { return missing_; }

  // Whitespace runs to one space, ends trimmed.
  static std::string normalise(std::string_view text);

 private:
  std::vector<EvaluationText> texts_;
  std::vector<std::string> missing_;
  // The first kMinContainedChars characters of each long text -> its indices in texts_ (views
  // into texts_, which does not change after load()).
  std::unordered_map<std::string_view, std::vector<size_t>> by_prefix_;
  std::unordered_map<std::string_view, size_t> short_;  // whole short texts -> index
};

}  // namespace speclab
