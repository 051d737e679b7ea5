// speclab::Rng — the one seeded random number generator of SpecLab.
//
// xoshiro256** 1.0 (Blackman & Vigna, "Scrambled linear pseudorandom number generators",
// ACM TOMS 2021; https://prng.di.unimi.it/xoshiro256starstar.c), its 256-bit state filled by
// four consecutive outputs of splitmix64 started at `seed` (the seeding the authors recommend).
//
// The stream is a pure function of the seed, identical on every platform and compiler: only
// 64-bit integer arithmetic is used, and uniform() converts the top 53 bits exactly. Do not
// wrap it in <random> distributions, whose algorithms differ between standard libraries.
//
// Every sampling and acceptance function documents how many uniform() draws it makes, so
// that runs are reproducible and draws can be counted.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace speclab {

// splitmix64 (Steele, Lea & Flood 2014): advances `state` by 0x9e3779b97f4a7c15 and returns
// the mixed value. Exposed so that tests and seed derivations can use the same function.
uint64_t splitmix64(uint64_t& state);

// Seed number `index` derived from `seed`: `seed` itself at index 0, else one splitmix64 output
// of seed ^ (index * 0x9e3779b97f4a7c15). `speclab run` seeds repeat r of a sampled run with
// derived_seed(sampling.seed, r), so repeats are independent draws and one repeat draws as the
// seed alone does.
uint64_t derived_seed(uint64_t seed, uint64_t index);

class Rng {
 public:
  explicit Rng(uint64_t seed);
  // Resumes from a state() taken earlier (not all zero: the one state xoshiro cannot leave).
  explicit Rng(const std::array<uint64_t, 4>& state) : s_(state) {}

  // The next 64-bit output of xoshiro256**.
  uint64_t next_u64();

  // A double in [0, 1): (next_u64() >> 11) * 2^-53, one next_u64() per call.
  double uniform();

  // Advances the state by 2^128 next_u64() calls (the authors' jump polynomial), so that
  // 2^128 non-overlapping streams of 2^128 draws each can be split from one seed.
  void jump();

  // Stream `id` of `seed`: Rng(seed) advanced by `id` jumps. Stream 0 is Rng(seed) itself (the
  // verifier's and AR's stream); stream 1 is the drafter's. Streams never overlap.
  static Rng stream(uint64_t seed, uint64_t id);

  // The raw state, for checkpointing and for comparing two generators.
  const std::array<uint64_t, 4>& state() const { return s_; }

 private:
  std::array<uint64_t, 4> s_;
};

}  // namespace speclab
