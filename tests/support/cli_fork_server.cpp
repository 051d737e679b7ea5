// speclab_fork_server: the `speclab` program (experiments/speclab/entry.h) for the tests that run
// hundreds of command lines (tests/bad_inputs/cli_process.h, run_cli).
//
// Each `speclab` process spends about 0.7 s of CPU before it reads an argument: the dynamic
// loader over the ~290 shared libraries Debian's libtorch pulls in, and libtorch's operator
// registration. With `--serve` this program pays that once: it reads requests on stdin, forks
// for each, and the child runs the command line through the same entry() as `speclab` (the same
// objects, speclab_cli), so exit codes, stdout, stderr and fatal signals are those of a process
// of its own. Without `--serve` it is `speclab` (a command line it is given runs as there; a
// `speclab submit` it runs writes its own path into the job script, as speclab writes its own).
//
// The child starts from the server as static initialisation left it: the server runs nothing
// else, starts no thread of its own (OpenBLAS's, where its library started them, it shuts down
// itself at fork), and reads its requests with read(2).
//
// Request, on stdin: fields, each "<decimal byte count>\n<bytes>", in this order:
//   timeout in seconds (SIGKILL after it), working directory, stdout path, stderr path,
//   n_env, then n_env "NAME=value" strings (the child's whole environment),
//   n_args, then n_args arguments (the first is argv[0]).
// The child's stdin is /dev/null, its stdout and stderr the two files (created, truncated).
// Reply, on stdout, one line: "exit <code>", "signal <number>" or "timeout".
// End of input ends the server.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "experiments/speclab/entry.h"
#include "framework/core/blas_core.h"

namespace {

// Reads exactly n bytes from fd 0; false at end of input.
bool read_exact(char* p, size_t n) {
  while (n > 0) {
    const ssize_t got = ::read(0, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

// One field: "<count>\n<bytes>".
bool read_field(std::string& out) {
  std::string count;
  for (char c = 0;;) {
    if (!read_exact(&c, 1)) return false;
    if (c == '\n') break;
    if (c < '0' || c > '9' || count.size() > 12) return false;
    count += c;
  }
  if (count.empty()) return false;
  out.assign(std::stoull(count), '\0');
  return out.empty() || read_exact(&out[0], out.size());
}

bool read_list(std::vector<std::string>& out) {
  std::string n;
  if (!read_field(n) || n.empty() || n.size() > 6 || n.find_first_not_of("0123456789") != std::string::npos) return false;
  out.resize(std::stoul(n));
  for (std::string& s : out)
    if (!read_field(s)) return false;
  return true;
}

void reply(const std::string& line) {
  const std::string l = line + "\n";
  for (size_t done = 0; done < l.size();) {
    const ssize_t w = ::write(1, l.data() + done, l.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) std::_Exit(1);
    done += static_cast<size_t>(w);
  }
}

[[noreturn]] void run_child(const std::string& cwd, const std::string& out, const std::string& err,
                            std::vector<std::string>& env, std::vector<std::string>& args) {
  const int in = ::open("/dev/null", O_RDONLY);
  const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (in < 0 || o < 0 || e < 0 || ::dup2(in, 0) < 0 || ::dup2(o, 1) < 0 || ::dup2(e, 2) < 0) std::_Exit(126);
  ::close(in);
  ::close(o);
  ::close(e);
  if (::chdir(cwd.c_str()) != 0) std::_Exit(126);
  // The OpenBLAS core the server started with stays (an exec'd speclab would set the same one
  // and execute itself again).
  const char* core = std::getenv("OPENBLAS_CORETYPE");
  const std::string kept = core ? core : "";
  ::clearenv();
  for (std::string& kv : env) ::putenv(&kv[0]);  // env outlives the child's run
  if (core && !std::getenv("OPENBLAS_CORETYPE")) ::setenv("OPENBLAS_CORETYPE", kept.c_str(), 1);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(&a[0]);
  argv.push_back(nullptr);
  // As main() returning would: static destructors, stdio flushed.
  std::exit(speclab::cli::entry(static_cast<int>(args.size()), argv.data()));
}

int serve(char** argv) {
  // The OpenBLAS core, as speclab's main() picks it (may execute this program again); the
  // children then find it in their environment.
  speclab::select_native_blas_core(argv);
  std::signal(SIGPIPE, SIG_IGN);
  for (;;) {
    std::string timeout, cwd, out, err;
    std::vector<std::string> env, args;
    if (!read_field(timeout)) return 0;
    if (!read_field(cwd) || !read_field(out) || !read_field(err) || !read_list(env) || !read_list(args) ||
        args.empty() || timeout.empty() || timeout.find_first_not_of("0123456789") != std::string::npos) {
      std::fprintf(stderr, "speclab_fork_server: malformed request\n");
      return 2;
    }
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      reply("error fork: " + std::string(std::strerror(errno)));
      continue;
    }
    if (pid == 0) run_child(cwd, out, err, env, args);
    timespec start{};
    ::clock_gettime(CLOCK_MONOTONIC, &start);
    const double limit = std::stod(timeout);
    int status = 0;
    bool timed_out = false, lost = false;
    for (long wait_ns = 200000;;) {
      const pid_t got = ::waitpid(pid, &status, WNOHANG);
      if (got == pid) break;
      if (got < 0 && errno != EINTR) {
        lost = true;
        break;
      }
      timespec now{};
      ::clock_gettime(CLOCK_MONOTONIC, &now);
      if (!timed_out && (now.tv_sec - start.tv_sec) + 1e-9 * (now.tv_nsec - start.tv_nsec) > limit) {
        timed_out = true;
        ::kill(pid, SIGKILL);
      }
      const timespec pause{0, wait_ns};
      ::nanosleep(&pause, nullptr);
      if (wait_ns < 5000000) wait_ns *= 2;  // 0.2 ms doubling to 5 ms
    }
    if (lost)
      reply("error waitpid: " + std::string(std::strerror(errno)));
    else if (timed_out)
      reply("timeout");
    else if (WIFEXITED(status))
      reply("exit " + std::to_string(WEXITSTATUS(status)));
    else if (WIFSIGNALED(status))
      reply("signal " + std::to_string(WTERMSIG(status)));
    else
      reply("error status " + std::to_string(status));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--serve") == 0) return serve(argv);
  return speclab::cli::entry(argc, argv);
}
