// unicode::to_nfc (models/tokenizers/nfc.h) against Python's unicodedata.normalize("NFC"), the
// outside reference: every code point on its own, and a seeded corpus of short sequences that
// mix starters, composites, combining marks of several classes (out of canonical order),
// Hangul jamo and syllables, singletons and composition exclusions. Then the tokenizer-level
// effect: a tokenizer.json with an NFC normalizer encodes decomposed text as its composed form.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "models/tokenizers/byte_level_bpe.h"
#include "models/tokenizers/nfc.h"
#include "models/tokenizers/unicode.h"
#include "tests/support/build_tmp_dir.h"
#include "tests/support/byte_level_tokenizer_json.h"

using namespace speclab;
using nlohmann::json;

namespace {

const char* const kPython = "/usr/bin/python3";

std::string utf8(const std::vector<uint32_t>& cps) {
  std::string s;
  for (uint32_t cp : cps) unicode::append_utf8(s, cp);
  return s;
}

// Runs Python's NFC over `texts` (a JSON array of strings) and returns its answers.
std::vector<std::string> python_nfc(const test::BuildTmpDir& dir, const json& texts) {
  const std::string in = dir / "in.json", out = dir / "out.json";
  {
    std::ofstream f(in, std::ios::binary);
    f << texts.dump();
    REQUIRE(f.good());
  }
  const std::string cmd = std::string(kPython) +
                          " -c 'import json,sys,unicodedata; t=json.load(open(sys.argv[1],encoding=\"utf-8\")); "
                          "json.dump([unicodedata.normalize(\"NFC\",s) for s in t],open(sys.argv[2],\"w\"))' '" +
                          in + "' '" + out + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream f(out, std::ios::binary);
  REQUIRE(f.good());
  return json::parse(f).get<std::vector<std::string>>();
}

bool have_python() {
  std::FILE* p = std::fopen(kPython, "r");
  if (p) std::fclose(p);
  return p != nullptr;
}

}  // namespace

TEST_CASE("to_nfc: every code point alone matches Python's unicodedata", "[tokenizer][nfc]") {
  if (!have_python()) FAIL("no /usr/bin/python3 (scripts/setup.sh installs it): NFC has no reference");
  test::BuildTmpDir dir("test_nfc", "single");
  json texts = json::array();
  std::vector<uint32_t> cps;
  for (uint32_t cp = 0x80; cp <= 0x10FFFF; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    cps.push_back(cp);
    texts.push_back(utf8({cp}));
  }
  const std::vector<std::string> want = python_nfc(dir, texts);
  REQUIRE(want.size() == cps.size());
  size_t changed = 0, wrong = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    const std::string got = unicode::to_nfc(texts[i].get<std::string>());
    if (want[i] != texts[i].get<std::string>()) ++changed;
    if (got != want[i]) {
      if (++wrong <= 10) FAIL_CHECK("U+" << std::hex << cps[i] << ": got " << json(got).dump() << ", want " << json(want[i]).dump());
    }
  }
  CHECK(wrong == 0);
  CHECK(changed > 1000);  // singletons and exclusions: NFC changes them on their own
}

TEST_CASE("to_nfc: mixed sequences match Python's unicodedata", "[tokenizer][nfc]") {
  if (!have_python()) FAIL("no /usr/bin/python3 (scripts/setup.sh installs it): NFC has no reference");
  test::BuildTmpDir dir("test_nfc", "mixed");
  // A pool that exercises each step: starters that compose (e, A, o, u, Greek alpha, Cyrillic
  // ie), composites (é, Å, ṩ, ǖ), marks of classes 230 (acute, diaeresis, grave), 220 (dot
  // below, cedilla is 202), 1 (tilde overlay), 0-class marks that block, Hangul L/V/T jamo and
  // syllables with and without T, singletons (Ohm U+2126, Angstrom U+212B), an exclusion
  // (U+0958), a non-starter decomposition (U+0344), Devanagari nukta, and plain ASCII.
  const std::vector<uint32_t> pool = {
      'a', 'e', 'A', 'o', 'u', ' ', 0x3B1, 0x415, 0x4E0, 0xE9, 0xC5, 0x1E69, 0x1D6, 0x301, 0x308, 0x300,
      0x323, 0x327, 0x334, 0x345, 0x1100, 0x1161, 0x11A8, 0x11A7, 0xAC00, 0xAC01, 0xD7A3, 0x2126, 0x212B,
      0x958, 0x915, 0x93C, 0x344, 0x0F73, 0x1E0A, 0x1E0C, 0x307, 0x3099, 0x304B, 0x1F80, 0x313};
  std::mt19937 rng(7);
  json texts = json::array();
  for (int i = 0; i < 20000; ++i) {
    std::vector<uint32_t> cps(1 + rng() % 6);
    for (uint32_t& cp : cps) cp = pool[rng() % pool.size()];
    texts.push_back(utf8(cps));
  }
  const std::vector<std::string> want = python_nfc(dir, texts);
  REQUIRE(want.size() == texts.size());
  size_t changed = 0, wrong = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string in = texts[i].get<std::string>();
    const std::string got = unicode::to_nfc(in);
    if (want[i] != in) ++changed;
    if (got != want[i] && ++wrong <= 10)
      FAIL_CHECK("input " << json(in).dump() << ": got " << json(got).dump() << ", want " << json(want[i]).dump());
  }
  CHECK(wrong == 0);
  CHECK(changed > texts.size() / 4);  // 8,750 of 20,000 with this seed
}

TEST_CASE("to_nfc: ASCII is returned as is and invalid UTF-8 bytes stay in place", "[tokenizer][nfc]") {
  CHECK(unicode::to_nfc("plain ascii\n\t") == "plain ascii\n\t");
  CHECK(unicode::to_nfc("") == "");
  // e + U+0301 composes; the stray 0xFF between two marks stays a byte and blocks nothing it
  // should not: it is a starter of its own, so the mark after it stays.
  CHECK(unicode::to_nfc("e\xCC\x81") == "\xC3\xA9");
  CHECK(unicode::to_nfc("\xFF" "e\xCC\x81\xFF\xCC\x81") == "\xFF\xC3\xA9\xFF\xCC\x81");
  CHECK(unicode::to_nfc("\xE6\x97") == "\xE6\x97");  // a truncated sequence: two bytes kept
}

TEST_CASE("ByteLevelBpe: a tokenizer.json NFC normalizer is applied between special tokens", "[tokenizer][nfc][bpe]") {
  test::BuildTmpDir dir("test_nfc", "tokenizer");
  const std::string path = dir / "tokenizer.json";
  test::write_byte_level_tokenizer_json(path, 300);
  std::ifstream in(path);
  json j = json::parse(in);
  j["added_tokens"] = {{{"id", 300}, {"content", "<x>"}, {"special", true}, {"normalized", false}}};
  {
    std::ofstream out(path);
    out << j.dump();
  }
  const auto plain = ByteLevelBpe::from_tokenizer_json(path);
  CHECK_FALSE(plain->normalizes_nfc());
  j["normalizer"] = {{"type", "NFC"}};
  {
    std::ofstream out(path);
    out << j.dump();
  }
  const auto nfc = ByteLevelBpe::from_tokenizer_json(path);
  CHECK(nfc->normalizes_nfc());
  const std::string decomposed = "cafe\xCC\x81<x>A\xCC\x8A", composed = "caf\xC3\xA9<x>\xC3\x85";
  // Without the normalizer the two spellings are different bytes, hence different tokens.
  CHECK(plain->encode(decomposed, false) != plain->encode(composed, false));
  CHECK(nfc->encode(decomposed, false) == plain->encode(composed, false));
  CHECK(nfc->encode(composed, false) == plain->encode(composed, false));
  CHECK(nfc->decode(nfc->encode(decomposed, false)) == composed);
}
