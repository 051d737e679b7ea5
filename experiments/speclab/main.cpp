// speclab — the SpecLab command line. Subcommands: generate, bench, export, run, report, check, merge, submit,
// train-draft.
#include <c10/util/Exception.h>

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "experiments/speclab/cli.h"
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

// `text` as one printable line of valid UTF-8: newlines, tabs and other control characters,
// and bytes that are not part of a valid UTF-8 sequence (a non-UTF-8 prompt file echoed by a
// parser), are written as \n, \t or \xHH. Every error is then exactly one line a terminal and a
// log can show.
std::string one_line(const std::string& text) {
  std::string out;
  const auto hex = [&](unsigned char c) {
    const char* digits = "0123456789abcdef";
    out += "\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
  };
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if (c == '\n') out += "\\n";
      else if (c == '\t') out += "\\t";
      else if (c < 0x20 || c == 0x7f) hex(c);
      else out += static_cast<char>(c);
      ++i;
    } else {
      // A UTF-8 lead byte and its continuation bytes (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
      const int n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
      bool ok = n > 0 && i + static_cast<size_t>(n) <= text.size();
      for (int k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
      if (ok && n >= 3) {
        const unsigned char c1 = static_cast<unsigned char>(text[i + 1]);
        if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) || (c == 0xf0 && c1 < 0x90) || (c == 0xf4 && c1 > 0x8f))
          ok = false;
      }
      if (ok) {
        out.append(text, i, static_cast<size_t>(n));
        i += static_cast<size_t>(n);
      } else {
        hex(c);
        ++i;
      }
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace speclab::cli;
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
    std::cerr << "error: " << one_line(e.what()) << "\n";
    return e.kind() == speclab::ErrorKind::kInternal ? kExitInternal : kExitBadInput;
  } catch (const c10::Error& e) {
    std::cerr << "internal error (libtorch): " << one_line(e.what_without_backtrace()) << "\n";
    return kExitInternal;
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory\n";
    return kExitBadInput;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << one_line(e.what()) << "\n";
    return kExitInternal;
  }
}
