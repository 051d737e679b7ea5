// Runs the `speclab` program (SPECLAB_CLI) as a subprocess for the command-line tests
// (test_cli, test_bad_inputs, test_crash_safety, test_shards, ...): stdout and stderr captured apart, the exit
// status or the signal that ended it, a timeout, and two hooks — code to run in the child before
// exec (resource limits, signal dispositions), and a callback on every chunk of stderr (to signal
// the process once it reports progress).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

namespace speclab::testing {

struct RunResult {
  std::string command;  // for messages
  bool exited = false;  // normal exit (not killed by a signal)
  int exit_code = -1;
  int signal = 0;       // the signal that ended it, when !exited
  bool timed_out = false;
  std::string out, err;
};

struct RunOptions {
  int timeout_s = 120;                   // SIGKILL after this long
  std::function<void()> in_child;        // runs after fork, before exec
  std::function<void(pid_t, const std::string&)> on_stderr;  // (pid, stderr so far) after each read
};

inline std::string describe(const RunResult& r) {
  std::ostringstream s;
  s << "command: " << r.command << "\n";
  if (r.exited)
    s << "exit code " << r.exit_code;
  else
    s << "killed by signal " << r.signal << (r.timed_out ? " (timed out)" : "");
  s << "\nstderr:\n" << r.err << "\nstdout:\n" << r.out.substr(0, 2000);
  return s.str();
}

// Whether `s` is valid UTF-8 (RFC 3629), by decoding each sequence: the code point of an n-byte
// sequence must need n bytes, lie outside the surrogates and be at most U+10FFFF.
inline bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + static_cast<size_t>(n) > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1fu) : n == 3 ? (c & 0x0fu) : (c & 0x07u);
    for (int k = 1; k < n; ++k) {
      const unsigned char d = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if ((d >> 6) != 2) return false;
      cp = (cp << 6) | (d & 0x3fu);
    }
    const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Runs the program at path `cli` (e.g. /usr/bin/python3) with `args`.
inline RunResult run_program(const std::string& cli, const std::vector<std::string>& args, const RunOptions& opt = {}) {
  RunResult r;
  r.command = cli;
  for (const auto& a : args) r.command += " '" + (a.size() > 80 ? a.substr(0, 80) + "...'" : a + "'");
  int out_pipe[2], err_pipe[2];
  REQUIRE(::pipe(out_pipe) == 0);
  REQUIRE(::pipe(err_pipe) == 0);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(cli.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    ::setenv("SPECLAB_SHARED_DIR", SPECLAB_SHARED_DIR, 1);
    if (opt.in_child) opt.in_child();
    ::execv(cli.c_str(), argv.data());
    _exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opt.timeout_s);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    const int n = ::poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n >= 0);
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[8192];
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        sinks[i]->append(buf, static_cast<size_t>(got));
        if (i == 1 && opt.on_stderr) opt.on_stderr(pid, r.err);
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.exited = WIFEXITED(status);
  if (r.exited) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

#ifdef SPECLAB_CLI_SERVER
// The fork server (tests/support/cli_fork_server.cpp), started on first use and ended with the
// test process: run() sends it one command line and returns what its forked child did.
class CliForkServer {
 public:
  static CliForkServer& get() {
    static CliForkServer server;
    return server;
  }

  RunResult run(const std::vector<std::string>& args, int timeout_s) {
    RunResult r;
    r.command = std::string(SPECLAB_CLI);
    for (const auto& a : args) r.command += " '" + (a.size() > 80 ? a.substr(0, 80) + "...'" : a + "'");
    std::string req;
    auto field = [&req](const std::string& f) { req += std::to_string(f.size()) + "\n" + f; };
    field(std::to_string(timeout_s));
    char cwd[4096];
    REQUIRE(::getcwd(cwd, sizeof cwd) != nullptr);
    field(cwd);
    field(out_);
    field(err_);
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e)
      if (std::string(*e).rfind("SPECLAB_SHARED_DIR=", 0) != 0) env.push_back(*e);
    env.push_back(std::string("SPECLAB_SHARED_DIR=") + SPECLAB_SHARED_DIR);  // as run_program sets it
    field(std::to_string(env.size()));
    for (const auto& e : env) field(e);
    field(std::to_string(args.size() + 1));
    field(SPECLAB_CLI);  // argv[0]: the speclab binary's path, as an exec gives it
    for (const auto& a : args) field(a);
    for (size_t done = 0; done < req.size();) {
      const ssize_t w = ::write(to_, req.data() + done, req.size() - done);
      if (w < 0 && errno == EINTR) continue;
      INFO("writing to the fork server " << SPECLAB_CLI_SERVER);
      REQUIRE(w > 0);
      done += static_cast<size_t>(w);
    }
    std::string line;
    for (char buf[64]; line.empty() || line.back() != '\n';) {  // the reply is one short line
      const ssize_t got = ::read(from_, buf, sizeof buf);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) FAIL("the fork server " << SPECLAB_CLI_SERVER << " ended without a reply to " << r.command);
      line.append(buf, static_cast<size_t>(got));
    }
    line.pop_back();
    r.out = slurp(out_);
    r.err = slurp(err_);
    if (line.rfind("exit ", 0) == 0) {
      r.exited = true;
      r.exit_code = std::stoi(line.substr(5));
    } else if (line.rfind("signal ", 0) == 0) {
      r.signal = std::stoi(line.substr(7));
    } else if (line == "timeout") {
      r.timed_out = true;
      r.signal = SIGKILL;
    } else {
      FAIL("the fork server: " << line << " (" << r.command << ")");
    }
    return r;
  }

 private:
  CliForkServer() {
    dir_ = std::string(SPECLAB_BINARY_DIR) + "/test_tmp/cli_fork_" + std::to_string(::getpid());
    std::filesystem::create_directories(dir_);
    out_ = dir_ + "/stdout";
    err_ = dir_ + "/stderr";
    int to[2], from[2];
    REQUIRE(::pipe2(to, O_CLOEXEC) == 0);
    REQUIRE(::pipe2(from, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(to[0], 0);
      ::dup2(from[1], 1);
      const char* argv[] = {SPECLAB_CLI_SERVER, "--serve", nullptr};
      ::execv(argv[0], const_cast<char**>(argv));
      _exit(127);
    }
    ::close(to[0]);
    ::close(from[1]);
    to_ = to[1];
    from_ = from[0];
  }
  ~CliForkServer() {
    ::close(to_);  // end of input ends the server
    ::close(from_);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    std::remove(out_.c_str());
    std::remove(err_.c_str());
    ::rmdir(dir_.c_str());
  }
  static std::string slurp(const std::string& path) {
    std::string s;
    if (FILE* f = std::fopen(path.c_str(), "rb")) {
      char buf[8192];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
      std::fclose(f);
    }
    return s;
  }

  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  std::string dir_, out_, err_;
};
#endif

// Runs SPECLAB_CLI with `args`. Without hooks (in_child, on_stderr) the command line runs in a
// child of the fork server (SPECLAB_CLI_SERVER: the same program, its start paid once per test
// process); SPECLAB_TEST_EXEC=1 in the environment executes the binary for every call instead.
inline RunResult run_cli(const std::vector<std::string>& args, const RunOptions& opt = {}) {
#ifdef SPECLAB_CLI_SERVER
  if (!opt.in_child && !opt.on_stderr && !std::getenv("SPECLAB_TEST_EXEC"))
    return CliForkServer::get().run(args, opt.timeout_s);
#endif
  return run_program(SPECLAB_CLI, args, opt);
}

// The bad-input contract: exit code `code`, exactly one "error: ..." line on stderr containing
// every one of `needles`, nothing on stdout, no crash artefacts (signal, "terminate called",
// libtorch's "Exception raised from", "internal error").
inline void check_bad_input(const RunResult& r, const std::vector<std::string>& needles, int code = 2) {
  INFO(describe(r));
  CHECK(r.exited);  // not killed by a signal (SIGABRT from an uncaught exception, SIGSEGV, ...)
  CHECK(r.exit_code == code);
  CHECK(lines_of(r.err).size() == 1);
  CHECK(valid_utf8(r.err));  // bytes of a non-UTF-8 input are escaped, not echoed
  CHECK(!r.err.empty());
  CHECK(r.err.back() == '\n');
  CHECK(r.err.rfind("error: ", 0) == 0);
  CHECK(r.err.find("terminate called") == std::string::npos);
  CHECK(r.err.find("Exception raised from") == std::string::npos);
  CHECK(r.err.find("internal error") == std::string::npos);
  CHECK(r.out.empty());
  for (const auto& needle : needles) {
    INFO("expected in stderr: " << needle);
    CHECK(r.err.find(needle) != std::string::npos);
  }
}

}  // namespace speclab::testing
