// speclab run — run an experiment config (experiments/app/experiment_runner.h): record every
// prompt-run to HDF5, print the summary table, and generate the report.
//
// SIGINT / SIGTERM during the sweep: the runner stops after the prompt-run in progress (each one
// is committed to the file as it finishes), marks the file status "interrupted", and `speclab
// run` exits with 128 + the signal number (130 for Ctrl-C). A second signal ends it at once (the
// file still holds every prompt-run finished before). `--resume` continues either way.
#include <signal.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "experiments/speclab/cli.h"
#include "framework/core/printable_text.h"
#include "framework/core/error.h"
#include "framework/io/experiment_config.h"
#include "experiments/app/experiment_runner.h"

namespace speclab::cli {

namespace {

std::string clock_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long s = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%02ld:%02ld", s / 60, s % 60);
  return buf;
}

int terminal_columns() {
  struct winsize w {};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 20) return w.ws_col;
  return 80;
}

// Progress on stderr: a bar redrawn in place on a terminal, one plain line per prompt-run
// otherwise (logs, pipes).
class ProgressPrinter {
 public:
  ProgressPrinter() : tty_(isatty(STDERR_FILENO) != 0) {}

  void operator()(const ProgressEvent& e) {
    using K = ProgressEvent::Kind;
    switch (e.kind) {
      case K::kStart:
        line("experiment: " + std::to_string(e.total) + " prompt-runs" +
             (e.resumed ? " (" + std::to_string(e.resumed) + " already in the file, skipped)" : ""));
        break;
      case K::kPoint:
        line("sweep point #" + std::to_string(e.point) + (e.point_label.empty() ? "" : " (" + e.point_label + ")"));
        break;
      case K::kWarmup:
        if (tty_) bar(e, "warmup");
        break;
      case K::kRunDone: {
        const double rate = e.elapsed_seconds > 0 ? static_cast<double>(e.tokens) / e.elapsed_seconds : 0.0;
        if (tty_) {
          bar(e, "");
        } else {
          const RunRecord& r = *e.run;
          char buf[512];
          std::snprintf(buf, sizeof buf,
                        "[%lld/%lld] point #%lld prompt %s method %s repeat %lld: %lld tokens in %.3f s; %.1f tok/s "
                        "overall, ETA %s; commit %.2f ms, cpu %.2f ms",
                        static_cast<long long>(e.done), static_cast<long long>(e.total),
                        static_cast<long long>(r.key.point), r.prompt_id.c_str(), r.key.method.c_str(),
                        static_cast<long long>(r.key.repeat), static_cast<long long>(r.n_generated), r.wall_seconds,
                        rate, clock_text(e.eta_seconds).c_str(), 1e3 * e.commit_seconds,
                        1e3 * e.commit_cpu_seconds);
          line(buf);
        }
        break;
      }
    }
  }

  // Ends the in-place bar so that later output starts on a fresh line.
  void finish() {
    if (tty_ && drawn_) std::fputc('\n', stderr);
    drawn_ = false;
  }

 private:
  void line(const std::string& text) {
    finish();
    // One line whatever the prompt ids and labels hold (an id "y\n2" split it in two).
    std::fprintf(stderr, "%s\n", one_line(text).c_str());
    std::fflush(stderr);
  }

  void bar(const ProgressEvent& e, const std::string& note) {
    const double rate = e.elapsed_seconds > 0 ? static_cast<double>(e.tokens) / e.elapsed_seconds : 0.0;
    char tail[160];
    std::snprintf(tail, sizeof tail, " %lld/%lld prompt-runs  %.1f tok/s  ETA %s%s%s", static_cast<long long>(e.done),
                  static_cast<long long>(e.total), rate, clock_text(e.eta_seconds).c_str(), note.empty() ? "" : "  ",
                  note.c_str());
    const int width = std::max(10, terminal_columns() - static_cast<int>(std::string(tail).size()) - 3);
    const int filled = e.total > 0 ? static_cast<int>(width * e.done / e.total) : 0;
    std::string b = "\r[" + std::string(static_cast<size_t>(filled), '#') +
                    std::string(static_cast<size_t>(width - filled), '.') + "]" + tail;
    std::fputs(b.c_str(), stderr);
    std::fputs("\x1b[K", stderr);  // clear the rest of the line
    std::fflush(stderr);
    drawn_ = true;
  }

  bool tty_;
  bool drawn_ = false;
};

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) {
  g_stop_signal = sig;
  static const char msg[] = "\nspeclab run: stopping after the current prompt-run (again to quit at once)\n";
  ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
}

// SIGINT and SIGTERM set g_stop_signal while it lives (one-shot: the next one has the default
// effect); the previous handlers come back on destruction.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
    // A signal the parent ignores stays ignored (a job started with `&` from a script ignores
    // SIGINT): before 2026-12-06 it was ignored while the models loaded and stopped the sweep later.
    if (old_int_.sa_handler == SIG_IGN) sigaction(SIGINT, &old_int_, nullptr);
    if (old_term_.sa_handler == SIG_IGN) sigaction(SIGTERM, &old_term_, nullptr);
  }
  ~StopSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

}  // namespace

int cmd_run(const std::vector<std::string>& args) {
  std::string config_path, output, report_dir, shard_text;
  std::vector<std::string> overrides;
  std::string device;
  bool resume = false, overwrite = false, no_report = false;
  int threads = 0;
  po::options_description desc("speclab run");
  desc.add_options()
      ("config", po::value(&config_path), "experiment YAML (positional)")
      ("set", po::value(&overrides)->composing(), "override a config key: --set key=value (repeatable)")
      ("device", po::value(&device), "cpu | cuda | cuda:N: shorthand for --set models.target.device=...")
      ("output,o", po::value(&output), "HDF5 output path (default: the config's output.path)")
      ("resume", po::bool_switch(&resume), "continue an interrupted run: skip the prompt-runs already in the file")
      ("overwrite", po::bool_switch(&overwrite), "replace an existing output file")
      ("shard", po::value(&shard_text), "run shard i of n (0-based, 0 <= i < n): its share of the (point, prompt, "
                                        "repeat) groups; merge the shard files with `speclab merge`")
      ("no-report", po::bool_switch(&no_report), "do not generate the report (plots + report.md)")
      ("report-dir", po::value(&report_dir), "report directory (default: <output stem>_report beside the file)")
      ("threads", po::value(&threads)->default_value(threads), "CPU threads for the model kernels and libtorch (0 = all cores)");
  po::variables_map vm;
  const char* usage =
      "usage: speclab run CONFIG.yaml [--set key=value ...] [--output FILE.h5] [--resume | --overwrite] [--shard i/n]";
  if (!parse_or_help(usage, desc, args, vm, "config")) return kExitOk;
  if (config_path.empty()) throw Error(ErrorKind::kConfig, "expected a config file, found none", "command line", "CONFIG");
  if (resume && overwrite)
    throw Error(ErrorKind::kConfig, "expected at most one of --resume and --overwrite, found both", "command line");
  for (const char* opt : {"output", "report-dir"})
    if (vm.count(opt) && vm[opt].as<std::string>().empty())
      throw Error(ErrorKind::kConfig, std::string("expected a path, found an empty one"), "command line",
                  std::string("--") + opt);
  if (no_report && vm.count("report-dir"))
    throw Error(ErrorKind::kConfig,
                "expected --report-dir or --no-report, found both (--no-report writes no report, so the directory "
                "would be ignored)",
                "command line", "--report-dir");
  const ShardSpec shard = shard_text.empty() ? ShardSpec{} : parse_shard(shard_text);
  set_threads(threads);

  add_device_override(overrides, device, config_path);
  ExperimentConfig config = [&] {
    try {
      return load_experiment_config(config_path, overrides);
    } catch (const Error& e) {
      throw device_flag_error(e, device);
    }
  }();
  try {
    require_drafters(config);  // before the output path is touched
  } catch (const Error& e) {  // located where `drafters` is written: the file's line, or the --set
    throw located_config_error(e, config_path, overrides);
  }
  for (const std::string& w : run_config_warnings(config)) std::fprintf(stderr, "warning: %s\n", w.c_str());
  apply_output_flag(config, output);
  // A report directory that cannot be made is found now, not after the whole run (after the
  // output path, whose error is the more useful one when its directory is missing).
  check_output_path(config.output.path,
                    resume ? OutputMode::kResume : overwrite ? OutputMode::kOverwrite : OutputMode::kCreate);
  if (!no_report)
    check_report_dir(report_dir.empty() ? default_report_dir(config.output.path) : report_dir,
                     report_dir.empty() ? "output.path" : "--report-dir");

  RunnerOptions ropts;
  ropts.mode = resume ? OutputMode::kResume : overwrite ? OutputMode::kOverwrite : OutputMode::kCreate;
  ropts.git_revision = build_revision();
  ropts.shard = shard;
  ProgressPrinter progress;
  ropts.on_progress = [&progress](const ProgressEvent& e) { progress(e); };
  ropts.stop_requested = [] { return g_stop_signal != 0; };
  ExperimentOutcome out;
  {
    StopSignals signals;
    try {
      out = run_experiment(config, ropts);
    } catch (const Error& e) {
      progress.finish();
      throw located_config_error(e, config_path, overrides);
    } catch (...) {
      progress.finish();
      throw;
    }
  }
  progress.finish();
  if (out.interrupted) {
    const int sig = g_stop_signal ? static_cast<int>(g_stop_signal) : SIGINT;
    std::error_code ec;
    if (!std::filesystem::exists(out.output_path, ec))  // stopped before the first commit made the file
      std::fprintf(stderr, "interrupted before the first prompt-run was recorded: no file written at %s\n",
                   out.output_path.c_str());
    else
      std::fprintf(stderr, "interrupted: %lld prompt-runs in %s (%lld recorded now); continue with --resume\n",
                   static_cast<long long>(out.runs_resumed + out.runs_recorded), out.output_path.c_str(),
                   static_cast<long long>(out.runs_recorded));
    return 128 + sig;
  }

  std::printf("\nsummary: %s (%lld prompt-runs recorded now, %lld resumed)\n", out.output_path.c_str(),
              static_cast<long long>(out.runs_recorded), static_cast<long long>(out.runs_resumed));
  print_summary(out.summary, out.points);
  // A signal after the last prompt-run (while the summary was written): the file is complete, and
  // the user asked to stop, so the report is not made (until 2026-12-06 the signal was announced
  // as "stopping", then the report ran and the exit code was 0).
  if (g_stop_signal != 0) {
    std::fprintf(stderr,
                 "interrupted after the last prompt-run: %s is complete; no report made (speclab report %s)\n",
                 out.output_path.c_str(), out.output_path.c_str());
    return 128 + static_cast<int>(g_stop_signal);
  }

  if (no_report) return kExitOk;
  if (report_dir.empty()) report_dir = default_report_dir(out.output_path);
  return run_report(out.output_path, report_dir);
}

}  // namespace speclab::cli
