#include "framework/core/rng.h"

namespace speclab {

namespace {
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t derived_seed(uint64_t seed, uint64_t index) {
  if (index == 0) return seed;
  uint64_t state = seed ^ (index * 0x9e3779b97f4a7c15ULL);
  return splitmix64(state);
}

Rng::Rng(uint64_t seed) {
  uint64_t sm = seed;
  for (auto& word : s_) word = splitmix64(sm);
  // splitmix64 is a bijection of its counter, so four consecutive outputs are never all zero
  // (the one state xoshiro cannot leave).
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() {
  // 2^-53 as an exact double literal.
  return static_cast<double>(next_u64() >> 11) * 0x1.0p-53;
}

void Rng::jump() {
  static constexpr uint64_t kJump[4] = {0x180ec6d33cfd0abaULL, 0xd5a61266f0c9392cULL, 0xa9582618e03fc9aaULL,
                                        0x39abdc4529b1661cULL};
  std::array<uint64_t, 4> acc{0, 0, 0, 0};
  for (uint64_t word : kJump)
    for (int b = 0; b < 64; ++b) {
      if (word & (uint64_t{1} << b))
        for (std::size_t i = 0; i < 4; ++i) acc[i] ^= s_[i];
      next_u64();
    }
  s_ = acc;
}

Rng Rng::stream(uint64_t seed, uint64_t id) {
  Rng r(seed);
  for (uint64_t i = 0; i < id; ++i) r.jump();
  return r;
}

}  // namespace speclab
