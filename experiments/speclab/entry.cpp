// The whole `speclab` program behind main() (experiments/speclab/entry.h): every subcommand,
// its errors and its exit code.
#include "experiments/speclab/entry.h"

#include <c10/util/Exception.h>

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "experiments/speclab/cli.h"
#include "framework/core/printable_text.h"
#include "experiments/speclab/plugin_crash_report.h"
#include "framework/core/blas_core.h"
#include "framework/core/error.h"

namespace {

const char* kUsage =
    "usage: speclab <command> [options]\n"
    "\n"
    "commands:\n"
    "  generate   decode a prompt with a model: AR (cached or naive), or speculative with --drafter (--stats: vs AR)\n"
    "  bench      prefill/decode throughput, cached vs naive, bandwidth floor, peak RSS\n"
    "  export     write a subset of a GGUF model's layers as a new model (e.g. a draft model)\n"
    "  run        run an experiment config: AR + drafters over a sweep and prompts, HDF5 + summary + report\n"
    "  report     plots and report.md from a run, check or training-log HDF5 file\n"
    "  check      distribution-equivalence checks (greedy, analytic, sampling + negative controls)\n"
    "  merge      merge the shard files of `run --shard i/n` into one experiment file\n"
    "  submit     run an experiment config as a Slurm job array of shards, then merge and report\n"
    "  train-draft  train a draft for its target (an EAGLE head, Medusa heads, a small draft model) or build a retrieval datastore: data from the target, libtorch autograd\n"
    "\n"
    "Run `speclab <command> --help` for the options of a command.\n"
    "`speclab --openblas-coretype` prints the OPENBLAS_CORETYPE this program runs with (the core it\n"
    "sets where OpenBLAS fell back to generic kernels, or the one the environment names; nothing\n"
    "when neither): a script that starts many SpecLab processes exports it once, and each process\n"
    "then starts once instead of executing itself again.";

}  // namespace

namespace speclab::cli {

int entry(int argc, char** argv) {
  // OpenBLAS's kernels for this CPU where it fell back to generic ones (libtorch's float32
  // matmuls: train-draft, the libtorch-op backend); may execute the program again.
  speclab::select_native_blas_core(argv);
  // A file-size limit (ulimit -f) makes writes fail with EFBIG, reported as an error, instead
  // of killing the process with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  // A drafter plugin that crashes is named on stderr before the process dies of it.
  install_plugin_crash_report();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "--openblas-coretype") {
    const char* core = std::getenv("OPENBLAS_CORETYPE");
    if (core != nullptr) std::cout << core << "\n";
    return kExitOk;
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kUsage << "\n";
    return args.empty() ? kExitBadInput : kExitOk;
  }
  const std::map<std::string, int (*)(const std::vector<std::string>&)> commands = {
      {"generate", cmd_generate},
      {"bench", cmd_bench},
      {"export", cmd_export},
      {"run", cmd_run},
      {"report", cmd_report},
      {"check", cmd_check},
      {"merge", cmd_merge},
      {"submit", cmd_submit},
      {"train-draft", cmd_train_draft},
  };
  auto it = commands.find(args[0]);
  if (it == commands.end()) {
    std::cerr << "error: unknown command '" << args[0] << "'; known commands: generate, bench, export, run, report, check, merge, submit, train-draft\n";
    return kExitBadInput;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  try {
    apply_kernel_isa_env();
    return it->second(rest);
  } catch (const speclab::Error& e) {
    std::cerr << "error: " << speclab::one_line(e.what()) << "\n";
    return e.kind() == speclab::ErrorKind::kInternal ? kExitInternal : kExitBadInput;
  } catch (const c10::Error& e) {
    std::cerr << "internal error (libtorch): " << speclab::one_line(e.what_without_backtrace()) << "\n";
    return kExitInternal;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << speclab::one_line(e.what()) << "\n";
    return kExitInternal;
  }
}

}  // namespace speclab::cli
