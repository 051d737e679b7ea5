// Draft training and trained drafts — the application side of `speclab train-draft` and of the
// `eagle` drafter: what needs a loaded target (its answers, its features, its frozen tensors)
// and files (the data cache, checkpoints, the draft's safetensors).
//
// train_draft(config):
//   1. prompts (config.data.prompts) -> the target's greedy answer to each (chat template,
//      data.answer_tokens), cached in <cache_dir>/answers-<key>.jsonl, appended as they come (an
//      interrupted run continues), key = hash(target weights, prompts, answer_tokens,
//      max_prompt_tokens, chat);
//   2. prompt + answer teacher-forced through the target: features (eagle_features of the last
//      layer) and top-1 tokens of every position, cached in <cache_dir>/features-<key>.safetensors;
//      every K-th prompt (K = round(1 / validation_fraction)) is held apart for validation;
//   3. the architecture's trainer (EagleTrainer, MedusaTrainer, DistillTrainer) for train.steps; checkpoints (config.output.checkpoint) every
//      checkpoint_every steps and at the end; resume continues from the checkpoint;
//   4. the draft: config.output.path (safetensors) with metadata speclab.draft=<architecture>,
//      target_weights_hash, target (file name), training_config (the canonical YAML); the log
//      (config.output.log, framework/io/train_log.h).
// architecture retrieval stops after stage 1: the training prompts' conversations (prompt +
// answer) are written as a datastore (tensors tokens [N] and offsets [S + 1], float32) and the
// validation answers measure it (TrainDraftResult below); nothing is trained, so it needs no
// checkpoint (--resume continues the answers cache, as every run does) and ignores stop_after.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "experiments/app/loaded_target.h"
#include "framework/draft/builtin/datastore.h"
#include "framework/draft/builtin/eagle_head.h"
#include "framework/draft/builtin/medusa_heads.h"
#include "framework/draft/drafter.h"
#include "framework/io/train_config.h"
#include "framework/train/eagle_trainer.h"
#include "framework/train/draft_trainer.h"

namespace speclab {

// A hash of the model a target was loaded from, 16 hex digits: FNV-1a-style (64-bit prime, offset
// basis 1469598103934665603) over a model file's bytes, or over an HF directory's .safetensors,
// .json, .bin and .model files in name order, each name then its bytes. What a trained draft
// names as its target. Error(kIo, path) when unreadable or a directory holds none of them.
std::string target_weights_hash(const LoadedModel& target);

struct TrainDraftProgress {
  std::function<void(const std::string&)> stage;  // one line per data stage ("answers 12/300")
  // After each step; agreement is the latest validation agreement of the training (this step's
  // when it evaluated, else the last one logged, also before a --resume), NaN before the first.
  std::function<void(const TrainStepLog&, double agreement, int64_t total_steps)> step;
};

// For architecture retrieval: train_pairs is the corpus's token count, validation_pairs the
// validation answer positions it drafted at, head_agreements the agreement by draft step (as
// eagle's), train_seconds the time to build and measure the datastore, steps 0.
struct TrainDraftResult {
  std::string path;
  double data_seconds = 0.0, train_seconds = 0.0;
  double validation_agreement = 0.0;     // of the first drafted token, on pairs labelled by answer rows
  bool agreement_on_answers = true;      // false: cached data without prompt lengths, every pair counted
  // By draft position k = 1..K: medusa per head (MedusaTrainer::head_agreements), eagle per
  // draft step on its own features (EagleTrainer::step_agreements, K = max(4, train.unroll)).
  std::vector<double> head_agreements;
  // eagle: the first draft step's top-k coverage for k = 1, 2, 4, 8 (EagleTrainer::first_step_topk):
  // what a draft tree with k first-level candidates could accept there.
  std::vector<double> first_step_topk;
  int64_t train_pairs = 0, validation_pairs = 0, steps = 0;
  bool stopped = false;  // stop_after ended the run: a checkpoint, no draft (path is empty)
  // What the training prompts were checked against (EvaluationSets): "checked N training prompts
  // against MT-bench (160 texts), ...: none contains one". A prompt that contains one is an error.
  std::string evaluation_check;
};

// What train_draft refuses before it touches anything, from the command line's side: --stop-after
// or --resume for a retrieval datastore, --stop-after past train.steps (Error(kConfig, "command
// line", flag)). `speclab train-draft` calls it before --overwrite removes the old outputs (they
// were removed, then the run refused).
void check_train_request(const TrainDraftConfig& config, bool resume, int64_t stop_after);

// resume: continue from config.output.checkpoint (Error(kBadInput) naming it when it is corrupt
// or belongs to another config/target; Error(kIo) when absent). stop_after > 0: checkpoint and
// return after that many steps, writing no draft (an interruption, for tests and time slices).
TrainDraftResult train_draft(const TrainDraftConfig& config, bool resume, const TrainDraftProgress& progress = {},
                             int64_t stop_after = 0);

// The head in `path`, with the frozen tensors of `target`. Error(kConfig, path,
// "drafter.draft_model") when the file was trained for another target (naming both hashes),
// Error(kBadInput, path) when it is not an eagle draft.
std::shared_ptr<EagleHead> load_eagle_head(const std::string& path, const LoadedModel& target);

// The medusa heads in `path`, as load_eagle_head (Error(kBadInput, path) when not a medusa draft).
std::shared_ptr<MedusaHeads> load_medusa_heads(const std::string& path, const LoadedModel& target);

// The datastore in `path` (architecture retrieval), built for `target`: errors as
// load_eagle_head; Error(kBadInput, path) naming the tensor when tokens [N] are not token ids of
// the target or offsets [S + 1] do not ascend from 0 to N.
std::shared_ptr<const Datastore> load_datastore(const std::string& path, const LoadedModel& target);

// A distilled draft model (architecture draft_model) in `path`, trained for `target`: the target's
// tokenizer, chat template, embeddings and LM head (as the target stores them) with the draft's
// k trained layers and final norm; its matrices are quantized to Q8_0 when the target's are
// packed (so they run on the same int8 kernels), float32 otherwise. head_vocab: the reduced head
// it was trained with (0: the full head), the default draft_vocab of its drafter. Errors as
// load_eagle_head (Error(kBadInput, path) when it is not a draft_model draft).
struct DistilledDraft {
  LoadedModel model;
  int64_t head_vocab = 0;
};
DistilledDraft load_distilled_draft(const std::string& path, const LoadedModel& target);

// Whether `path` is a file written by `speclab train-draft` (a .safetensors file, not a model
// directory or another format).
bool is_trained_draft_file(const std::string& path);

// The default draft path of an architecture (eagle, medusa, retrieval) for a target, in the checkout:
// .cache/drafts/<model file stem>.<architecture>.safetensors (what `make draft-model` /
// train-draft write) when it exists, else the draft the repository ships,
// assets/drafts/<stem>.<architecture>.safetensors, when that exists, else the .cache path.
std::string default_draft_path(const LoadedModel& target, const std::string& architecture);
// The same from the target's resolved source path (ModelSource::path, as LoadedModel::source).
std::string default_draft_path(const std::string& target_source, const std::string& architecture);

}  // namespace speclab
