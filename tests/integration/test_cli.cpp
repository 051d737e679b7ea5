// The `speclab` command line, run as a subprocess (the SPECLAB_CLI binary): smoke cases that
// must succeed — stories260K generation (AR and prompt_lookup) and an export round trip of
// SmolLM2's first two layers — and the two bad-input cases that need the SmolLM2 GGUF installed by
// `make setup` (its first 1000 bytes as a truncated model; a draft model with another vocabulary);
// `speclab bench` beside the peer llama.cpp (`make peer`), and its refusal without it.
// Every other bad-input case is in the data-driven catalogue, tests/bad_inputs/cases.txt.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/core/blas_core.h"
#include "models/llama/gemv.h"
#include "models/loaders/gguf.h"
#include "tests/bad_inputs/cli_process.h"

using namespace speclab;
using namespace speclab::testing;
namespace fs = std::filesystem;

namespace {

const std::string kSource = SPECLAB_SOURCE_DIR;
const std::string kSmolLM2 = kSource + "/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf";

struct TempDir {
  fs::path dir;
  TempDir() {
    dir = fs::path(SPECLAB_BINARY_DIR) / "test_tmp" / ("cli_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string at(const std::string& name) const { return (dir / name).string(); }
};

// `generate` on stories260K with the given extra arguments.
std::vector<std::string> stories(std::vector<std::string> extra, const std::string& prompt = "Once upon a time") {
  std::vector<std::string> args = {"generate", "--model", "stories260K", "--chat", "off", "--prompt", prompt};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

}  // namespace

TEST_CASE("bad inputs that need SmolLM2: exit 2 with one line naming the file and field", "[cli][bad-input]") {
  REQUIRE(fs::exists(kSmolLM2));  // installed by `make setup`
  SECTION("truncated GGUF: the first 1000 bytes of SmolLM2") {
    TempDir t;
    const std::string head = t.at("smollm2_head.gguf");
    {
      std::ifstream in(kSmolLM2, std::ios::binary);
      std::vector<char> bytes(1000);
      in.read(bytes.data(), 1000);
      REQUIRE(in.gcount() == 1000);
      std::ofstream(head, std::ios::binary).write(bytes.data(), 1000);
    }
    check_bad_input(run_cli({"generate", "--model", head, "--prompt", "hi"}), {head + ": tensor_count: "});
  }
  SECTION("a draft model with another vocabulary (SmolLM2 for stories260K)") {
    check_bad_input(run_cli(stories({"--drafter", "draft_model", "--draft-model", "smollm2-135m-instruct"})),
                    {"command line: --draft-model: ", "49152", "512"});
  }
}

TEST_CASE("generate refuses a --prompt or --system that is not UTF-8 naming the flag", "[cli][bad-input]") {
  // A Latin-1 byte became byte-fallback tokens silently (a config's or prompt file's is refused).
  check_bad_input(run_cli(stories({"-n", "2"}, "Once \xff upon")),
                  {"command line: --prompt: expected UTF-8 text, found the byte 0xFF at byte 5"});
  check_bad_input(run_cli({"generate", "--model", "stories260K", "--prompt", "hi", "--system", "caf\xe9", "-n", "2"}),
                  {"command line: --system: expected UTF-8 text, found the byte 0xE9 at byte 3"});
  // --stop too: a stop string with such a byte never matched (2026-12-06).
  check_bad_input(run_cli(stories({"-n", "2", "--stop", "a\xff"})),
                  {"command line: --stop: expected UTF-8 text, found the byte 0xFF at byte 1"});
  // Control: well-formed UTF-8 beyond ASCII runs.
  CHECK(run_cli(stories({"-n", "2"}, "Once upon a caf\xc3\xa9")).exit_code == 0);
  CHECK(run_cli(stories({"-n", "2", "--stop", "caf\xc3\xa9"})).exit_code == 0);
}

TEST_CASE("generate says on stderr when the output stopped at the model's context", "[cli]") {
  // It said so only under --verbose ("stop: context"), and the text looked like any other output.
  const RunResult r = run_cli(stories({"-n", "600", "--ignore-eos", "--threads", "1"}));
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK(r.err == "note: the output stopped at the end of the model's context (5 prompt + 507 new tokens), before "
                 "--max-new-tokens 600\n");
  // Control: an output that stops at -n says nothing.
  const RunResult n = run_cli(stories({"-n", "20", "--ignore-eos"}));
  CHECK(n.exit_code == 0);
  CHECK(n.err.empty());
  // An integer flag reads what a config's integer key reads: -n 2e1 is -n 20 (it was refused in
  // Boost's words while max_new_tokens: 2e1 was taken).
  const RunResult e = run_cli(stories({"-n", "2e1", "--ignore-eos"}));
  INFO(describe(e));
  CHECK(e.exit_code == 0);
  CHECK(e.out == n.out);
  CHECK(run_cli(stories({"-n", "2.5"})).exit_code == 2);
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
    // alpha as `speclab run` defines it (accepted / examined), the share of all drafts beside it.
    CHECK(r.out.find(", alpha ") != std::string::npos);
    CHECK(r.out.find(" (accepted / examined positions; ") != std::string::npos);
    CHECK(r.err.empty());
  }
  SECTION("--stats under sampling: the speedup is per decoded token") {
    // The two runs stop at EOS at different lengths; the speedup was the ratio of total times, so
    // a 126-token speculative run against a 299-token AR one read 1.50x at 0.63x per token
    // (found by a probe on 2026-12-06).
    const RunResult r = run_cli(stories({"-n", "300", "-t", "1", "--seed", "2", "--drafter", "prompt_lookup",
                                         "--stats", "--threads", "1"}));
    INFO(describe(r));
    REQUIRE(r.exit_code == 0);
    std::smatch m;
    REQUIRE(std::regex_search(r.out, m, std::regex(R"(decode time: speculative ([0-9.]+) s for ([0-9]+) tokens .*)"
                                                   R"(AR ([0-9.]+) s for ([0-9]+) -> speedup ([0-9.]+)x per token)")));
    const double spec_s = std::stod(m[1]), spec_n = std::stod(m[2]), ar_s = std::stod(m[3]), ar_n = std::stod(m[4]),
                 speedup = std::stod(m[5]);
    CHECK(spec_n != ar_n);  // the case this covers (the seed makes it so)
    REQUIRE(spec_s > 0);
    // The printed times are rounded to milliseconds: compare within their rounding.
    const double expected = (ar_s / ar_n) / (spec_s / spec_n);
    CHECK(std::abs(speedup - expected) <= 0.01 + expected * 0.001 / std::min(ar_s, spec_s));
    CHECK(r.out.find("sampled: outputs differ by design") != std::string::npos);
  }
  SECTION("-n 1 --stats: no step, so no acceptance or speedup is printed") {
    // The prefill's token is the whole output: it printed "acceptance rate 0.000" and a speedup
    // of two timer noises.
    const RunResult r = run_cli(stories({"-n", "1", "--drafter", "prompt_lookup", "--stats"}));
    INFO(describe(r));
    CHECK(r.exit_code == 0);
    CHECK(r.out.find("no speculative steps") != std::string::npos);
    CHECK(r.out.find("-> speedup") == std::string::npos);
    CHECK(r.out.find("alpha") == std::string::npos);
    CHECK(r.out.find("output identical to AR") != std::string::npos);
  }
}

TEST_CASE("speclab export: SmolLM2 layers 0-1 as Q8_0, then generate from it", "[cli][smoke][export]") {
  REQUIRE(fs::exists(kSmolLM2));  // installed by `make setup`
  TempDir t;
  const std::string out = t.at("smollm2_layers_0-1.gguf");
  const RunResult e = run_cli({"export", "--model", kSmolLM2, "--layers", "0-1", "--type", "q8_0", "--out", out});
  INFO(describe(e));
  REQUIRE(e.exited);
  REQUIRE(e.exit_code == 0);
  CHECK(e.out.find("wrote " + out) != std::string::npos);

  const GgufFile g = read_gguf(out);
  CHECK(g.get_int("llama.block_count") == 2);
  const std::string name = g.get_string("general.name", "");
  CHECK(name.size() > std::string(" (layers 0-1 of 30)").size());
  CHECK(name.compare(name.size() - 19, 19, " (layers 0-1 of 30)") == 0);
  // Blocks that are not one run are listed as they are (a range would name every block between).
  const std::string sparse = t.at("smollm2_layers_sparse.gguf");
  REQUIRE(run_cli({"export", "--model", kSmolLM2, "--layers", "0,2,3,29", "--type", "q8_0", "--out", sparse}).exit_code ==
          0);
  const std::string sparse_name = read_gguf(sparse).get_string("general.name", "");
  CHECK(sparse_name.find(" (layers 0,2-3,29 of 30)") != std::string::npos);
  fs::remove(sparse);
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

TEST_CASE("SPECLAB_KERNEL_ISA caps the kernels' instruction set, a bad value exits 2 naming it", "[cli][bad-input]") {
  RunOptions bad;
  bad.in_child = [] { ::setenv("SPECLAB_KERNEL_ISA", "sse9", 1); };
  check_bad_input(run_cli(stories({"-n", "5"}), bad), {"SPECLAB_KERNEL_ISA", "sse9", "avx512vnni"});
  // stories260K's float32 weights: every ISA's decode kernels sum each row in the same 8-lane
  // order, so the capped runs give the same greedy text; -v names the kernels in effect.
  std::map<std::string, std::string> text;
  // The cap lowers the CPU's best, never raises it: on a CPU without AVX2, "avx2" runs scalar.
  const std::string avx2_name = kernel_isa_name(std::min(best_kernel_isa(), KernelIsa::kAvx2));
  for (const auto& [isa, name] : {std::pair<const char*, std::string>{"scalar", "kernels:      scalar"},
                                  std::pair<const char*, std::string>{"avx2", "kernels:      " + avx2_name}}) {
    RunOptions cap;
    cap.in_child = [isa = isa] { ::setenv("SPECLAB_KERNEL_ISA", isa, 1); };
    const RunResult r = run_cli(stories({"-n", "20", "-v"}), cap);
    INFO(isa << ": " << describe(r));
    CHECK(r.exit_code == 0);
    CHECK(r.err.find(name) != std::string::npos);
    text[isa] = r.out;
  }
  CHECK(text["avx2"].rfind(", there was", 0) == 0);
  CHECK(text["scalar"] == text["avx2"]);
}

// `speclab --openblas-coretype` (the value `make test` exports once, so that each test process
// starts once): with the variable unset, a CPU on which OpenBLAS falls back to generic kernels
// makes the program set it and execute itself again (framework/core/blas_core.h), and the run
// prints the core it chose, one native_blas_core() names; else nothing. A value in the
// environment is kept as it is.
TEST_CASE("speclab --openblas-coretype: the core the program re-executed itself with, or the environment's",
          "[cli][blas]") {
  RunOptions unset;
  unset.in_child = [] { ::unsetenv("OPENBLAS_CORETYPE"); };
  const RunResult r = run_cli({"--openblas-coretype"}, unset);
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  CHECK(r.err.empty());
  // This process made the same choice as it started (tests/catch_main.cpp; or `make test` did,
  // through the same flag), unless a user named another core.
  const char* mine = std::getenv("OPENBLAS_CORETYPE");
  const std::string want = mine ? std::string(mine) + "\n" : "";
  if (!loaded_blas_core())  // no OpenBLAS (e.g. a torch wheel's build): nothing to choose, whatever this process has
    CHECK(r.out.empty());
  else if (want.empty())  // this process needed no core: nor does the child, on the same CPU
    CHECK(r.out == want);
  else if (want == "SkylakeX\n" || want == "Haswell\n")
    // Set by the re-execution (the child, with it unset, chooses the same) or by the user on a CPU
    // whose OpenBLAS needs none (the child then chooses nothing).
    CHECK((r.out.empty() || r.out == want));
  else
    CHECK((r.out.empty() || r.out == "SkylakeX\n" || r.out == "Haswell\n"));
  RunOptions user;
  user.in_child = [] { ::setenv("OPENBLAS_CORETYPE", "Haswell", 1); };
  const RunResult kept = run_cli({"--openblas-coretype"}, user);
  INFO(describe(kept));
  CHECK(kept.exit_code == 0);
  CHECK(kept.out == "Haswell\n");
}

// `speclab bench` beside the peer, llama.cpp through llama-cpp-python, which `make peer` builds
// into .cache/peer (scripts/install_peer.sh) and scripts/peer.py finds. The script runs under
// $SPECLAB_PYTHON, else /usr/bin/python3.
namespace {
std::vector<std::string> small_bench(const std::string& llama_cpp) {
  return {"bench", "--model", kSmolLM2, "--contexts", "16", "32", "--steps", "2", "--naive-steps", "1", "--prefill", "8",
          "--verify-context", "16", "--verify-reps", "1", "--llama-cpp", llama_cpp, "--json"};
}
}  // namespace

TEST_CASE("speclab bench --llama-cpp on: an interpreter without the peer exits 2 naming it and make peer",
          "[cli][bench][peer]") {
  REQUIRE(fs::exists(kSmolLM2));
  RunOptions no_peer;
  no_peer.in_child = [] { ::setenv("SPECLAB_PYTHON", "/bin/false", 1); };
  const RunResult r = run_cli(small_bench("on"), no_peer);
  INFO(describe(r));
  check_bad_input(r, {"--llama-cpp", "/bin/false", "make peer"});
  // Refused before any figure is timed (until 2026-12-06 only after the whole run): without --json
  // the tables would be on stdout by then.
  std::vector<std::string> tables = small_bench("on");
  tables.pop_back();  // --json
  const RunResult t = run_cli(tables, no_peer);
  INFO(describe(t));
  CHECK(t.exit_code == 2);
  CHECK(t.out.empty());
  // auto: the same interpreter makes the comparison absent, not an error.
  const RunResult a = run_cli(small_bench("auto"), no_peer);
  INFO(describe(a));
  REQUIRE(a.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(a.out.substr(a.out.find('{')));
  CHECK(j.at("llama_cpp").is_null());
  // ... and the JSON says why (only the table, which --json does not print, said it).
  CHECK_THAT(j.at("llama_cpp_unavailable").get<std::string>(), Catch::Contains("not usable by /bin/false"));
}

TEST_CASE("speclab bench with the peer make peer installed: llama.cpp's version, file and rates side by side",
          "[cli][bench][peer]") {
  REQUIRE(fs::exists(kSmolLM2));
  if (!fs::exists(kSource + "/.cache/peer/llama_cpp")) {
    WARN("llama-cpp-python is not in .cache/peer (make peer builds it, 5-10 min): skipped");
    return;
  }
  const RunResult r = run_cli(small_bench("on"));
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  const nlohmann::json& lc = j.at("llama_cpp");
  CHECK(lc.at("version") == "0.3.36");  // pinned in scripts/install_peer.sh
  CHECK(lc.at("model") == kSmolLM2);
  CHECK(lc.at("decode_tok_s").get<double>() > 0.0);
  CHECK(lc.at("prefill_tok_s").get<double>() > 0.0);
  CHECK(lc.at("decode_at").at("16").get<double>() > 0.0);
  CHECK(lc.at("decode_at").at("32").get<double>() > 0.0);
  // Each llama.cpp figure is the faster of its flash attention off and on (--llama-cpp-flash-attn
  // best), and says which it came from.
  CHECK(lc.at("flash_attn") == "best");
  for (const std::string ctx : {"16", "32"}) {
    const double off = lc.at("by_flash_attn").at("off").at("decode_at").at(ctx).get<double>();
    const double on = lc.at("by_flash_attn").at("on").at("decode_at").at(ctx).get<double>();
    CHECK(lc.at("decode_at").at(ctx).get<double>() == std::max(off, on));
    CHECK(lc.at("flash_attn_used").at(ctx).get<bool>() == (on > off));
  }
  CHECK(lc.at("prefill_tok_s").get<double>() == std::max(lc.at("by_flash_attn").at("off").at("prefill_tok_s").get<double>(),
                                                         lc.at("by_flash_attn").at("on").at("prefill_tok_s").get<double>()));
  // The rows of decode at 16 and at 32, prefill and the context ratio (32 / 16) carry
  // llama.cpp's figure and the ratio to it.
  std::vector<std::string> compared;
  for (const auto& f : j.at("figures"))
    if (f.at("llama_cpp").is_number() && f.at("ratio").is_number())
      compared.push_back(f.at("figure").get<std::string>());
  CHECK(compared == std::vector<std::string>{"decode tok/s, context 16", "decode tok/s, context 32",
                                             "prefill tok/s, 8 tokens", "decode at context 32 / at 16"});
}

TEST_CASE("train-draft --overwrite keeps the old draft when the run is refused before it writes", "[cli][train]") {
  // It removed the draft, its log and its checkpoint first, and a refusal after the target loaded
  // (here: data.max_prompt_tokens leaving no prompt) left the user with nothing.
  TempDir t;
  const std::map<std::string, std::string> old = {
      {"d.safetensors", "old draft"}, {"d.ckpt.safetensors", "old checkpoint"}, {"d.h5", "old log"}};
  for (const auto& [name, text] : old) std::ofstream(t.at(name), std::ios::binary) << text;
  const RunResult r = run_cli({"train-draft", kSource + "/tests/bad_inputs/files/train_config.yaml", "--set",
                               "data.prompts.inline=[Once upon a time, The cat sat]", "--set",
                               "data.max_prompt_tokens=1", "--set", "data.cache_dir=" + t.at("cache"), "--set",
                               "output.path=" + t.at("d.safetensors"), "--overwrite", "--threads", "1", "--quiet"});
  INFO(describe(r));
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("data.max_prompt_tokens"));
  for (const auto& [name, text] : old) {
    INFO(name);
    std::ifstream in(t.at(name), std::ios::binary);
    const std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(kept == text);
    CHECK_FALSE(fs::exists(t.at(name) + ".overwritten"));
  }
}
