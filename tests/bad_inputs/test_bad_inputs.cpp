// The bad-input catalogue: runs every case of tests/bad_inputs/cases.txt (the format is described
// at the top of that file) against the `speclab` binary, one Catch2 test per area. Each case must
// exit with its code (2) after one "error: ..." line containing its expected text, with nothing on
// stdout, no signal, no "terminate called" / libtorch stack trace, and an output directory that
// is still empty (no partial output file). A last test pins the catalogue's size (>= 40 cases,
// every area present) and that case names are unique.
//
// Broken inputs are made at test time in a fixture directory under SPECLAB_BINARY_DIR: the text
// files of tests/bad_inputs/files/ (configs, prompt files, tokenizer.json variants) copied as
// they are; a tiny GGUF Llama (written with write_gguf) and broken copies of it (wrong magic, cut
// inside the metadata, cut inside the tensor data, a tensor type patched to IQ2_XXS, metadata
// that disagrees with the tensor shapes); truncated and header-corrupted copies of stories260K
// and its tokenizer; HF directories written from the tiny model with a missing or broken
// config.json / tokenizer.json; the plugin fixtures of tests/fixtures/plugins/ compiled.
// Set SPECLAB_BAD_INPUTS_VERBOSE=1 to print every case's stderr.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "models/loaders/gguf.h"
#include "models/loaders/hf_model.h"
#include "models/model_loader.h"
#include "tests/bad_inputs/cli_process.h"

using namespace speclab;
using namespace speclab::testing;
namespace fs = std::filesystem;

namespace {

const std::string kSource = SPECLAB_SOURCE_DIR;
const std::string kHere = kSource + "/tests/bad_inputs";
const std::string kStoriesBin = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K/stories260K.bin";
const std::string kStoriesTok = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K/tok512.bin";
const std::vector<std::string> kAreas = {"models", "tokenizers", "configs", "prompts", "plugins", "cli"};

// ---- the cases file ---------------------------------------------------------------------------

struct Case {
  int line = 0;
  std::string area, name, expected;
  int exit_code = 2;
  std::vector<std::string> args;
};

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t\r");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// Splits on spaces; '...' quotes a word (no escapes).
std::vector<std::string> split_words(const std::string& s, int line) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false, quoted = false;
  for (char c : s) {
    if (c == '\'') {
      quoted = !quoted;
      in_word = true;
    } else if (c == ' ' && !quoted) {
      if (in_word) words.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  INFO("cases.txt line " << line);
  REQUIRE(!quoted);
  if (in_word) words.push_back(cur);
  return words;
}

std::vector<Case> load_cases() {
  std::ifstream in(kHere + "/cases.txt");
  REQUIRE(in.good());
  std::vector<Case> cases;
  int n = 0;
  for (std::string l; std::getline(in, l);) {
    ++n;
    if (trim(l).empty() || trim(l)[0] == '#') continue;
    std::vector<std::string> f;
    size_t start = 0;
    for (int i = 0; i < 4; ++i) {
      const size_t bar = l.find('|', start);
      INFO("cases.txt line " << n << ": expected 5 fields separated by '|'");
      REQUIRE(bar != std::string::npos);
      f.push_back(trim(l.substr(start, bar - start)));
      start = bar + 1;
    }
    f.push_back(trim(l.substr(start)));
    Case c;
    c.line = n;
    c.area = f[0];
    c.name = f[1];
    c.exit_code = std::stoi(f[2]);
    c.expected = f[3];
    c.args = split_words(f[4], n);
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string expand(std::string s, const std::map<std::string, std::string>& vars) {
  for (const auto& [k, v] : vars)
    for (size_t at = s.find(k); at != std::string::npos; at = s.find(k, at + v.size())) s.replace(at, k.size(), v);
  return s;
}

// ---- fixtures -----------------------------------------------------------------------------------

std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const char* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(data, static_cast<std::streamsize>(n));
  REQUIRE(out.good());
}

void write_text(const std::string& path, const std::string& text) { write_bytes(path, text.data(), text.size()); }

// A tiny Llama GGUF with random weights: 2 layers, hidden 64, 4 heads of 16, FFN 256 (so that
// ffn_down's rows split into 256-element IQ2_XXS blocks), context 128, and a SentencePiece
// vocabulary of <unk>, <s>, </s> and the 256 byte tokens. `metadata_hidden` is what the
// metadata claims as embedding_length (the tensors are always 64 wide).
// chat_template: tokenizer.chat_template's text, none when empty.
// drop_scores: that many scores left off the end of tokenizer.ggml.scores.
void write_tiny_gguf(const std::string& path, int64_t metadata_hidden = 64, const std::string& chat_template = "",
                     size_t drop_scores = 0) {
  constexpr int64_t kVocab = 259, H = 64, F = 256, kLayers = 2;
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};  // unknown, control, control
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", b);
    tokens.push_back(piece);
    types.push_back(6);  // byte
  }
  const std::vector<float> scores(tokens.size() - drop_scores, 0.0f);
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  GgufMetadata md = {
      {"general.architecture", GgufValue::str("llama")},
      {"general.name", GgufValue::str("tiny")},
      {"llama.context_length", u32(128)},
      {"llama.embedding_length", u32(metadata_hidden)},
      {"llama.block_count", u32(kLayers)},
      {"llama.feed_forward_length", u32(F)},
      {"llama.attention.head_count", u32(4)},
      {"llama.attention.head_count_kv", u32(4)},
      {"llama.attention.layer_norm_rms_epsilon", GgufValue::f32(1e-5f)},
      {"tokenizer.ggml.model", GgufValue::str("llama")},
      {"tokenizer.ggml.tokens", GgufValue::array(GgufArray::of_strings(tokens))},
      {"tokenizer.ggml.scores", GgufValue::array(GgufArray::of_float32(scores))},
      {"tokenizer.ggml.token_type", GgufValue::array(GgufArray::of_int32(types))},
      {"tokenizer.ggml.bos_token_id", u32(1)},
      {"tokenizer.ggml.eos_token_id", u32(2)},
  };
  if (!chat_template.empty()) md.push_back({"tokenizer.chat_template", GgufValue::str(chat_template)});
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"token_embd.weight", {kVocab, H}}};
  for (int64_t l = 0; l < kLayers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    for (const char* n : {"attn_q", "attn_k", "attn_v", "attn_output"}) shapes.push_back({p + n + ".weight", {H, H}});
    shapes.push_back({p + "ffn_gate.weight", {F, H}});
    shapes.push_back({p + "ffn_up.weight", {F, H}});
    shapes.push_back({p + "ffn_down.weight", {H, F}});
    shapes.push_back({p + "attn_norm.weight", {H}});
    shapes.push_back({p + "ffn_norm.weight", {H}});
  }
  shapes.push_back({"output_norm.weight", {H}});  // last: the truncation case cuts into it
  std::vector<std::vector<float>> data;
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (const auto& [name, shape] : shapes) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const float u = static_cast<float>(state >> 40) / static_cast<float>(1ull << 24);  // [0, 1)
      x = shape.size() == 1 ? 1.0f : 0.1f * (u - 0.5f);
    }
    data.push_back(std::move(v));
  }
  std::vector<GgufTensorToWrite> tensors;
  for (size_t i = 0; i < shapes.size(); ++i)
    tensors.push_back({shapes[i].first, shapes[i].second, GgmlType::F32, data[i].data()});
  write_gguf(path, md, tensors);
}

// Sets the ggml type id of tensor `name` in a GGUF file: the tensor info is the name (u64
// length + bytes), u32 n_dims, n_dims u64 dims, then the u32 type.
void patch_tensor_type(const std::string& path, const std::string& name, uint32_t type) {
  std::vector<char> bytes = read_bytes(path);
  std::string key(8, '\0');
  const uint64_t len = name.size();
  std::memcpy(&key[0], &len, 8);  // little-endian host (x86-64 / aarch64)
  key += name;
  const std::string_view all(bytes.data(), bytes.size());
  const size_t at = all.find(key);
  REQUIRE(at != std::string_view::npos);
  size_t pos = at + key.size();
  uint32_t n_dims = 0;
  std::memcpy(&n_dims, &bytes[pos], 4);
  REQUIRE(n_dims >= 1);
  REQUIRE(n_dims <= 4);
  pos += 4 + 8 * n_dims;
  std::memcpy(&bytes[pos], &type, 4);
  write_bytes(path, bytes.data(), bytes.size());
}

// Compiles tests/fixtures/plugins/<stem>.cpp into <out> unless <out> is newer than the source.
void build_plugin(const std::string& stem, const std::string& out) {
  const std::string src = kSource + "/tests/fixtures/plugins/" + stem + ".cpp";
  std::error_code ec;
  // Reused while newer than its source and the headers of the plugin boundary it compiles against.
  bool fresh = fs::exists(out, ec);
  for (const std::string& dep : {src, kSource + "/framework/draft/plugin_abi.h", kSource + "/framework/draft/drafter.h",
                                 kSource + "/framework/draft/drafter_options.h", kSource + "/framework/draft/host_api.h"})
    fresh = fresh && fs::last_write_time(out, ec) > fs::last_write_time(dep, ec);
  if (fresh) return;
  const std::string tmp = out + ".tmp." + std::to_string(::getpid()), log = out + ".log";
  const std::string cmd = "c++ -std=c++17 -O1 -shared -fPIC -I" + sh_quote(kSource) + " -o " + sh_quote(tmp) + " " +
                          sh_quote(src) + " > " + sh_quote(log) + " 2>&1 && mv -f " + sh_quote(tmp) + " " +
                          sh_quote(out);
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream in(log);
    FAIL("building plugin fixture " << stem << " failed:\n" << cmd << "\n" << in.rdbuf());
  }
}

struct Fixtures {
  fs::path dir;    // {dir}
  fs::path outs;   // parent of the per-case {out} directories
  std::string long_prompt;

  Fixtures() {
    const fs::path root = fs::path(SPECLAB_BINARY_DIR) / "test_tmp";
    dir = root / ("bad_inputs_" + std::to_string(::getpid()));
    outs = dir / "out";
    fs::remove_all(dir);
    fs::create_directories(outs);
    for (const auto& e : fs::directory_iterator(kHere + "/files")) fs::copy_file(e.path(), dir / e.path().filename());
    auto at = [&](const std::string& name) { return (dir / name).string(); };

    // GGUF
    const std::string tiny = at("tiny.gguf");
    write_tiny_gguf(tiny);
    const std::vector<char> good = read_bytes(tiny);
    write_bytes(at("empty.gguf"), good.data(), 0);
    std::vector<char> b = good;
    std::memcpy(b.data(), "GGUX", 4);
    write_bytes(at("bad_magic.gguf"), b.data(), b.size());
    write_bytes(at("truncated_meta.gguf"), good.data(), 1000);  // inside the tokenizer.ggml.tokens array
    write_bytes(at("truncated_data.gguf"), good.data(), good.size() - 64);
    write_tiny_gguf(at("iq2_xxs.gguf"));
    patch_tensor_type(at("iq2_xxs.gguf"), "blk.1.ffn_down.weight", 16);  // GGML_TYPE_IQ2_XXS
    write_tiny_gguf(at("wrong_hidden.gguf"), 128);
    write_tiny_gguf(at("export_src.gguf"));  // a model `export --overwrite` is pointed back at
    write_tiny_gguf(at("short_scores.gguf"), 64, "", 1);  // the error named `scores`, not the GGUF key
    {  // a block tensor whose layer is not a number ("blk.x."; export ended in an internal error)
      write_tiny_gguf(at("export_badname.gguf"));
      std::vector<char> nb = read_bytes(at("export_badname.gguf"));
      const std::string from = "blk.1.ffn_norm.weight";
      const size_t pos = std::string_view(nb.data(), nb.size()).find(from);
      REQUIRE(pos != std::string_view::npos);
      nb[pos + 4] = 'x';
      write_bytes(at("export_badname.gguf"), nb.data(), nb.size());
    }
    // A chat template SpecLab does not render (Phi-3's turn markers).
    write_tiny_gguf(at("phi3_template.gguf"), 64,
                    "{% for m in messages %}<|user|>\n{{ m.content }}<|end|>\n<|assistant|>\n{% endfor %}");
    // Mistral's [INST] without <<SYS>>: rendered as Llama 2's (a <<SYS>> block, a space before
    // [/INST]) until 2026-12-06.
    write_tiny_gguf(at("mistral_template.gguf"), 64,
                    "{{ bos_token }}{% for m in messages %}{% if m.role == 'user' %}{{ '[INST] ' + m.content + "
                    "'[/INST]' }}{% else %}{{ ' ' + m.content + eos_token }}{% endif %}{% endfor %}");

    // llama2.c: the model (with its tokenizer beside it) and broken copies.
    const std::vector<char> stories = read_bytes(kStoriesBin), tok = read_bytes(kStoriesTok);
    write_bytes(at("stories.bin"), stories.data(), stories.size());
    write_bytes(at("stories_truncated.bin"), stories.data(), stories.size() / 2);
    std::vector<char> s = stories;
    const int32_t six = 6;  // n_layers 5 -> 6: the weights no longer fit
    std::memcpy(&s[8], &six, 4);
    write_bytes(at("stories_bad_header.bin"), s.data(), s.size());
    // Layer 0's attention norm (after the 28-byte header and the [512, 64] float32 embedding) all
    // NaN: every logit is NaN. As a draft its error read like the target's until 2026-12-06.
    s = stories;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (size_t i = 0; i < 64; ++i) std::memcpy(&s[28 + 512 * 64 * 4 + 4 * i], &nan, 4);
    write_bytes(at("stories_nan.bin"), s.data(), s.size());
    write_bytes(at("tok_truncated.bin"), tok.data(), tok.size() / 3);
    write_bytes(at("tok_empty.bin"), tok.data(), 0);

    // The shard directory of an earlier `speclab submit` into earlier/x.h5 (a shard file left).
    fs::create_directories(dir / "earlier" / "x_shards");
    write_text(at("earlier/x_shards/shard_0.h5"), "");

    // HF directories from the tiny model, each with one thing broken.
    const std::string hf = at("hf_base");
    {
      ModelSource src;
      src.path = tiny;
      src.format = "gguf";
      LoadedModel m = load_model(src);
      write_hf_dir(hf, m.config, m.weights);
    }
    auto hf_copy = [&](const std::string& name) {
      fs::copy(hf, dir / name, fs::copy_options::recursive);
      return (dir / name).string();
    };
    fs::remove(hf_copy("hf_no_config") + "/config.json");
    // A copy whose config.json has `key` replaced by `value`.
    auto hf_key = [&](const std::string& name, const std::string& key, const std::string& value) {
      const std::string cfg = hf_copy(name) + "/config.json";
      std::ifstream in(cfg);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const std::string quoted = "\"" + key + "\": ";
      const size_t k = text.find(quoted);
      REQUIRE(k != std::string::npos);
      const size_t v = k + quoted.size();
      text.replace(v, text.find_first_of(",\n}", v) - v, value);
      write_text(cfg, text);
    };
    hf_key("hf_bad_config", "num_hidden_layers", "\"two\"");
    hf_key("hf_huge_layers", "num_hidden_layers", "2147483647");
    hf_key("hf_huge_context", "max_position_embeddings", "1000000000000");
    hf_copy("hf_no_tokenizer");
    fs::copy_file(at("tokenizer_truncated.json"), hf_copy("hf_tok_truncated") + "/tokenizer.json");
    fs::copy_file(at("tokenizer_unigram.json"), hf_copy("hf_tok_unigram") + "/tokenizer.json");
    fs::copy_file(kSource + "/tests/fixtures/tokenizer/tiny_bpe_tokenizer.json", hf_copy("hf_tok_vocab") + "/tokenizer.json");

    // Plugins (compiled once per build tree) and a text file posing as one.
    const fs::path plugins = root / "bad_inputs_plugins";
    fs::create_directories(plugins);
    for (const char* stem : {"bad_abi_drafter", "no_symbol", "fixture_drafter"}) {
      build_plugin(stem, (plugins / (std::string(stem) + ".so")).string());
      fs::copy_file(plugins / (std::string(stem) + ".so"), dir / (std::string(stem) + ".so"));
    }
    write_text(at("text.so"), "this is not an ELF file\n");

    // Output-side fixture: a non-HDF5 file (the experiment file is made on demand).
    write_text(at("notes.h5"), "my notes\n");

    for (int i = 0; i < 3000; ++i) long_prompt += i ? " word" : "word";
  }
  ~Fixtures() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  // {dir}/existing.h5, a complete experiment file from good.yaml (only the configs cases use it).
  void make_existing_h5() {
    const std::string h5 = (dir / "existing.h5").string();
    if (fs::exists(h5)) return;
    const RunResult r = run_cli({"run", (dir / "good.yaml").string(), "--output", h5, "--no-report"});
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
  }
};

Fixtures& fixtures() {
  static Fixtures f;
  return f;
}

// Bytes of every file under `dir`, by relative path.
std::map<std::string, std::vector<char>> snapshot(const fs::path& dir) {
  std::map<std::string, std::vector<char>> m;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) m[fs::relative(e.path(), dir).string()] = read_bytes(e.path().string());
  return m;
}

void run_case(Fixtures& f, const Case& c, int index) {
  const fs::path out = f.outs / std::to_string(index);
  fs::create_directories(out);
  const std::map<std::string, std::string> vars = {
      {"{dir}", f.dir.string()}, {"{out}", out.string()}, {"{tok}", kStoriesTok}, {"{long_prompt}", f.long_prompt},
      {"{src}", SPECLAB_SOURCE_DIR}};
  std::vector<std::string> args;
  for (const auto& a : c.args) args.push_back(expand(a, vars));
  const RunResult r = run_cli(args);
  if (std::getenv("SPECLAB_BAD_INPUTS_VERBOSE"))
    std::fprintf(stderr, "[%s] %s -> exit %d: %s", c.area.c_str(), c.name.c_str(), r.exit_code, r.err.c_str());
  INFO("case '" << c.name << "' (cases.txt line " << c.line << ")");
  check_bad_input(r, {expand(c.expected, vars)}, c.exit_code);
  // No partial output: the case's output directory is still empty.
  std::vector<std::string> left;
  for (const auto& e : fs::recursive_directory_iterator(out)) left.push_back(e.path().string());
  INFO("left in the output directory: " << left.size() << (left.empty() ? "" : ", e.g. " + left.front()));
  CHECK(left.empty());
}

void run_area(const std::string& area) {
  Fixtures& f = fixtures();
  const std::vector<Case> cases = load_cases();
  for (const Case& c : cases)
    for (const auto& a : c.args)
      if (c.area == area && a.find("{dir}/existing.h5") != std::string::npos) f.make_existing_h5();
  // Cases that point at {dir} files must not change them (e.g. an existing experiment file).
  const auto before = snapshot(f.dir);
  int n = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    if (cases[i].area != area) continue;
    run_case(f, cases[i], static_cast<int>(i));
    ++n;
  }
  CHECK(n > 0);
  const auto after = snapshot(f.dir);
  for (const auto& [name, bytes] : before) {
    if (name.rfind("out/", 0) == 0) continue;
    INFO("fixture file " << name);
    CHECK((after.count(name) && after.at(name) == bytes));
  }
}

}  // namespace

TEST_CASE("bad inputs: models", "[bad-inputs][models]") { run_area("models"); }
TEST_CASE("bad inputs: tokenizers", "[bad-inputs][tokenizers]") { run_area("tokenizers"); }
TEST_CASE("bad inputs: configs", "[bad-inputs][configs]") { run_area("configs"); }
TEST_CASE("bad inputs: prompts", "[bad-inputs][prompts]") { run_area("prompts"); }
TEST_CASE("bad inputs: plugins", "[bad-inputs][plugins]") { run_area("plugins"); }
TEST_CASE("bad inputs: command line", "[bad-inputs][cli]") { run_area("cli"); }

TEST_CASE("bad inputs: the catalogue covers every area with at least 40 cases", "[bad-inputs]") {
  const std::vector<Case> cases = load_cases();
  CHECK(cases.size() >= 40);
  std::set<std::string> names;
  std::map<std::string, int> per_area;
  for (const Case& c : cases) {
    INFO("cases.txt line " << c.line);
    CHECK(std::find(kAreas.begin(), kAreas.end(), c.area) != kAreas.end());
    CHECK(names.insert(c.area + "/" + c.name).second);
    CHECK(c.exit_code == 2);
    CHECK(!c.expected.empty());
    ++per_area[c.area];
  }
  for (const auto& a : kAreas) {
    INFO(a);
    CHECK(per_area[a] >= 3);
  }
}
