// sampling_bench: logits_to_probs (framework/sampling/sampling.h) per row, for the sampling settings
// a run uses, on every vector path the CPU has (max_lanes 16: AVX-512, 8: AVX2, 1: scalar), and
// sample() on the result.
//
//   build/sampling_bench [--vocab 49152] [--reps 7] [--calls 100]
//
// Logits are normal(0, 3) (about the spread of SmolLM2's LM head), fixed seed. Each figure is the
// best of `reps` batches of `calls` calls, microseconds per row. A timing program, not a test.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "framework/core/rng.h"
#include "framework/sampling/sampling.h"

using namespace speclab;

namespace {

template <class F>
double best_us(int reps, int calls, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / calls);
  }
  return best * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t vocab = 49152;
  int reps = 7, calls = 100;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "usage: sampling_bench [--vocab N] [--reps R] [--calls C]\n");
      return 2;
    }
    if (a == "--vocab") vocab = std::atoll(argv[++i]);
    else if (a == "--reps") reps = std::atoi(argv[++i]);
    else if (a == "--calls") calls = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "sampling_bench: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (vocab < 1 || reps < 1 || calls < 1) {
    std::fprintf(stderr, "sampling_bench: expected --vocab, --reps and --calls >= 1\n");
    return 2;
  }
  std::mt19937 g(1);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (float& x : logits) x = nd(g);
  struct Setting {
    const char* name;
    double t, top_p;
    int64_t top_k;
  };
  const Setting settings[] = {{"T 1", 1.0, 1.0, 0},          {"T 0.7", 0.7, 1.0, 0},
                              {"T 0.7 top-p 0.9", 0.7, 0.9, 0}, {"T 1 top-p 0.95", 1.0, 0.95, 0},
                              {"T 0.7 top-k 20", 0.7, 1.0, 20}, {"T 1 top-k 50 top-p 0.9", 1.0, 0.9, 50}};
  std::printf("sampling_bench: vocab %lld, best of %d x %d calls, us per row\n", static_cast<long long>(vocab), reps,
              calls);
  std::printf("%-26s %12s %12s %12s %12s\n", "setting", "AVX-512", "AVX2", "scalar", "sample()");
  std::vector<float> p;
  Rng rng(1);
  for (const Setting& s : settings) {
    SamplingOptions o;
    o.temperature = s.t;
    o.top_p = s.top_p;
    o.top_k = s.top_k;
    double us[3];
    const int lanes[3] = {16, 8, 1};
    for (int k = 0; k < 3; ++k)
      us[k] = best_us(reps, calls, [&] { logits_to_probs(logits.data(), vocab, o, p, lanes[k]); });
    logits_to_probs(logits.data(), vocab, o, p);
    const double us_sample = best_us(reps, calls, [&] { (void)sample(p, rng); });
    std::printf("%-26s %12.1f %12.1f %12.1f %12.1f\n", s.name, us[0], us[1], us[2], us_sample);
  }
  std::printf("(a path the CPU lacks falls back to the next narrower one; with top-k every path is the same code)\n");
  return 0;
}
