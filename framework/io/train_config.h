// TrainDraftConfig — the YAML of `speclab train-draft config.yaml` (keys: docs/train-draft.md;
// field tables and validate() in framework/io/train_config.cpp; torch-free).
//
//   target:  a model source (as models.target of `speclab run`)
//   data:    prompts (the `prompts` section of `speclab run`), answer_tokens, answer_batch,
//            max_prompt_tokens, validation_fraction, cache_dir
//   architecture: eagle | medusa | draft_model | retrieval (no training: the target's answers
//            become the retrieval drafter's datastore)
//   head:    vocab_top_n (0 = the target's full LM head; N = its N most frequent tokens),
//            medusa_heads, draft_layers, aux_layers, layers
//   train:   steps, batch_tokens, lr, warmup, weight_decay, grad_clip, token_loss_weight,
//            feature_noise, unroll, unroll_decay, medusa_decay, init, eval_every, checkpoint_every, seed
//   output:  path (.safetensors), log (.h5), checkpoint (.safetensors), dtype
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "framework/core/model_source.h"
#include "framework/io/experiment_config.h"

namespace speclab {

struct DraftDataOptions {
  PromptsOptions prompts;            // the training prompts (never an evaluation set)
  int64_t answer_tokens = 64;        // the target's greedy answer to each prompt, at most this long
  // Prompts the target answers together (engine/batch_decode.h; 1 = one at a time). The answers
  // are the same tokens at any width, so it is not part of the cache key.
  int64_t answer_batch = 16;
  int64_t max_prompt_tokens = 256;   // longer prompts (chat template included) are skipped
  double validation_fraction = 0.1;  // (0, 0.5]: every round(1 / it)-th prompt is held apart (a text seen again goes with its first copy)
  // Answers and features, keyed by target + data. Not written: <checkout>/.cache/draft_data
  // (load_train_config); written: relative to the YAML file, as every path of the config.
  std::string cache_dir = ".cache/draft_data";

  // Error(kConfig, ..., "data.<key>"); also when a prompt file is an evaluation set (MT-bench,
  // HumanEval, GSM8K test).
  void validate() const;
};

struct DraftHeadOptions {
  int64_t vocab_top_n = 0;   // 0: the full LM head; N: the N most frequent target tokens (FR-Spec)
  int64_t medusa_heads = 4;  // architecture medusa: K heads, drafting up to K tokens per step
  // architecture draft_model: the distilled draft has one decoder layer per entry, starting as a
  // copy of that target layer (1 to 8 entries, e.g. [0, 29]: the target's first and last).
  std::vector<int64_t> draft_layers;
  // architecture eagle: target layers (each below the last, at most 4, distinct) whose residual
  // stream the head's first draft step also reads (EAGLE-3's fused features, eagle_head.h);
  // empty: the last layer's features only (EAGLE).
  std::vector<int64_t> aux_layers;
  // architecture eagle: decoder layers in the head (EAGLE: 1; eagle_head.h), 1 to 4.
  int64_t layers = 1;

  // Error(kConfig, ..., "head.<key>") on a value out of range for any architecture; which keys
  // an architecture takes is TrainDraftConfig::validate's check.
  void validate() const;
};

struct DraftTrainOptions {
  int64_t steps = 1000;
  int64_t batch_tokens = 1024;  // training pairs per step (whole sequences, at least one)
  double lr = 1e-3;
  int64_t warmup = 50;          // linear warmup steps
  double weight_decay = 0.0;
  double grad_clip = 0.5;       // global gradient-norm clip (0 = off)
  double token_loss_weight = 0.1;  // w in SmoothL1 + w * CE (EAGLE's 0.1)
  // Uniform noise U(-a, a) added to the input features, a = feature_noise x the training features'
  // RMS (EAGLE's data augmentation: the head learns to draft from its own imperfect features).
  double feature_noise = 0.0;
  // architecture eagle: draft steps trained per pair (1 = EAGLE's loss; U > 1 also trains steps
  // 2..U on the head's own predicted features, eagle_trainer.h), and step k's loss weight
  // unroll_decay^(k-1).
  int64_t unroll = 1;
  double unroll_decay = 1.0;
  double medusa_decay = 0.8;    // architecture medusa: head k's loss weight is medusa_decay^k (the paper's 0.8)
  // A trained draft of this architecture for this target whose trained weights start the
  // training (fine-tuning, e.g. with another unroll; the head rows stay this config's); empty:
  // fresh weights from the seed.
  std::string init;
  int64_t eval_every = 50;      // validation agreement every N steps (and at the end)
  int64_t checkpoint_every = 100;  // 0 = only at the end
  uint64_t seed = 1;

  void validate() const;  // Error(kConfig, ..., "train.<key>")
};

struct TrainDraftOutput {
  // Default (output.path not written): default_train_output(target, architecture).
  std::string path;
  std::string log;         // HDF5 per-step log; default: path with .h5
  std::string checkpoint;  // default: path with .ckpt.safetensors
  std::string dtype = "float32";  // of the draft's tensors: float32 | float16 (checkpoints stay float32)

  void validate() const;  // Error(kConfig, ..., "output.<key>")
};

struct TrainDraftConfig {
  ModelSource target;
  std::string architecture = "eagle";  // eagle | medusa | draft_model | retrieval
  DraftDataOptions data;
  DraftHeadOptions head;
  DraftTrainOptions train;
  TrainDraftOutput output;

  std::string source_path;    // the YAML file
  std::string resolved_yaml;  // the canonical config (written into the draft's metadata)

  // Throws Error(kConfig, ..., <section.key>) naming the key, the value and what was expected:
  // each section's validate(), then what depends on the architecture.
  void validate() const;
};

// `path` without its extension + `suffix`.
std::string replace_extension(const std::string& path, const std::string& suffix);

// The draft's path when output.path is not written: <checkout>/.cache/drafts/<target file
// stem>.<architecture>.safetensors, where the eagle, medusa and retrieval drafters look for
// their target's draft by default (experiments/app/draft_training.h: default_draft_path). The
// stem is that of the named model's file, or of the path as written.
std::string default_train_output(const ModelSource& target, const std::string& architecture);
// The name a target's default drafts are filed under: a named model's file stem
// ("SmolLM2-135M-Instruct.Q4_1"), a model file's stem, or an HF directory's whole name (trailing
// slashes ignored; dots kept). Both default_train_output and default_draft_path use it.
std::string draft_file_stem(const std::string& target_source);

// Loads and validates a train-draft config; Error(kConfig) naming file:line and the key.
TrainDraftConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides = {});

// What a valid config does that its writer may not mean, one line each ("train.warmup (100) is not
// below train.steps (50): ..."), for train-draft to print as warnings. Refusing them would break
// `--set train.steps=N` with a small N beside the default warmup.
std::vector<std::string> train_config_warnings(const TrainDraftConfig& c);

// `e` located where its field is written when it names the config file `path` without a line (an
// error found once the target and the data are loaded, e.g. data.max_prompt_tokens leaving no
// prompt): "<file>:<line>:<col>" of the key, or the `--set` that wrote it (it named the file for
// a --set). `e` itself when the key is not written (a default) or the file no longer parses.
Error located_train_config_error(const Error& e, const std::string& path, const std::vector<std::string>& overrides = {});

}  // namespace speclab
