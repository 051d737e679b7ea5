// speclab train-draft — train a draft for its target (docs/train-draft.md).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "experiments/app/draft_training.h"
#include "experiments/app/experiment_runner.h"
#include "experiments/speclab/cli.h"
#include "framework/core/error.h"
#include "framework/io/path_lock.h"

namespace speclab::cli {

int cmd_train_draft(const std::vector<std::string>& args) {
  std::string config;
  std::vector<std::string> sets;
  bool resume = false, overwrite = false, quiet = false;
  int threads = 0;
  int64_t stop_after = 0;
  po::options_description desc("speclab train-draft");
  desc.add_options()
      ("config", po::value(&config)->required(), "the training config (YAML)")
      ("set", po::value(&sets)->composing(), "override a config key: --set train.steps=200 (repeatable)")
      ("resume", po::bool_switch(&resume), "continue from the checkpoint (output.checkpoint)")
      ("overwrite", po::bool_switch(&overwrite),
       "train afresh over an existing draft and checkpoint (without it, or --resume, they are refused)")
      ("threads", po::value(&threads)->default_value(0), "CPU threads for the target's kernels (the data stage) and libtorch's matmuls (training; "
       "the trained bytes depend on it) (0 = all cores)")
      ("stop-after", po::value(&stop_after)->default_value(0), "checkpoint and stop after N steps (continue with --resume)")
      ("quiet,q", po::bool_switch(&quiet), "no progress line");
  po::variables_map vm;
  if (!parse_or_help("usage: speclab train-draft config.yaml [--resume | --overwrite] [--stop-after N] [--set key=value ...]", desc, args, vm, "config"))
    return kExitOk;
  set_threads(threads);
  if (stop_after < 0)
    throw Error(ErrorKind::kConfig, "expected a number of steps >= 0 (0 = train to the end), found " +
                                        std::to_string(stop_after), "command line", "--stop-after");
  const TrainDraftConfig c = load_train_config(config, sets);
  for (const std::string& w : train_config_warnings(c)) std::cerr << "warning: " << w << "\n";
  if (resume && overwrite)
    throw Error(ErrorKind::kConfig, "expected --resume or --overwrite, found both (one continues the checkpoint, the "
                                    "other discards it)", "command line", "--overwrite");
  // Errors found after loading name the key where it is written: its line, or the --set that set it.
  try {
    check_train_request(c, resume, stop_after);  // before --overwrite removes anything
  } catch (const Error& e) {
    throw located_train_config_error(e, config, sets);
  }
  // A fresh run replaced an existing draft and checkpoint: an hour of training lost to a
  // forgotten --resume after --stop-after (run, check, export and merge refuse theirs too).
  // --overwrite removes them first, so that a run stopped early leaves no old draft beside its new
  // checkpoint (the make targets test for the draft alone). A retrieval datastore has no checkpoint.
  // One train-draft at a time per draft: two at once both passed the checks below, both trained,
  // and the second reported the first's draft as its own (until 2026-12-06). The lock covers the
  // checks, --overwrite's moves and the run.
  ensure_output_directory(c.output.path, "output.path");
  const PathLock output_lock = PathLock::acquire(c.output.path, "train-draft", "output.path");
  std::vector<std::pair<std::string, std::string>> outputs = {{c.output.path, "output.path"}};
  if (c.architecture != "retrieval")
    outputs.insert(outputs.end(), {{c.output.checkpoint, "output.checkpoint"}, {c.output.log, "output.log"}});
  std::error_code ec;
  // --overwrite moves them aside (<path>.overwritten) and removes them only once this run has
  // written an output of its own; a run refused before that (the target's load, train.init, the
  // evaluation-set check, the data stage) puts them back. They were removed before checks that
  // can still refuse the run, leaving the user with nothing (found by a probe, 2026-12-06).
  std::vector<std::pair<std::string, std::string>> aside;  // (path, where it was moved)
  const auto settle = [&aside, &outputs] {
    std::error_code e;
    bool wrote = false;
    for (const auto& [path, key] : outputs) wrote = wrote || (!path.empty() && std::filesystem::exists(path, e));
    for (const auto& [path, moved] : aside) {
      if (wrote)
        std::filesystem::remove(moved, e);
      else
        std::filesystem::rename(moved, path, e);
    }
    aside.clear();
  };
  for (const auto& [path, key] : outputs) {
    if (path.empty() || !std::filesystem::is_regular_file(path, ec)) continue;  // a directory: check_train_outputs
    if (overwrite) {
      const std::string moved = path + ".overwritten";
      std::filesystem::rename(path, moved, ec);
      if (ec) {
        settle();
        throw Error(ErrorKind::kIo, "--overwrite: cannot move the existing file aside: " + ec.message(), path, key);
      }
      aside.push_back({path, moved});
    } else if (!resume && key != "output.log") {
      throw Error(ErrorKind::kConfig,
                  "expected no file at the " + std::string(key == "output.path" ? "draft's" : "checkpoint's") +
                      " path, found one: " +
                      (c.architecture == "retrieval"
                           ? std::string("pass --overwrite to build the datastore afresh and replace it")
                           : std::string("pass --resume to continue from the checkpoint, or --overwrite to train "
                                         "afresh and replace it")),
                  path, key);
    }
  }
  TrainDraftProgress progress;
  bool line_open = false;  // a progress line without its newline: an error must start below it
  progress.stage = [&](const std::string& line) {
    if (quiet) return;
    std::cerr << "\r" << line << "        " << std::flush;
    line_open = true;
  };
  progress.step = [&](const TrainStepLog& s, double agreement, int64_t total) {
    if (quiet) return;
    line_open = true;
    char parts[80] = "";  // what the loss is made of: eagle's two terms, medusa's CE, draft_model's KL
    if (c.architecture == "eagle")
      std::snprintf(parts, sizeof parts, " (feature %.4f, token %.3f)", s.feature_loss, s.token_loss);
    else
      std::snprintf(parts, sizeof parts, c.architecture == "medusa" ? " (cross-entropy)" : " (KL to the target)");
    char val[32] = "-";  // no evaluation yet
    if (!std::isnan(agreement)) std::snprintf(val, sizeof val, "%.3f", agreement);
    char buf[240];
    std::snprintf(buf, sizeof buf, "\rstep %lld/%lld  loss %.4f%s  val top-1 %s   ", static_cast<long long>(s.step),
                  static_cast<long long>(total), s.loss, parts, val);
    std::cerr << buf << std::flush;
  };
  TrainDraftResult r;
  try {
    r = train_draft(c, resume, progress, stop_after);
  } catch (const Error& e) {
    if (line_open) std::cerr << "\n";
    settle();
    throw located_train_config_error(e, config, sets);
  } catch (...) {
    if (line_open) std::cerr << "\n";
    settle();
    throw;
  }
  settle();
  if (line_open) std::cerr << "\n";
  std::printf("%s\n", r.evaluation_check.c_str());
  if (r.stopped) {
    std::printf("stopped after %lld steps: checkpoint %s (continue with --resume); no draft written yet\n",
                static_cast<long long>(r.steps), c.output.checkpoint.c_str());
    return kExitOk;
  }
  if (c.architecture == "retrieval") {
    std::printf("wrote %s: a datastore of %lld tokens; validation agreement of its first drafted token %.3f on %lld "
                "answer positions; data %.1f s, datastore %.1f s\n",
                r.path.c_str(), static_cast<long long>(r.train_pairs), r.validation_agreement,
                static_cast<long long>(r.validation_pairs), r.data_seconds, r.train_seconds);
  } else {
    std::printf("wrote %s: %lld steps, %lld training pairs, validation top-1 agreement %.3f on %s of %lld validation "
                "pairs%s; data %.1f s, training %.1f s\n",
                r.path.c_str(), static_cast<long long>(r.steps), static_cast<long long>(r.train_pairs),
                r.validation_agreement, r.agreement_on_answers ? "the answer positions" : "every position",
                static_cast<long long>(r.validation_pairs),
                r.agreement_on_answers ? "" : " (cached data without prompt lengths)", r.data_seconds,
                r.train_seconds);
  }
  if (!r.head_agreements.empty()) {
    std::printf(c.architecture == "medusa" ? "validation top-1 agreement by medusa head (head k drafts the k-th token):"
                                           : "validation top-1 agreement by draft step (the k-th token, after k - 1 right ones):");
    for (size_t k = 0; k < r.head_agreements.size(); ++k) std::printf(" %zu: %.3f", k + 1, r.head_agreements[k]);
    std::printf("\n");
  }
  if (r.first_step_topk.size() == 4)
    std::printf("first draft token: the target's token among the head's top 1 / 2 / 4 / 8: %.3f / %.3f / %.3f / %.3f "
                "(what a draft tree with that many first-level candidates could accept)\n",
                r.first_step_topk[0], r.first_step_topk[1], r.first_step_topk[2], r.first_step_topk[3]);
  return kExitOk;
}

}  // namespace speclab::cli
