// install_plugin_crash_report() — one line on stderr when a drafter plugin's code crashes.
//
// A segfault or abort() inside a plugin's propose() killed `speclab` with no word (exit 139 or
// 134): nothing said the fault was in the plugin, nor in which method. Once installed, a fatal
// signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT) that arrives while a plugin call runs
// (plugin_call_in_progress(), framework/draft/plugin_loader.h) prints
//   error: <plugin.so>: <method>: the plugin crashed in <name>.<method>() (SIGSEGV)
// and then the signal takes its earlier course (the default: the process dies by it, with a
// core where enabled; or a handler installed before, e.g. a sanitizer's). Outside plugin calls
// nothing is printed. The handler only reads an atomic pointer and calls write(2).
#pragma once

namespace speclab::cli {

void install_plugin_crash_report();

}  // namespace speclab::cli
