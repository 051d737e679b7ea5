// The `speclab` command line's bad-input contract, run as a subprocess (the SPECLAB_CLI binary):
// on a speclab::Error it exits with code 2 and prints exactly one line, "error: <file>: <field>:
// <message>", on stderr — no crash, no signal, no "terminate called", no libtorch stack trace —
// and nothing on stdout. Each case pins the exit code and a substring naming the file or field.
// Plus smoke cases that must succeed: stories260K generation (AR and prompt_lookup) and an
// export round trip of SmolLM2's first two layers.
//
// Broken inputs are written into a temporary directory under SPECLAB_BINARY_DIR: a tiny GGUF
// Llama (written with write_gguf) and copies of it with a wrong magic, a truncated data section,
// a tensor type patched to IQ2_XXS, or a metadata embedding_length that disagrees with the
// tensors; truncated and header-corrupted copies of stories260K.bin; the bad-ABI plugin fixture.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "models/loaders/gguf.h"

using namespace speclab;
namespace fs = std::filesystem;

namespace {

const std::string kCli = SPECLAB_CLI;
const std::string kSource = SPECLAB_SOURCE_DIR;
const std::string kStoriesBin = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K/stories260K.bin";
const std::string kStoriesTok = std::string(SPECLAB_SHARED_DIR) + "/models/stories260K/tok512.bin";
const std::string kSmolLM2 = kSource + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";

// ---- running the CLI --------------------------------------------------------------------------

struct RunResult {
  std::string command;  // for messages
  bool exited = false;  // normal exit (not killed by a signal)
  int exit_code = -1;
  int signal = 0;       // the signal that ended it, when !exited
  bool timed_out = false;
  std::string out, err;
};

std::string describe(const RunResult& r) {
  std::ostringstream s;
  s << "command: " << r.command << "\n";
  if (r.exited)
    s << "exit code " << r.exit_code;
  else
    s << "killed by signal " << r.signal << (r.timed_out ? " (timed out)" : "");
  s << "\nstderr:\n" << r.err << "\nstdout:\n" << r.out.substr(0, 2000);
  return s.str();
}

// Runs SPECLAB_CLI with `args`, capturing stdout and stderr; killed after `timeout_s`.
RunResult run_cli(const std::vector<std::string>& args, int timeout_s = 120) {
  RunResult r;
  r.command = kCli;
  for (const auto& a : args) r.command += " '" + (a.size() > 80 ? a.substr(0, 80) + "...'" : a + "'");
  int out_pipe[2], err_pipe[2];
  REQUIRE(::pipe(out_pipe) == 0);
  REQUIRE(::pipe(err_pipe) == 0);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(kCli.c_str()));
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
    ::execv(kCli.c_str(), argv.data());
    _exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
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

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The contract for bad input: exit code 2, one "error: ..." line on stderr containing every
// one of `needles`, nothing on stdout, no crash artefacts.
void expect_bad_input(const std::vector<std::string>& args, const std::vector<std::string>& needles,
                      int timeout_s = 120) {
  const RunResult r = run_cli(args, timeout_s);
  INFO(describe(r));
  CHECK(r.exited);  // not killed by a signal (SIGABRT from an uncaught exception, SIGSEGV, ...)
  CHECK(r.exit_code == 2);
  const std::vector<std::string> lines = lines_of(r.err);
  CHECK(lines.size() == 1);
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

// ---- fixture files ----------------------------------------------------------------------------

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

// A tiny Llama GGUF with random weights: 2 layers, hidden 64, 4 heads of 16, FFN 256 (so that
// ffn_down's rows split into 256-element IQ2_XXS blocks), context 128, and a SentencePiece
// vocabulary of <unk>, <s>, </s> and the 256 byte tokens. `metadata_hidden` is what the
// metadata claims as embedding_length (the tensors are always 64 wide).
struct TinyGguf {
  static constexpr int64_t kVocab = 259, kHidden = 64, kFfn = 256, kLayers = 2, kContext = 128;
};

void write_tiny_gguf(const std::string& path, int64_t metadata_hidden = TinyGguf::kHidden) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};  // unknown, control, control
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof piece, "<0x%02X>", b);
    tokens.push_back(piece);
    types.push_back(6);  // byte
  }
  const std::vector<float> scores(tokens.size(), 0.0f);
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  const GgufMetadata md = {
      {"general.architecture", GgufValue::str("llama")},
      {"general.name", GgufValue::str("tiny")},
      {"llama.context_length", u32(TinyGguf::kContext)},
      {"llama.embedding_length", u32(metadata_hidden)},
      {"llama.block_count", u32(TinyGguf::kLayers)},
      {"llama.feed_forward_length", u32(TinyGguf::kFfn)},
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
  const int64_t H = TinyGguf::kHidden, F = TinyGguf::kFfn;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {{"token_embd.weight", {TinyGguf::kVocab, H}}};
  for (int64_t l = 0; l < TinyGguf::kLayers; ++l) {
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
  for (size_t i = 0; i < shapes.size(); ++i) tensors.push_back({shapes[i].first, shapes[i].second, GgmlType::F32, data[i].data()});
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
  REQUIRE(all.find(key, at + 1) == std::string_view::npos);
  size_t pos = at + key.size();
  uint32_t n_dims = 0;
  std::memcpy(&n_dims, &bytes[pos], 4);
  REQUIRE(n_dims >= 1);
  REQUIRE(n_dims <= 4);
  pos += 4 + 8 * n_dims;
  std::memcpy(&bytes[pos], &type, 4);
  write_bytes(path, bytes.data(), bytes.size());
}

struct Fixtures {
  fs::path dir;
  std::string tiny, bad_magic, truncated_meta, truncated_gguf, smollm2_head, iq2_xxs, wrong_hidden;
  std::string l2c_truncated, l2c_bad_header, bad_abi_plugin;

  std::string at(const std::string& name) const { return (dir / name).string(); }

  Fixtures() {
    dir = fs::path(SPECLAB_BINARY_DIR) / "test_tmp" / ("cli_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);

    tiny = at("tiny.gguf");
    write_tiny_gguf(tiny);
    const std::vector<char> good = read_bytes(tiny);

    bad_magic = at("bad_magic.gguf");
    std::vector<char> b = good;
    std::memcpy(b.data(), "GGUX", 4);
    write_bytes(bad_magic, b.data(), b.size());

    truncated_meta = at("truncated_meta.gguf");  // cut inside the tokenizer.ggml.tokens array
    write_bytes(truncated_meta, good.data(), 1000);

    truncated_gguf = at("truncated_data.gguf");  // the last tensor's data runs past the end
    write_bytes(truncated_gguf, good.data(), good.size() - 64);

    smollm2_head = at("smollm2_head.gguf");  // the real model's first 1000 bytes
    if (fs::exists(kSmolLM2)) {
      std::ifstream in(kSmolLM2, std::ios::binary);
      std::vector<char> head(1000);
      in.read(head.data(), 1000);
      REQUIRE(in.gcount() == 1000);
      write_bytes(smollm2_head, head.data(), head.size());
    }

    iq2_xxs = at("iq2_xxs.gguf");
    write_tiny_gguf(iq2_xxs);
    patch_tensor_type(iq2_xxs, "blk.1.ffn_down.weight", 16);  // GGML_TYPE_IQ2_XXS

    wrong_hidden = at("wrong_hidden.gguf");
    write_tiny_gguf(wrong_hidden, 128);

    const std::vector<char> stories = read_bytes(kStoriesBin);
    l2c_truncated = at("stories_truncated.bin");
    write_bytes(l2c_truncated, stories.data(), stories.size() / 2);
    l2c_bad_header = at("stories_bad_header.bin");  // n_layers 5 -> 6: the weights no longer fit
    std::vector<char> s = stories;
    const int32_t six = 6;
    std::memcpy(&s[8], &six, 4);
    write_bytes(l2c_bad_header, s.data(), s.size());

    bad_abi_plugin = at("bad_abi_drafter.so");
    const std::string log = at("plugin_build.log");
    const std::string cmd = "c++ -std=c++17 -O1 -shared -fPIC -I" + sh_quote(kSource) + " -o " +
                            sh_quote(bad_abi_plugin) + " " +
                            sh_quote(kSource + "/tests/fixtures/plugins/bad_abi_drafter.cpp") + " > " +
                            sh_quote(log) + " 2>&1";
    const int rc = std::system(cmd.c_str());
    if (rc != 0) {
      std::ifstream in(log);
      FAIL("building the bad-ABI plugin failed:\n" << cmd << "\n" << in.rdbuf());
    }
  }
  ~Fixtures() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

const Fixtures& fixtures() {
  static const Fixtures f;
  return f;
}

// `generate` on stories260K with the given extra arguments.
std::vector<std::string> stories(std::vector<std::string> extra, const std::string& prompt = "Once upon a time") {
  std::vector<std::string> args = {"generate", "--model", "stories260K", "--chat", "off", "--prompt", prompt};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

TEST_CASE("bad model files: exit 2 with one line naming the file and field", "[cli][bad-input][files]") {
  const Fixtures& f = fixtures();
  SECTION("missing model file") {
    const std::string missing = f.at("no_such_model.gguf");
    expect_bad_input({"generate", "--model", missing, "--prompt", "hi"}, {missing, "no such file"});
  }
  SECTION("truncated GGUF: the first 1000 bytes of SmolLM2") {
    REQUIRE(fs::exists(kSmolLM2));  // installed by `make setup`
    expect_bad_input({"generate", "--model", f.smollm2_head, "--prompt", "hi"}, {f.smollm2_head + ": tensor_count: "});
  }
  SECTION("truncated GGUF: cut inside the metadata") {
    expect_bad_input({"generate", "--model", f.truncated_meta, "--prompt", "hi"},
                     {f.truncated_meta + ": tokenizer.ggml.tokens"});
  }
  SECTION("truncated GGUF: the tensor data section is cut short") {
    expect_bad_input({"generate", "--model", f.truncated_gguf, "--prompt", "hi"},
                     {f.truncated_gguf + ": tensor output_norm.weight: ", "exceeds file size"});
  }
  SECTION("wrong magic") {
    expect_bad_input({"generate", "--model", f.bad_magic, "--prompt", "hi"}, {f.bad_magic + ": ", "expected magic 'GGUF'"});
  }
  SECTION("a GGUF tensor type SpecLab cannot decode") {
    expect_bad_input({"generate", "--model", f.iq2_xxs, "--prompt", "hi"},
                     {f.iq2_xxs + ": tensor blk.1.ffn_down.weight: ", "tensor type IQ2_XXS is not supported"});
  }
  SECTION("GGUF metadata that disagrees with the tensor shapes") {
    expect_bad_input({"generate", "--model", f.wrong_hidden, "--prompt", "hi"},
                     {f.wrong_hidden + ": model.embed_tokens.weight: ", "expected [259, 128], found [259, 64]"});
  }
  SECTION("llama2.c header whose dimensions disagree with the weights") {
    expect_bad_input({"generate", "--model", f.l2c_bad_header, "--tokenizer", kStoriesTok, "--prompt", "hi"},
                     {f.l2c_bad_header + ": size: ", "disagrees with the header"});
  }
  SECTION("truncated llama2.c checkpoint") {
    expect_bad_input({"generate", "--model", f.l2c_truncated, "--tokenizer", kStoriesTok, "--prompt", "hi"},
                     {f.l2c_truncated + ": size: ", "truncated"});
  }
}

TEST_CASE("bad prompts and sampling options: exit 2 naming the field", "[cli][bad-input][options]") {
  SECTION("a prompt longer than the context (stories260K: 512)") {
    std::string prompt;
    for (int i = 0; i < 3000; ++i) prompt += i ? " word" : "word";
    expect_bad_input(stories({}, prompt), {"error: prompt: ", "longer than the model context", "512"});
  }
  SECTION("negative temperature") {
    expect_bad_input(stories({"--temperature=-1"}), {"sampling: temperature: ", "found -1"});
  }
  SECTION("NaN temperature") {
    expect_bad_input(stories({"--temperature", "nan"}), {"sampling: temperature: ", "found nan"});
  }
  SECTION("top_p 0") { expect_bad_input(stories({"--top-p", "0"}), {"sampling: top_p: ", "found 0"}); }
  SECTION("top_p 1.5") { expect_bad_input(stories({"--top-p", "1.5"}), {"sampling: top_p: ", "found 1.5"}); }
  SECTION("negative top_k") { expect_bad_input(stories({"--top-k=-1"}), {"sampling: top_k: ", "found -1"}); }
  SECTION("--max-new-tokens 0") {
    expect_bad_input(stories({"--max-new-tokens", "0"}), {"generation: max_new_tokens: ", "found 0"});
  }
}

TEST_CASE("bad command lines: exit 2 naming the command or option", "[cli][bad-input][command-line]") {
  SECTION("unknown subcommand") {
    expect_bad_input({"frobnicate", "--model", "stories260K"}, {"unknown command 'frobnicate'", "generate"});
  }
  SECTION("unknown option") {
    expect_bad_input(stories({"--frobnicate", "3"}), {"command line: ", "--frobnicate"});
  }
  SECTION("export with --layers out of range") {
    const Fixtures& f = fixtures();
    expect_bad_input({"export", "--model", f.tiny, "--layers", "0-9", "--out", f.at("never.gguf")},
                     {"--layers", "layer 2 is out of range", f.tiny});
    CHECK(!fs::exists(f.at("never.gguf")));
  }
}

TEST_CASE("bad drafter settings: exit 2 naming the drafter field", "[cli][bad-input][drafter]") {
  const Fixtures& f = fixtures();
  SECTION("unknown drafter: the message lists the built-ins") {
    expect_bad_input(stories({"--drafter", "nope"}),
                     {"drafter: name: ", "unknown drafter 'nope'", "prompt_lookup", "layer_skip", "draft_model"});
  }
  SECTION("--gamma 0") {
    expect_bad_input(stories({"--drafter", "prompt_lookup", "--gamma", "0"}),
                     {"drafter: num_speculative_tokens: ", "found 0"});
  }
  SECTION("--draft-layers beyond the target's 5 layers") {
    expect_bad_input(stories({"--drafter", "layer_skip", "--draft-layers", "0-9"}),
                     {"drafter: draft_layers: ", "layer 5 is out of range", "0..4"});
  }
  SECTION("a draft model with another vocabulary (SmolLM2 for stories260K)") {
    REQUIRE(fs::exists(kSmolLM2));
    expect_bad_input(stories({"--drafter", "draft_model", "--draft-model", "smollm2-135m-instruct"}),
                     {"drafter: draft_model: ", "49152", "512"});
  }
  SECTION("a plugin path that does not exist") {
    const std::string missing = f.at("no_such_plugin.so");
    expect_bad_input(stories({"--drafter", "whatever", "--plugin", missing}), {missing + ": plugin: ", "no such file"});
  }
  SECTION("a plugin built for another ABI version") {
    expect_bad_input(stories({"--drafter", "bad_abi", "--plugin", f.bad_abi_plugin}),
                     {f.bad_abi_plugin + ": plugin: ", "ABI version 999"});
  }
}

TEST_CASE("speclab generate on stories260K: AR and prompt_lookup", "[cli][smoke]") {
  SECTION("AR greedy") {
    const RunResult r = run_cli(stories({"-n", "20"}));
    INFO(describe(r));
    CHECK(r.exited);
    CHECK(r.exit_code == 0);
    CHECK(r.out.rfind(", there was", 0) == 0);
    CHECK(r.err.empty());
  }
  SECTION("prompt_lookup with --stats reproduces AR") {
    const RunResult r = run_cli(stories({"-n", "20", "--drafter", "prompt_lookup", "--gamma", "4", "--stats"}));
    INFO(describe(r));
    CHECK(r.exited);
    CHECK(r.exit_code == 0);
    CHECK(r.out.rfind(", there was", 0) == 0);
    CHECK(r.out.find("output identical to AR") != std::string::npos);
    CHECK(r.err.empty());
  }
}

TEST_CASE("speclab export: SmolLM2 layers 0-1 as Q8_0, then generate from it", "[cli][smoke][export]") {
  REQUIRE(fs::exists(kSmolLM2));  // installed by `make setup`
  const Fixtures& f = fixtures();
  const std::string out = f.at("smollm2_layers_0-1.gguf");
  const RunResult e = run_cli({"export", "--model", kSmolLM2, "--layers", "0-1", "--type", "q8_0", "--out", out});
  INFO(describe(e));
  REQUIRE(e.exited);
  REQUIRE(e.exit_code == 0);
  CHECK(e.out.find("wrote " + out) != std::string::npos);

  const GgufFile g = read_gguf(out);
  CHECK(g.get_int("llama.block_count") == 2);
  CHECK(g.find_tensor("blk.1.attn_q.weight") != nullptr);
  CHECK(g.find_tensor("blk.2.attn_q.weight") == nullptr);
  CHECK(g.find_tensor("blk.0.ffn_up.weight")->type == static_cast<uint32_t>(GgmlType::Q8_0));

  const RunResult r = run_cli({"generate", "--model", out, "--prompt", "hi", "-n", "5"});
  INFO(describe(r));
  CHECK(r.exited);
  CHECK(r.exit_code == 0);
  CHECK(!r.out.empty());
  CHECK(r.err.empty());
  fs::remove(out);
}
