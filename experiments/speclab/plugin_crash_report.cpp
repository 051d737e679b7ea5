#include "experiments/speclab/plugin_crash_report.h"

#include <signal.h>
#include <unistd.h>

#include <cstring>

#include "framework/draft/plugin_loader.h"

namespace speclab::cli {

namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
struct sigaction g_previous[sizeof kSignals / sizeof kSignals[0]];

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "a fatal signal";
  }
}

void say(const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

void on_fatal_signal(int sig, siginfo_t* info, void*) {
  if (const char* call = plugin_call_in_progress()) {
    say("error: ");
    say(call);
    say(" (");
    say(signal_name(sig));
    say(")\n");
  }
  // Back to what was there before; a fault re-executes and meets it, a raised signal is raised
  // again (abort() raises SIGABRT once more itself).
  for (size_t i = 0; i < sizeof kSignals / sizeof kSignals[0]; ++i)
    if (kSignals[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  if (info == nullptr || info->si_code <= 0) ::raise(sig);
}

}  // namespace

void install_plugin_crash_report() {
  // The handler runs on a stack of its own: a plugin that overflowed the thread's stack died in
  // the handler, silently (until 2026-12-06). The calling (main) thread's, where plugins run.
  static char alternate_stack[64 * 1024];
  stack_t ss {};
  ss.ss_sp = alternate_stack;
  ss.ss_size = sizeof alternate_stack;
  ss.ss_flags = 0;
  const bool on_own_stack = ::sigaltstack(&ss, nullptr) == 0;
  for (size_t i = 0; i < sizeof kSignals / sizeof kSignals[0]; ++i) {
    struct sigaction sa {};
    sa.sa_sigaction = &on_fatal_signal;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | (on_own_stack ? SA_ONSTACK : 0);
    sigemptyset(&sa.sa_mask);
    ::sigaction(kSignals[i], &sa, &g_previous[i]);
  }
}

}  // namespace speclab::cli
