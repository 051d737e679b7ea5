// Shared pieces of the `speclab` front end: subcommand registry, model options, prompt
// building. Only this directory prints and picks exit codes (STYLE.md §9).
#pragma once

#include <boost/program_options.hpp>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/draft/drafter_options.h"
#include "framework/io/experiment_config.h"
#include "framework/io/experiment_summary.h"
#include "framework/sampling/sampling.h"
#include "experiments/app/loaded_target.h"

namespace speclab::cli {

namespace po = boost::program_options;

// Exit codes: 0 ok, 1 internal error, 2 bad input / config (a speclab::Error).
constexpr int kExitOk = 0;
constexpr int kExitInternal = 1;
constexpr int kExitBadInput = 2;

struct ModelArgs {
  std::string model = "smollm2-135m-instruct";
  std::string format = "auto";
  std::string tokenizer;
  std::string weights = "native";  // ModelSource::weights
  std::string activations = "auto";  // ModelSource::activations
  std::string device = "cpu";        // ModelSource::device
  std::string dtype = "auto";        // ModelSource::dtype
  std::string kv_dtype = "auto";     // ModelSource::kv_dtype
  int threads = 0;                 // 0 = libtorch default

  void add_to(po::options_description& desc);
  ModelSource source() const;
  // `e` with its field renamed from a ModelSource key (file "model": kv_dtype, format, ...) to
  // the flag that set it, and the file to "command line"; `e` itself otherwise.
  static Error flag_error(const Error& e);
};

// Sets the thread count, then load_target(args.source()) (experiments/app/loaded_target.h). An
// error in a model option names its flag (ModelArgs::flag_error).
std::unique_ptr<LoadedTarget> load_runtime_model(const ModelArgs& args);

// Prompt text -> ids. chat: "on" wraps the text as one user message through the model's chat
// template, "off" uses it raw, "auto" = on when the model ships a template. A `system` message
// without the template would be ignored: Error(kConfig) naming --system.
TokenList build_prompt(const LoadedTarget& m, const std::string& text, const std::string& chat,
                       const std::string& system = {});
// Before a model loads: --chat is on, off or auto, and --system is not given with --chat off;
// else Error(kConfig) naming the flag.
void check_chat_flags(const std::string& chat, const std::string& system);

// `e` naming the flag that sets its field: `flags` maps a section's keys (the field bare or as
// "<section>.<key>") to flags; the file becomes "command line" where it was `section` or empty (a
// path stays). `e` itself when its field is none of them.
Error flag_named(const Error& e, const std::string& section, const std::map<std::string, std::string>& flags);

// `run` and `check`'s `--device D`: appends the override "models.target.device=D" to `overrides`.
// Refused (Error(kConfig) naming --device) beside a `--set` that writes models.target.device, under
// any of its names: the later of the two won silently.
void add_device_override(std::vector<std::string>& overrides, const std::string& device,
                         const std::string& config_path);
// `e` named as `--device` where that override caused it (it named a --set the user never typed).
Error device_flag_error(const Error& e, const std::string& device);

// A DrafterOptions::validate() message in generate's terms: the drafter keys it names become their
// flags ("prompt_lookup_first: true" -> "--prompt-lookup-first", "retrieval_first: false" -> "no
// --retrieval-first", "confidence_from_token: 2" -> "--confidence-from-token 2").
std::string with_flag_names(std::string message);

// Parses `args` with `desc`; returns false (after printing help) when --help was given.
// `positional`: the option that a bare argument fills (e.g. "config"); `help_notes`: printed
// between the usage line and the options; `positional_count`: how many bare arguments it takes
// (-1: all).
bool parse_or_help(const std::string& usage, po::options_description& desc, const std::vector<std::string>& args,
                   po::variables_map& vm, const std::string& positional = "", const std::string& help_notes = "",
                   int positional_count = 1);

// --threads: 0 (all cores) to kMaxThreads; validate_threads throws Error(kConfig) naming
// --threads otherwise (a huge count would fail only when the pool starts its threads).
constexpr int kMaxThreads = 1024;
void validate_threads(int threads);
void set_threads(int threads);  // validate_threads, then set_compute_threads
// SPECLAB_KERNEL_ISA=scalar|avx2|avx512|avx512vnni caps the CPU kernels' instruction set
// (models/llama/gemv.h): the best the CPU has by default. Lets a benchmark compare kernels in one
// binary. Throws Error(kConfig) for another value.
void apply_kernel_isa_env();

// Drafter flags shared by generate (and later run/check).
struct DrafterArgs {
  std::string drafter;  // empty = plain AR decoding
  std::string plugin;
  int gamma = 4;
  std::string schedule = "constant";
  double confidence_threshold = 0.0;
  int confidence_from_token = 1;
  int lookup_min = 1, lookup_max = 3;
  bool lookup_first = false;
  bool retrieval_first = false;
  std::string retrieval_datastore;  // with retrieval_first: "" = the target's default
  int fallback_gamma = 0;
  int retrieval_min = DrafterOptions{}.retrieval_min, retrieval_max = DrafterOptions{}.retrieval_max;
  std::string layers;   // layer_skip: "0-14" or "0,2,4"
  std::string draft_model, draft_format = "auto", draft_tokenizer;
  int64_t draft_vocab = 0;
  std::vector<std::string> params;  // key=value for plugins

  void add_to(po::options_description& desc);
  // Without --drafter, a drafter flag given on the command line would be ignored: throws
  // Error(kConfig) naming it. Call after parsing.
  void check_used(const po::variables_map& vm) const;
  // The options the flags give, validated; an error names the flag ("command line: --gamma: ...").
  DrafterOptions options() const;
  // Runs make() (creating the drafter) and rethrows an Error that names a drafter option by its
  // config key (draft_model, draft_vocab, ...) as one naming the flag that set it.
  template <class Make>
  auto named_by_flags(Make make) const -> decltype(make()) {
    try {
      return make();
    } catch (const Error& e) {
      throw flag_error(e);
    }
  }
  // `e` with its field renamed from a DrafterOptions key to its flag (and the file "drafter" to
  // "command line"); `e` itself when its field is no drafter option.
  static Error flag_error(const Error& e);

 private:
  std::vector<std::string> names_;  // the flags add_to() declared, for check_used()
};

int cmd_generate(const std::vector<std::string>& args);
int cmd_export(const std::vector<std::string>& args);
int cmd_bench(const std::vector<std::string>& args);
int cmd_run(const std::vector<std::string>& args);
int cmd_report(const std::vector<std::string>& args);
int cmd_check(const std::vector<std::string>& args);
int cmd_merge(const std::vector<std::string>& args);
int cmd_submit(const std::vector<std::string>& args);
int cmd_train_draft(const std::vector<std::string>& args);

// Prints the legend and the summary tables (overall; by category when there are several) to
// stdout, as `speclab run` and `speclab merge` end.
void print_summary(const ExperimentSummary& summary, const std::vector<PointRecord>& points);

// The source revision this binary was built from (scripts/build_revision.cmake): git HEAD, with
// "+dirty.<12 hex of git diff HEAD>" when tracked files differed, or "unknown". Results files
// record it as git_revision (until 2026-12-05 `git rev-parse` of the source tree at run time,
// which named the tree's later commits for an older binary).
std::string build_revision();
// The SpecLab source tree (the one holding analysis/report.py): $SPECLAB_SOURCE_DIR, the
// compile-time SPECLAB_SOURCE_DIR, or a parent of the executable; "" when none is found.
std::string source_dir();
// The Python that runs SpecLab's scripts (analysis/, scripts/llamacpp_bench.py): $SPECLAB_PYTHON,
// else /usr/bin/python3, the interpreter with Debian's h5py, matplotlib and numpy (scripts/setup.sh).
std::string python_interpreter();
// "<dir>/<stem>_report" for "<dir>/<stem>.h5".
std::string default_report_dir(const std::string& h5_path);
// Throws Error(kBadInput) naming `dir` and `option` unless `dir` is a writable directory or can be
// created (its nearest existing ancestor is a writable directory). `run` calls it before decoding.
void check_report_dir(const std::string& dir, const std::string& option);
// Runs analysis/report.py on an experiment file; prints the report path. Returns an exit code.
int run_report(const std::string& h5_path, const std::string& out_dir);

// An output flag (run's and submit's --output, check's --out): sets the config's output.path to
// `path` unless it is empty, in the config text the results file stores too (set_output_path),
// and checks it as `flag` (an error naming the config's output.path line blamed the file for the
// flag's value; check's named "output: path").
void apply_output_flag(ExperimentConfig& config, const std::string& path, const std::string& flag = "--output");

// `s` as one word for sh: single-quoted, each ' written as '\'' (submit's sbatch lines, bench's
// llama.cpp command line).
std::string shell_quote(const std::string& s);

}  // namespace speclab::cli
