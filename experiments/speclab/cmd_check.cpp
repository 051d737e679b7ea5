// speclab check — the distribution-equivalence checks of a config's `equivalence` section
// (experiments/app/equivalence_runner.h, docs/equivalence.md): prints the table, writes
// the `/equivalence` group of the output HDF5 file.
// Exit codes: 0 every check passed and every negative control was caught; 1 a check failed (a
// finding, see the printed failure lines); 2 bad input (config, models, prompts, output path).
#include <c10/core/InferenceMode.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>

#include "experiments/speclab/cli.h"
#include "framework/core/error.h"
#include "framework/equivalence/equivalence_hdf5.h"
#include "experiments/app/equivalence_runner.h"
#include "experiments/app/experiment_runner.h"
#include "framework/io/experiment_config.h"

namespace speclab::cli {

namespace {

// A check failed: a finding, not a crash (main() uses 1 for internal errors too; a failed check
// prints its failure lines, a crash prints "internal error").
constexpr int kExitCheckFailed = 1;

}  // namespace

int cmd_check(const std::vector<std::string>& args) {
  std::string config_path, output;
  std::vector<std::string> overrides;
  std::string device;
  bool overwrite = false, quiet = false;
  int threads = 0;
  po::options_description desc("speclab check");
  desc.add_options()
      ("config", po::value(&config_path), "experiment YAML with an `equivalence` section (positional)")
      ("set", po::value(&overrides)->composing(), "override a config key: --set key=value (repeatable)")
      ("device", po::value(&device), "cpu | cuda | cuda:N: shorthand for --set models.target.device=...")
      ("out,o", po::value(&output), "HDF5 output path (default: the config's output.path)")
      ("overwrite", po::bool_switch(&overwrite),
       "replace an existing output file (an experiment file of `speclab run` keeps its runs and gets its "
       "/equivalence group replaced)")
      ("threads", po::value(&threads)->default_value(threads), "CPU threads for the model kernels and libtorch (0 = all cores)")
      ("quiet,q", po::bool_switch(&quiet), "no progress lines on stderr");
  po::variables_map vm;
  const char* usage = "usage: speclab check CONFIG.yaml [--set key=value ...] [--out FILE.h5] [--overwrite]";
  const char* exit_codes = "Exit codes: 0 all checks pass and every negative control is caught; 1 a check failed; 2 bad input.";
  if (!parse_or_help(usage, desc, args, vm, "config", exit_codes)) return kExitOk;
  if (config_path.empty()) throw Error(ErrorKind::kConfig, "expected a config file, found none", "command line", "CONFIG");
  if (vm.count("out") && output.empty())
    throw Error(ErrorKind::kConfig, "expected a file path, found an empty one", "command line", "--out");
  set_threads(threads);

  add_device_override(overrides, device, config_path);
  ExperimentConfig config = [&] {
    try {
      return load_experiment_config(config_path, overrides, ConfigUse::kCheck);
    } catch (const Error& e_in) {
      const Error e = device_flag_error(e_in, device);
      // A top-p or top-k cut at temperature 0 is refused when the config loads, with advice to set
      // a temperature, which check refuses next: name check's own sweeps instead.
      if (e.message().find("decodes greedily") == std::string::npos) throw e;
      for (const char* key : {"top_p", "top_k"}) {
        if (e.field() == std::string("sampling.") + key)
          throw Error(ErrorKind::kConfig,
                      std::string("expected no sampling.") + key + " in a config for `speclab check`, found one: check "
                          "ignores it and samples at each of equivalence." + key + "s (its greedy checks at "
                          "temperature 0)",
                      e.file(), e.field());
        if (e.field() == std::string("sweep.sampling.") + key)
          throw Error(ErrorKind::kConfig,
                      std::string("expected no sweep in a config for `speclab check`, found one of sampling.") + key +
                          ": check sweeps it itself (equivalence." + key + "s)",
                      e.file(), e.field());
      }
      throw e;
    }
  }();
  // check tests the config's own settings and sweeps its sampling settings and draft lengths
  // itself (equivalence.*). A `sweep` was ignored: a sweep over models or seeds, even one naming a
  // model that does not exist, passed having checked the first settings only.
  if (!config.sweep.empty())
    throw located_config_error(
        Error(ErrorKind::kConfig,
              "expected no sweep in a config for `speclab check`, found " + std::to_string(config.sweep.size()) +
                  " swept key(s): check tests the config's own settings and sweeps sampling and draft lengths "
                  "itself (equivalence.temperatures, top_ps, top_ks, gammas); check each other setting with its "
                  "own --set",
              config_path, "sweep"),
        config_path, overrides);
  // Settings that check replaces with its own sweeps were accepted and ignored: a config written
  // for `speclab run` at T = 0.7 or gamma 6 was checked at equivalence.temperatures and gammas.
  const auto refuse_written = [&](const std::string& field, const std::string& instead) {
    const WrittenKey at = written_key(config_path, overrides, field);
    if (!at.where.empty())
      throw Error(ErrorKind::kConfig,
                  "expected no " + at.path + " in a config for `speclab check`, found one: check ignores it and " +
                      instead,
                  at.where, at.path);
  };
  // Values that change nothing pass: a temperature of 0 (what the greedy checks run at), top_p 1
  // and top_k 0 (no cut), as a config shared with `speclab run` may spell them out.
  const std::pair<const char*, bool> sampling_keys[] = {{"temperature", config.sampling.temperature > 0},
                                                        {"top_p", config.sampling.top_p < 1.0},
                                                        {"top_k", config.sampling.top_k > 0}};
  for (const auto& [key, changes] : sampling_keys)
    if (changes)
      refuse_written(std::string("sampling.") + key,
                     std::string("samples at each of equivalence.") + key + "s (its greedy checks at temperature 0)");
  for (size_t i = 0; i < config.drafters.size(); ++i)
    refuse_written("drafters[" + std::to_string(i) + "].num_speculative_tokens",
                   "drafts at each of equivalence.gammas (and verifier_gammas)");
  apply_output_flag(config, output, "--out");
  // Refuse an existing file before spending any time on the checks: one without --overwrite, one
  // a running `speclab run` holds, another experiment's file (that came after the whole check, and
  // hid its verdict behind exit 2).
  std::error_code ec;
  // The model, draft and prompt files, as `run` checks them: a missing target named the file only
  // ("nonexist: cannot open model file"), not models.target.path.
  plan_experiment(config);
  check_equivalence_output(config.output.path, config.name, overwrite);
  // Before the checks, not after them. An existing file (--overwrite) is written in place
  // (write_equivalence), so it must be writable; a new one needs a directory that takes it
  // (made when missing).
  if (std::filesystem::exists(config.output.path, ec)) {
    if (std::filesystem::is_directory(config.output.path, ec))
      throw Error(ErrorKind::kConfig, "expected an output file path, found a directory", config.output.path,
                  "output.path");
    if (::access(config.output.path.c_str(), W_OK) != 0)
      throw Error(ErrorKind::kIo, "expected a writable output file, found a read-only one: " +
                                      std::string(std::strerror(errno)), config.output.path, "output.path");
  } else {
    check_output_path(config.output.path, OutputMode::kCreate);
  }

  EquivalenceRunOptions options;
  if (!quiet)
    options.progress = [](const std::string& line) {
      std::fprintf(stderr, "%s\n", line.c_str());
      std::fflush(stderr);
    };
  c10::InferenceMode inference;
  EquivalenceReport report;
  try {
    report = run_equivalence(config, options);
  } catch (const Error& e) {
    throw located_config_error(e, config_path, overrides);
  }
  std::cout << format_equivalence_report(report);
  EquivalenceFileMeta meta;
  meta.config_yaml = config.resolved_yaml;
  meta.git_revision = build_revision();
  write_equivalence(config.output.path, report, meta, overwrite);
  std::cout << "results: " << config.output.path << " (group /equivalence)" << std::endl;
  return report.pass() ? kExitOk : kExitCheckFailed;
}

}  // namespace speclab::cli
