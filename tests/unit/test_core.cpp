// Tests of framework/core: Rng against outputs published by other implementations of the same
// algorithms, and the Error contract of error.h (kind, file, field, message, what()).
//
// test_sampling.cpp checks Rng against our own Python re-implementation; the references here
// were computed by other people's code:
//   - splitmix64 from state 1234567: the five values of Rosetta Code's task
//     "Pseudo-random numbers/Splitmix64" (also asserted by archi-Doc/Arc.Crypto's tests).
//   - Rng(1234).state(): PHP's \Random\Engine\Xoshiro256StarStar(1234), which also fills its
//     state with four splitmix64 outputs; php-src's ext/random/tests/02_engine/
//     xoshiro256starstar_serialize.phpt publishes that state as little-endian hex words.
//   - Rng(42) outputs: archi-Doc/Arc.Crypto's Xoshiro256StarStarTest (C#, splitmix64 seeding,
//     NextDouble = (next >> 11) * 2^-53), five doubles printed with 16 decimals and then five
//     raw 64-bit outputs of the same stream.
#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>

#include "framework/core/ab_variant.h"
#include "framework/core/blas_core.h"
#include "framework/core/error.h"
#include "framework/core/file_fingerprint.h"
#include "framework/core/fnv.h"
#include "framework/core/replace_file.h"
#include "framework/core/rng.h"
#include "framework/core/utf8_check.h"

using namespace speclab;

TEST_CASE("splitmix64 matches Rosetta Code's published values for seed 1234567", "[core][rng]") {
  uint64_t state = 1234567;
  const uint64_t want[] = {6457827717110365317ULL, 3203168211198807973ULL, 9817491932198370423ULL,
                           4593380528125082431ULL, 16408922859458223821ULL};
  for (uint64_t w : want) REQUIRE(splitmix64(state) == w);
  // The state is a Weyl sequence: it advanced by exactly five golden-ratio increments.
  CHECK(state == 1234567ULL + 5 * 0x9e3779b97f4a7c15ULL);
}

TEST_CASE("Rng seeds its state like PHP's Xoshiro256StarStar", "[core][rng]") {
  // php-src serializes the state words as little-endian bytes: "db1c182f1bf60cbb" is
  // 0xbb0cf61b2f181cdb.
  const std::array<uint64_t, 4> php_1234 = {0xbb0cf61b2f181cdbULL, 0x97c7a1364df06524ULL,
                                            0x33befae49bc025daULL, 0x4e6241f252d0a033ULL};
  CHECK(Rng(1234).state() == php_1234);
  CHECK(Rng(1235).state() != php_1234);
}

TEST_CASE("Rng(42) reproduces Arc.Crypto's xoshiro256starstar stream", "[core][rng]") {
  Rng rng(42);
  // Printed with "F16"; uniform() has 53 significant bits, so 16 decimals pin it to within
  // half a unit of the last printed digit.
  const double doubles[] = {0.0838629710598822, 0.3789802506626686, 0.6800434110281394,
                            0.9246929453253876, 0.9918039142821028};
  for (double w : doubles) {
    const double u = rng.uniform();
    CHECK(std::fabs(u - w) <= 0.5e-16);
  }
  const uint64_t raw[] = {14199186830065750584ULL, 13267978908934200754ULL, 15679888225317814407ULL,
                          14044878350692344958ULL, 10760895422300929085ULL};
  for (uint64_t w : raw) CHECK(rng.next_u64() == w);
}

// xoshiro256**'s state transition is linear over GF(2): as a 256 x 256 bit matrix T (column i =
// the state after one step from unit state e_i), jump() must equal T^(2^128), computed here by
// squaring T 128 times. A wrong jump constant or loop fails this.
namespace {
using State = std::array<uint64_t, 4>;
using BitMatrix = std::array<State, 256>;  // column i
State mat_vec(const BitMatrix& m, const State& v) {
  State out{0, 0, 0, 0};
  for (int i = 0; i < 256; ++i)
    if (v[static_cast<size_t>(i / 64)] >> (i % 64) & 1u)
      for (size_t w = 0; w < 4; ++w) out[w] ^= m[static_cast<size_t>(i)][w];
  return out;
}
BitMatrix multiply(const BitMatrix& a, const BitMatrix& b) {  // a * b
  BitMatrix out{};
  for (size_t j = 0; j < 256; ++j) out[j] = mat_vec(a, b[j]);
  return out;
}
}  // namespace

TEST_CASE("Rng::jump() advances the state by exactly 2^128 steps, stream 1 is one jump", "[core][rng]") {
  BitMatrix t{};
  for (int i = 0; i < 256; ++i) {
    State unit{0, 0, 0, 0};
    unit[static_cast<size_t>(i / 64)] = uint64_t{1} << (i % 64);
    Rng r(unit);
    r.next_u64();
    t[static_cast<size_t>(i)] = r.state();
  }
  BitMatrix jump = t;
  for (int k = 0; k < 128; ++k) jump = multiply(jump, jump);  // T^(2^128)
  for (uint64_t seed : {1ull, 42ull, 0x5eedull}) {
    Rng a(seed);
    Rng b = a;
    b.jump();
    CHECK(b.state() == mat_vec(jump, a.state()));
    CHECK(Rng::stream(seed, 0).state() == a.state());
    CHECK(Rng::stream(seed, 1).state() == b.state());
    Rng c = b;
    c.jump();
    CHECK(Rng::stream(seed, 2).state() == c.state());
  }
  // The transition itself: T applied to a state equals one next_u64() step.
  Rng d(7);
  const State before = d.state();
  d.next_u64();
  CHECK(d.state() == mat_vec(t, before));
}

TEST_CASE("Error carries its kind, file, field and message, and what() joins the non-empty ones",
          "[core][error]") {
  const Error full(ErrorKind::kConfig, "expected > 0, found -3", "run.yaml", "kv.block_size");
  CHECK(full.kind() == ErrorKind::kConfig);
  CHECK(full.file() == "run.yaml");
  CHECK(full.field() == "kv.block_size");
  CHECK(full.message() == "expected > 0, found -3");
  CHECK(std::string(full.what()) == "run.yaml: kv.block_size: expected > 0, found -3");

  CHECK(std::string(Error(ErrorKind::kIo, "m", "f.bin").what()) == "f.bin: m");
  CHECK(std::string(Error(ErrorKind::kIo, "m", {}, "key").what()) == "key: m");
  const Error bare(ErrorKind::kResource, "out of blocks");
  CHECK(std::string(bare.what()) == "out of blocks");
  CHECK(bare.file().empty());
  CHECK(bare.field().empty());

  // Front ends catch it as a std::runtime_error too.
  try {
    throw Error(ErrorKind::kBadInput, "bad", "x", "y");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "x: y: bad");
  }
}

TEST_CASE("every ErrorKind has its own name", "[core][error]") {
  const ErrorKind kinds[] = {ErrorKind::kBadInput, ErrorKind::kUnsupported, ErrorKind::kConfig,
                             ErrorKind::kIo,       ErrorKind::kResource,    ErrorKind::kInternal};
  std::set<std::string> names;
  for (ErrorKind k : kinds) names.insert(to_string(k));
  CHECK(names.size() == 6);
  CHECK(names.count("unknown") == 0);
  CHECK(std::string(to_string(ErrorKind::kResource)) == "resource");
  CHECK(std::string(to_string(ErrorKind::kInternal)) == "internal");
}

TEST_CASE("SPECLAB_CHECK throws kInternal naming the condition, and evaluates it once",
          "[core][error]") {
  int evaluations = 0;
  auto truthy = [&] { return ++evaluations > 0; };
  SPECLAB_CHECK(truthy(), "never shown");
  CHECK(evaluations == 1);

  const int refcount = -1;
  try {
    SPECLAB_CHECK(refcount >= 0, "block 7");
    FAIL("SPECLAB_CHECK did not throw");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kInternal);
    CHECK(e.message() == "internal check failed: refcount >= 0: block 7");
  }
}

TEST_CASE("native_blas_core: a generic OpenBLAS core on a CPU with AVX2 or AVX-512 is replaced", "[blas]") {
  using speclab::native_blas_core;
  // The fallback Debian's OpenBLAS 0.3.21 chose on an Intel Xeon of family 6 model 207.
  REQUIRE(std::strcmp(native_blas_core("Prescott", true, true), "SkylakeX") == 0);
  REQUIRE(std::strcmp(native_blas_core("prescott", true, false), "Haswell") == 0);
  REQUIRE(std::strcmp(native_blas_core("Sandybridge", true, false), "Haswell") == 0);
  REQUIRE(std::strcmp(native_blas_core("Bulldozer", true, true), "SkylakeX") == 0);
  // A core with AVX2 kernels stays; so does any core on a CPU without AVX2 and FMA, and no OpenBLAS.
  REQUIRE(native_blas_core("Haswell", true, true) == nullptr);
  REQUIRE(native_blas_core("SkylakeX", true, true) == nullptr);
  REQUIRE(native_blas_core("Zen", true, false) == nullptr);
  REQUIRE(native_blas_core("Cooperlake", true, true) == nullptr);
  REQUIRE(native_blas_core("Prescott", false, false) == nullptr);
  REQUIRE(native_blas_core(nullptr, true, true) == nullptr);
}

// FNV-1a 64 with SpecLab's offset basis (fnv.h: 1469598103934665603, the published basis short of
// its last digit), against a Python implementation of the same:
//   def f(b, h=1469598103934665603):
//       for c in b: h = ((h ^ c) * 1099511628211) % 2**64
//       return '%016x' % h
// With the published basis, f(b"a", 14695981039346656037) is af63dc4c8601ec8c (the published
// test vector), so the loop itself is FNV-1a's.
TEST_CASE("Fnv64 is FNV-1a with SpecLab's offset basis", "[core][hash]") {
  CHECK(speclab::Fnv64{}.hex() == "14650fb0739d0383");
  speclab::Fnv64 a;
  a.add("a", 1);
  CHECK(a.hex() == "44bd8ad473cd9906");
  speclab::Fnv64 published;
  published.h = 14695981039346656037ull;
  published.add("a", 1);
  CHECK(published.hex() == "af63dc4c8601ec8c");
}

// file_fingerprint: content, not path; whole files up to kFingerprintWhole, sampled chunks beyond
// (first and last included); a directory by its files; "missing" for nothing there.
TEST_CASE("file_fingerprint names content, whole or by chunks, and directories", "[core][hash]") {
  namespace fs = std::filesystem;
  using speclab::file_fingerprint;
  const fs::path dir = fs::temp_directory_path() / ("speclab_fp_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "d");
  const auto write = [](const fs::path& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary) << bytes;
  };
  write(dir / "a", "hello");
  write(dir / "b", "hello");
  write(dir / "c", "hellp");
  CHECK(file_fingerprint((dir / "a").string()) == file_fingerprint((dir / "b").string()));
  CHECK(file_fingerprint((dir / "a").string()).rfind("5:", 0) == 0);
  CHECK(file_fingerprint((dir / "a").string()) != file_fingerprint((dir / "c").string()));
  CHECK(file_fingerprint((dir / "none").string()) == "missing");
  write(dir / "e", "");
  CHECK(file_fingerprint((dir / "e").string()).rfind("0:", 0) == 0);
  // Beyond kFingerprintWhole: the first and the last bytes are read, a change there shows.
  std::string big(static_cast<size_t>(speclab::kFingerprintWhole + 12345), 'x');
  write(dir / "big", big);
  const std::string fp = file_fingerprint((dir / "big").string());
  CHECK(fp.rfind(std::to_string(big.size()) + ":", 0) == 0);
  for (size_t at : {size_t(0), big.size() - 1}) {
    std::string other = big;
    other[at] = 'y';
    write(dir / "big2", other);
    CHECK(file_fingerprint((dir / "big2").string()) != fp);
  }
  // A directory: its files by name and content.
  write(dir / "d" / "one", "1");
  write(dir / "d" / "two", "22");
  const std::string d1 = file_fingerprint((dir / "d").string());
  CHECK(d1.rfind("3:", 0) == 0);
  write(dir / "d" / "two", "23");
  CHECK(file_fingerprint((dir / "d").string()) != d1);
  fs::remove_all(dir);
}

TEST_CASE("ab_variant: 0 until set, any non-zero value is variant 1", "[core][ab]") {
  CHECK(ab_variant() == 0);
  set_ab_variant(1);
  CHECK(ab_variant() == 1);
  set_ab_variant(7);
  CHECK(ab_variant() == 1);
  set_ab_variant(0);
  CHECK(ab_variant() == 0);
}

// Expected offsets: Python 3's strict UTF-8 decoder (UnicodeDecodeError.start) on the same bytes,
// which follows the Unicode standard's table 3-7 (well-formed byte sequences).
TEST_CASE("first_invalid_utf8 agrees with Python's strict UTF-8 decoder", "[core][utf8]") {
  const std::size_t ok = std::string::npos;
  const std::pair<const char*, std::size_t> cases[] = {
      {"", ok}, {"abc", ok},
      {"\xc3\xa9", ok},          // U+00E9
      {"\xe0\xa0\x80", ok},      // U+0800, the first three-byte value
      {"\xef\xbf\xbf", ok},      // U+FFFF
      {"\xf0\x90\x80\x80", ok},  // U+10000
      {"\xf4\x8f\xbf\xbf", ok},  // U+10FFFF, the last value
      {"\xed\x9f\xbf", ok},      // U+D7FF, below the surrogates
      {"\xee\x80\x80", ok},      // U+E000, above them
      {"\xc0\x80", 0},           // overlong NUL
      {"\xc1\xbf", 0},           // overlong
      {"\xe0\x80\x80", 0},       // overlong
      {"\xf0\x80\x80\x80", 0},   // overlong
      {"\xed\xa0\x80", 0},       // U+D800, a surrogate
      {"\xf4\x90\x80\x80", 0},   // U+110000
      {"\xf5\x80\x80\x80", 0},   // no such lead byte
      {"\x80", 0},               // a lone continuation byte
      {"\xff", 0},
      {"a\xc3", 1},              // cut short at the end
      {"ab\xe2\x82", 2},
      {"x\xe9y", 1},             // Latin-1 e-acute
      {"\xe2(\xa1", 0},          // a continuation byte missing
      {"ok\xf0\x9f\x98\x80ok\xed\xbf\xbf", 8},
  };
  for (const auto& [bytes, want] : cases) {
    INFO("case " << std::string(bytes).size() << " bytes, expected " << static_cast<long long>(want));
    CHECK(speclab::first_invalid_utf8(bytes) == want);
  }
}

TEST_CASE("replace_file removes the temporaries of this host's dead writers, and only those", "[core][io]") {
  // A killed writer left "<path>.tmp.<pid>" behind (train-draft's features: GB each), and nothing
  // removed it.
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(SPECLAB_BINARY_DIR) / ("replace_file_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "d.bin").string(), host = replace_file_detail::host_name();
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  REQUIRE(dead > 0);
  ::waitpid(dead, nullptr, 0);  // reaped: no process has this pid now (until the kernel reuses it)
  const std::string stale = path + ".tmp." + host + "." + std::to_string(dead);
  const std::string live = path + ".tmp." + host + "." + std::to_string(::getppid());
  const std::string other_host = path + ".tmp.elsewhere." + std::to_string(dead);
  const std::string other_file = (dir / "e.bin").string() + ".tmp." + host + "." + std::to_string(dead);
  for (const std::string& f : {stale, live, other_host, other_file}) std::ofstream(f) << "x";
  replace_file(path, [](const std::string& tmp) { std::ofstream(tmp) << "new"; });
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(live));        // its writer may still be writing
  CHECK(fs::exists(other_host));  // another machine's, on a shared file system
  CHECK(fs::exists(other_file));  // another file's
  std::ifstream in(path);
  std::string got;
  in >> got;
  CHECK(got == "new");
  CHECK_FALSE(fs::exists(path + ".tmp." + host + "." + std::to_string(::getpid())));
  fs::remove_all(dir);
}

TEST_CASE("replace_file keeps the replaced file's mode, owner and group, and a new file gets the defaults", "[core][io]") {
  // The new file had the process's defaults (umask 022: 0644, the writer's owner) until
  // 2026-12-07, so `speclab check --overwrite` turned a group-writable results file read-only to
  // its group.
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(SPECLAB_BINARY_DIR) / ("replace_mode_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "r.h5").string();
  const auto write = [](const std::string& text) {
    return [text](const std::string& tmp) { std::ofstream(tmp) << text; };
  };
  const auto mode_of = [](const std::string& p) {
    struct stat st {};
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return st;
  };
  const mode_t old_mask = ::umask(022);
  replace_file(path, write("first"));
  CHECK((mode_of(path).st_mode & 07777) == 0644);  // a new file: the umask's
  for (const mode_t m : {mode_t{0660}, mode_t{0600}, mode_t{0755}, mode_t{0444}}) {
    INFO("mode " << std::oct << m);
    REQUIRE(::chmod(path.c_str(), m) == 0);
    replace_file(path, write("again"));
    CHECK((mode_of(path).st_mode & 07777) == m);
  }
  if (::geteuid() == 0) {  // only root may give a file away
    REQUIRE(::chown(path.c_str(), 65534, 65534) == 0);
    REQUIRE(::chmod(path.c_str(), 0640) == 0);
    replace_file(path, write("theirs"));
    const struct stat st = mode_of(path);
    CHECK(st.st_uid == 65534u);
    CHECK(st.st_gid == 65534u);
    CHECK((st.st_mode & 07777) == 0640);
  }
  std::ifstream in(path);
  std::string got;
  in >> got;
  CHECK(got == (::geteuid() == 0 ? "theirs" : "again"));
  ::umask(old_mask);
  fs::remove_all(dir);
}
