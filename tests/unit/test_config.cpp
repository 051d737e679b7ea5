// YAML experiment configs: the shipped configs, sweep expansion, --set overrides, HF / vLLM
// aliases, prompt loading (JSONL, .jsonl.gz, dotted fields) and the error messages for bad input
// (each must name the key and its line:column).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/core/error.h"
#include "framework/io/experiment_config.h"
#include "framework/io/config_util.h"
#include "framework/io/experiment_records.h"
#include "framework/io/train_config.h"

using namespace speclab;
using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

namespace {

const std::string kConfigs = std::string(SPECLAB_SOURCE_DIR) + "/configs";

// A valid minimal config (4 lines); tests append sections from line 5 on.
const std::string kBase =
    "models:\n"
    "  target: {path: stories260K}\n"
    "prompts:\n"
    "  inline: [hello]\n";

// The what() of the config error that parsing `yaml` throws (the test fails if none is thrown).
std::string config_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    parse_experiment_config(yaml, "bad.yaml", overrides);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kConfig);
    return e.what();
  }
  FAIL("expected an Error for:\n" << yaml);
  return {};
}

// One folder per process: CTest runs each test case as its own process, two at a time, and two
// cases writing a.jsonl into one shared folder once read each other's file (a CI run failed so).
std::string tmp_dir() {
  const std::string parent = std::string(SPECLAB_BINARY_DIR) + "/test_config_tmp";
  ::mkdir(parent.c_str(), 0755);
  const std::string d = parent + "/" + std::to_string(::getpid());
  ::mkdir(d.c_str(), 0755);
  return d;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

const DrafterEntry& drafter(const ExperimentConfig& c, const std::string& label) {
  for (const auto& d : c.drafters)
    if (d.label == label) return d;
  FAIL("no drafter labelled " << label);
  return c.drafters.front();
}

}  // namespace

TEST_CASE("every shipped training config (configs/train) parses and validates", "[config][train]") {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(kConfigs + "/train")) {
    if (e.path().extension() != ".yaml") continue;
    INFO(e.path().string());
    const TrainDraftConfig c = load_train_config(e.path().string());
    CHECK((c.architecture == "eagle" || c.architecture == "medusa" || c.architecture == "draft_model" ||
           c.architecture == "retrieval"));
    if (c.architecture == "draft_model") CHECK_FALSE(c.head.draft_layers.empty());
    CHECK_FALSE(c.resolved_yaml.empty());
    ExperimentConfig pc;
    pc.source_path = c.source_path;
    pc.prompts = c.data.prompts;
    CHECK_FALSE(load_prompts(pc).empty());
    ++n;
  }
  CHECK(n >= 6);
}

TEST_CASE("draft_file_stem: a named model's file, a file's stem, an HF directory's whole name", "[config][train]") {
  CHECK(draft_file_stem("smollm2") == "SmolLM2-135M-Instruct.Q4_1");  // by the named entry's file
  CHECK(draft_file_stem("stories260K") == "stories260K");
  CHECK(draft_file_stem("/m/SmolLM2-135M-Instruct.Q4_1.gguf") == "SmolLM2-135M-Instruct.Q4_1");
  // A directory keeps its dots and loses trailing slashes: "Llama-3.2-1B" and "Llama-3.2-3B" were
  // both "Llama-3", and "dir/" was "".
  const std::filesystem::path tmp = std::filesystem::temp_directory_path() / ("speclab_stem_" + std::to_string(::getpid()));
  std::filesystem::create_directories(tmp / "Llama-3.2-1B");
  CHECK(draft_file_stem((tmp / "Llama-3.2-1B").string()) == "Llama-3.2-1B");
  CHECK(draft_file_stem((tmp / "Llama-3.2-1B").string() + "/") == "Llama-3.2-1B");
  std::filesystem::remove_all(tmp);
  // The default output path follows it, per architecture.
  ModelSource src;
  src.path = "stories260K";
  const std::string out = default_train_output(src, "medusa");
  const std::string tail = "/.cache/drafts/stories260K.medusa.safetensors";
  REQUIRE(out.size() > tail.size());
  CHECK(out.compare(out.size() - tail.size(), tail.size(), tail) == 0);
}

TEST_CASE("a training config: unknown keys and bad values name the file, line and key", "[config][train]") {
  const std::string dir = std::string(SPECLAB_BINARY_DIR) + "/test_config_train";
  std::filesystem::create_directories(dir);
  auto load = [&](const std::string& text) {
    std::ofstream(dir + "/t.yaml") << text;
    return load_train_config(dir + "/t.yaml");
  };
  const std::string base = "target: {path: stories260K}\ndata: {prompts: {inline: [{text: hi}]}}\n";
  CHECK_NOTHROW(load(base));
  CHECK_THROWS_WITH(load(base + "train: {stepz: 3}\n"), Catch::Contains("t.yaml:3") && Catch::Contains("stepz"));
  CHECK_THROWS_WITH(load(base + "train: {lr: 2}\n"), Catch::Contains("train.lr") && Catch::Contains("(0, 1)"));
  CHECK_THROWS_WITH(load(base + "architecture: lstm\n"),
                    Catch::Contains("t.yaml:3") && Catch::Contains("architecture") &&
                        Catch::Contains("eagle, medusa, draft_model or retrieval"));
  // A distilled draft model needs the target layers its layers start from.
  CHECK_THROWS_WITH(load(base + "architecture: draft_model\n"), Catch::Contains("head.draft_layers"));
  CHECK_THROWS_WITH(load(base + "architecture: draft_model\nhead: {draft_layers: [0, -1]}\n"),
                    Catch::Contains("head.draft_layers"));
  const TrainDraftConfig distilled = load(base + "architecture: draft_model\nhead: {draft_layers: \"0-1\"}\n");
  CHECK(distilled.architecture == "draft_model");
  CHECK(distilled.head.draft_layers == std::vector<int64_t>{0, 1});  // a range, as in --layers
  CHECK(load(base + "architecture: medusa\n").architecture == "medusa");
  // A warmup as long as the run is taken, with a warning (train-draft prints it).
  CHECK(train_config_warnings(load(base)).empty());
  const std::vector<std::string> warm = train_config_warnings(load(base + "train: {steps: 20, warmup: 50, lr: 1e-3}\n"));
  REQUIRE(warm.size() == 1);
  CHECK_THAT(warm[0], Catch::Contains("train.warmup (50) is not below train.steps (20)") &&
                          Catch::Contains("peaks at 0.0004, not train.lr"));
  CHECK(train_config_warnings(load(base + "train: {steps: 20, warmup: 0}\n")).empty());
  CHECK(load(base + "architecture: retrieval\n").architecture == "retrieval");
  // A retrieval datastore keeps token ids exact: float32 only.
  CHECK_THROWS_WITH(load(base + "architecture: retrieval\noutput: {dtype: float16}\n"),
                    Catch::Contains("output.dtype") && Catch::Contains("expected float32 for a retrieval datastore"));
  // Retrieval trains nothing: a train.* or head.* key off its default is refused, with the line of
  // the key (they were ignored); at its default value it is accepted.
  for (const char* written : {"train: {lr: 0.01}", "train: {steps: 5}", "train: {seed: 9}", "train: {unroll: 2}",
                              "head: {vocab_top_n: 100}", "head: {layers: 2}", "train: {init: x.safetensors}"}) {
    const std::string set = written;
    const std::string key = set.substr(0, set.find(':')) + "." + set.substr(set.find('{') + 1, set.find(':', set.find('{')) - set.find('{') - 1);
    INFO(set);
    CHECK_THROWS_WITH(load(base + "architecture: retrieval\n" + set + "\n"),
                      Catch::Contains("t.yaml:4") && Catch::Contains(key + ": a retrieval datastore is built from the target's answers"));
  }
  CHECK_NOTHROW(load(base + "architecture: retrieval\ntrain: {steps: 1000, seed: 1}\nhead: {medusa_heads: 4}\n"));
  CHECK(load(base).architecture == "eagle");  // the default
  CHECK_THROWS_WITH(load(base + "head: {medusa_heads: 0}\n"), Catch::Contains("head.medusa_heads"));
  CHECK_THROWS_WITH(load(base + "train: {medusa_decay: 1.5}\n"), Catch::Contains("train.medusa_decay"));
  CHECK_THROWS_WITH(load(base + "train: {unroll: 0}\n"), Catch::Contains("train.unroll"));
  CHECK_THROWS_WITH(load(base + "train: {unroll: 9}\n"), Catch::Contains("train.unroll"));
  CHECK_THROWS_WITH(load(base + "train: {unroll_decay: 0}\n"), Catch::Contains("train.unroll_decay"));
  // A key of another architecture, off its default, is refused (it was ignored).
  CHECK_THROWS_WITH(load(base + "architecture: medusa\ntrain: {feature_noise: 0.1}\n"),
                    Catch::Contains("train.feature_noise: only eagle reads it; this architecture is medusa"));
  CHECK_THROWS_WITH(load(base + "architecture: draft_model\nhead: {draft_layers: [0], medusa_heads: 2}\n"),
                    Catch::Contains("head.medusa_heads: only medusa reads it"));
  CHECK_THROWS_WITH(load(base + "head: {draft_layers: [0, 1]}\n"), Catch::Contains("head.draft_layers: only draft_model"));
  CHECK_NOTHROW(load(base + "architecture: medusa\nhead: {medusa_heads: 2}\ntrain: {medusa_decay: 0.5}\n"));
  CHECK_THROWS_WITH(load("target: {path: stories260K}\ndata: {prompts: {files: [humaneval.jsonl.gz]}}\n"),
                    Catch::Contains("evaluation set") && Catch::Contains("HumanEval"));
}

TEST_CASE("every shipped config parses, validates and expands", "[config]") {
  std::vector<std::string> names;
  DIR* dir = ::opendir(kConfigs.c_str());
  REQUIRE(dir != nullptr);
  while (dirent* e = ::readdir(dir)) {
    const std::string n = e->d_name;
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".yaml") == 0) names.push_back(n);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  for (const char* expected : {"demo.yaml", "gamma_sweep.yaml", "temperature_sweep.yaml", "drafter_comparison.yaml",
                               "equivalence.yaml", "equivalence_smollm2.yaml", "tiny_stories.yaml"})
    CHECK(std::count(names.begin(), names.end(), expected) == 1);

  for (const std::string& n : names) {
    INFO(n);
    const ExperimentConfig c = load_experiment_config(kConfigs + "/" + n);
    CHECK_FALSE(c.resolved_yaml.empty());
    const auto points = expand_sweep(c);
    CHECK(!points.empty());
    // Every prompt file the shipped configs name exists (datasets are read from ../shared).
    const auto prompts = load_prompts(c);
    CHECK(!prompts.empty());
    for (const auto& p : prompts) CHECK(!p.text.empty());
  }
}

TEST_CASE("demo.yaml: 40 prompts in 5 categories, 3 drafters x gamma {2, 4, 8}", "[config]") {
  const ExperimentConfig c = load_experiment_config(kConfigs + "/demo.yaml");
  CHECK(c.name == "demo");
  CHECK(c.models.target.path == "smollm2-135m-instruct");  // a named entry is kept as written
  REQUIRE(c.drafters.size() == 3);
  CHECK(drafter(c, "layer_skip").options.draft_layers ==
        std::vector<int64_t>{0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 14, 15, 18, 19, 20, 21, 24, 25, 26, 27, 28, 29});
  CHECK(drafter(c, "prompt_lookup_dynamic").options.schedule == "heuristic");
  CHECK(c.sampling.temperature == 0.0);
  CHECK(c.output.path == "results/demo.h5");

  const auto prompts = load_prompts(c);
  CHECK(prompts.size() == 40);
  std::map<std::string, int> per_category;
  std::set<std::string> ids;
  for (const auto& p : prompts) {
    ++per_category[p.category];
    ids.insert(p.id);
    CHECK(p.text.size() < 1400);  // well under ~250 tokens
  }
  CHECK(ids.size() == 40);
  CHECK(per_category == std::map<std::string, int>{
                            {"code_edit", 8}, {"extractive_qa", 8}, {"math", 8}, {"open_writing", 8}, {"summarize", 8}});

  const auto points = expand_sweep(c);
  REQUIRE(points.size() == 3);
  const int gammas[] = {2, 4, 8};
  for (size_t i = 0; i < 3; ++i) {
    CHECK(points[i].index == static_cast<int64_t>(i));
    CHECK(points[i].values.at("drafter.num_speculative_tokens") == std::to_string(gammas[i]));
    for (const auto& d : points[i].config.drafters) CHECK(d.options.num_speculative_tokens == gammas[i]);
    CHECK(points[i].config.sweep.empty());
  }
}

TEST_CASE("tiny_stories.yaml and the other shipped configs hold what they say", "[config]") {
  const ExperimentConfig t = load_experiment_config(kConfigs + "/tiny_stories.yaml");
  CHECK(t.models.target.path == "stories260K");
  CHECK(t.generation.max_new_tokens == 16);
  CHECK(t.warmup == 0);
  REQUIRE(t.drafters.size() == 2);
  CHECK(t.drafters[0].label == "prompt_lookup");
  CHECK(t.drafters[1].label == "layer_skip");
  REQUIRE(t.sweep.size() == 1);
  CHECK(t.sweep[0].key == "drafter.num_speculative_tokens");  // written as drafter.gamma
  CHECK(t.sweep[0].values == std::vector<std::string>{"1", "2"});
  const auto tp = load_prompts(t);
  REQUIRE(tp.size() == 3);
  CHECK(tp[0].id == "lily");
  CHECK(tp[0].text == "Once upon a time, there was a little girl named Lily.");

  const ExperimentConfig g = load_experiment_config(kConfigs + "/gamma_sweep.yaml");
  const auto gp = expand_sweep(g);
  REQUIRE(gp.size() == 4);
  CHECK(gp[3].config.drafters[1].options.num_speculative_tokens == 8);
  const auto mt = load_prompts(g);
  REQUIRE(mt.size() == 80);  // MT-bench: 80 questions, first turns
  // Both turns, one question per category: 8 conversations of two user turns.
  const auto turns = load_prompts(load_experiment_config(kConfigs + "/mt_bench_turns.yaml"));
  REQUIRE(turns.size() == 8);
  for (const auto& p : turns) CHECK(p.turns.size() == 2);
  CHECK(turns[0].id == "81");
  CHECK(turns[0].turns[1] == "Rewrite your previous response. Start every sentence with the letter A.");
  CHECK(mt[0].id == "81");
  CHECK(mt[0].category == "writing");
  CHECK_THAT(mt[0].text, Contains("travel blog post about a recent trip to Hawaii"));

  const ExperimentConfig ts = load_experiment_config(kConfigs + "/temperature_sweep.yaml");
  const auto tsp = expand_sweep(ts);
  REQUIRE(tsp.size() == 3);
  CHECK(tsp[0].config.sampling.temperature == 0.0);
  CHECK(tsp[1].config.sampling.temperature == 0.7);
  CHECK(tsp[2].config.sampling.temperature == 1.0);
  CHECK(tsp[2].config.sampling.seed == 1234);

  const ExperimentConfig dc = load_experiment_config(kConfigs + "/drafter_comparison.yaml");
  REQUIRE(dc.models.draft.has_value());
  CHECK(dc.models.draft->path == kConfigs + "/../.cache/models/smollm2-draft-6l.gguf");
  const DrafterEntry& dm = drafter(dc, "draft_model");
  CHECK(dm.options.draft_model == dc.models.draft->path);  // taken from models.draft
  CHECK(dm.options.draft_model_format == "gguf");
  CHECK(drafter(dc, "layer_skip").options.draft_layers == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});

  const ExperimentConfig eq = load_experiment_config(kConfigs + "/equivalence.yaml");
  REQUIRE(eq.equivalence.has_value());
  CHECK(eq.equivalence->positions == std::vector<int>{1, 2});
  CHECK(eq.equivalence->control_alpha == 1e-6);
  const ExperimentConfig eqs = load_experiment_config(kConfigs + "/equivalence_smollm2.yaml");
  REQUIRE(eqs.equivalence.has_value());
  CHECK(eqs.equivalence->samples >= 100000);
  CHECK(load_prompts(eqs).size() >= 20);
}

TEST_CASE("sweep expansion is the cartesian product, first axis outermost", "[config]") {
  const std::string yaml = kBase +
                           "drafters:\n"
                           "  - {name: prompt_lookup}\n"
                           "  - {name: layer_skip, draft_layers_first: 2}\n"
                           "sweep:\n"
                           "  sampling.temperature: [0, 0.7]\n"
                           "  drafter.gamma: [1, 2, 4]\n"
                           "  generation.max_new_tokens: [8]\n";
  const ExperimentConfig c = parse_experiment_config(yaml, "sweep.yaml");
  REQUIRE(c.sweep.size() == 3);
  CHECK(c.sweep[0].key == "sampling.temperature");
  CHECK(c.sweep[1].key == "drafter.num_speculative_tokens");
  const auto pts = expand_sweep(c);
  REQUIRE(pts.size() == 6);
  const double temps[] = {0, 0, 0, 0.7, 0.7, 0.7};
  const int gammas[] = {1, 2, 4, 1, 2, 4};
  for (size_t i = 0; i < 6; ++i) {
    INFO("point " << i);
    CHECK(pts[i].values.at("sampling.temperature") == (i < 3 ? "0" : "0.7"));
    CHECK(pts[i].config.sampling.temperature == temps[i]);
    CHECK(pts[i].config.generation.max_new_tokens == 8);
    for (const auto& d : pts[i].config.drafters) CHECK(d.options.num_speculative_tokens == gammas[i]);
    CHECK(pts[i].config.drafters[1].label == "layer_skip");
    CHECK(pts[i].config.resolved_yaml.find("sweep") == std::string::npos);
    CHECK(pts[i].config.resolved_yaml.find('&') == std::string::npos);
  }
  // The point's label lists the axes in the sweep's order, the outermost first (it was key order,
  // which put drafter.num_speculative_tokens before the outer sampling.temperature).
  CHECK(point_label(pts[4].values, pts[4].keys) ==
        "sampling.temperature=0.7, drafter.num_speculative_tokens=2, generation.max_new_tokens=8");
  CHECK(point_label({{"b", "1"}, {"a", "2"}}) == "a=2, b=1");  // without an order: key order
  // The point's resolved YAML parses back to the point's config.
  const ExperimentConfig back = parse_experiment_config(pts[5].config.resolved_yaml, "sweep.yaml");
  CHECK(back.sampling.temperature == 0.7);
  CHECK(back.drafters[1].options.num_speculative_tokens == 4);
  CHECK(back.sweep.empty());

  // No sweep: one point, the config itself.
  const ExperimentConfig plain = parse_experiment_config(kBase + "sampling: {temperature: 0.5}\n", "plain.yaml");
  const auto one = expand_sweep(plain);
  REQUIRE(one.size() == 1);
  CHECK(one[0].values.empty());
  CHECK(one[0].config.sampling.temperature == 0.5);
}

TEST_CASE("overrides with --set: scalars and lists before mapping", "[config]") {
  const std::string yaml = kBase +
                           "drafters:\n"
                           "  - {name: prompt_lookup, gamma: 4}\n"
                           "  - {name: layer_skip}\n"
                           "sampling: {temperature: 0}\n";
  const ExperimentConfig c = parse_experiment_config(
      yaml, "set.yaml",
      {"sampling.temperature=0.7", "generation.stop=[\"\\n\\n\", END]", "drafters.0.num_speculative_tokens=6",
       "drafters[1].draft_layers=0-2", "sweep.sampling.top_k=[1, 3]", "kv.budget_bytes=512MiB"});
  CHECK(c.sampling.temperature == 0.7);
  CHECK(c.generation.stop == std::vector<std::string>{"\n\n", "END"});
  CHECK(c.drafters[0].options.num_speculative_tokens == 6);  // replaced the entry written as gamma
  CHECK(c.drafters[1].options.draft_layers == std::vector<int64_t>{0, 1, 2});
  CHECK(c.kv.budget_bytes == 512LL * 1024 * 1024);
  REQUIRE(c.sweep.size() == 1);
  CHECK(c.sweep[0].values == std::vector<std::string>{"1", "3"});
  CHECK(expand_sweep(c).size() == 2);
  // resolved_yaml is the tree after the overrides: one key per setting.
  const ExperimentConfig back = parse_experiment_config(c.resolved_yaml, "set.yaml");
  CHECK(back.sampling.temperature == 0.7);
  CHECK(back.drafters[0].options.num_speculative_tokens == 6);
  CHECK(back.resolved_yaml.find("num_speculative_tokens") == std::string::npos);

  // drafter.<key> applies to every entry.
  const ExperimentConfig all = parse_experiment_config(yaml, "set.yaml", {"drafter.gamma=5"});
  for (const auto& d : all.drafters) CHECK(d.options.num_speculative_tokens == 5);
  CHECK(all.resolved_yaml.find('&') == std::string::npos);  // one value per entry, no YAML anchors
  CHECK_THAT(config_error(yaml, {"drafter.gamma=0"}), Contains("--set drafter.gamma=0: drafters[0].gamma: expected gamma in 1..64"));

  // Errors in overridden values name the --set argument and the key.
  CHECK_THAT(config_error(yaml, {"sampling.temperature=hot"}),
             Contains("--set sampling.temperature=hot: sampling.temperature: expected a number, found \"hot\""));
  CHECK_THAT(config_error(yaml, {"sampling.temperature=-2"}),
             Contains("--set sampling.temperature=-2: sampling.temperature: expected a finite temperature >= 0"));
  CHECK_THAT(config_error(yaml, {"sampling.temprature=1"}), Contains("did you mean 'temperature'?"));
  CHECK_THAT(config_error(yaml, {"sampling.temperature"}), Contains("expected key=value"));
  CHECK_THAT(config_error(yaml, {"drafters.5.gamma=2"}), Contains("expected an index below 2"));
  CHECK_THAT(config_error(yaml, {"sweep.drafter.gama=[1]"}), Contains("did you mean 'drafter.gamma'?"));
  // Text that is not UTF-8 (a Latin-1 e-acute), as in a config file: the output stores it as an
  // HDF5 UTF-8 string, which the report could not read back (until 2026-12-06).
  CHECK_THAT(config_error(yaml, {"prompts.inline=[caf\xe9]"}),
             Contains("--set prompts.inline=[caf") && Contains("prompts.inline: expected UTF-8 text") &&
                 Contains("at offset 19 of the argument"));
  CHECK_THAT(config_error(yaml + "name: caf\xe9\n", {}), Contains("bad.yaml:") && Contains("expected UTF-8 text, found the byte 0xE9"));
}

TEST_CASE("HF GenerationConfig and vLLM speculative_config names map onto SpecLab keys", "[config]") {
  const std::string yaml = kBase +
                           "drafters:\n"
                           "  - {method: ngram, prompt_lookup_num_tokens: 5, max_matching_ngram_size: 4}\n"
                           "  - name: layer_skip\n"
                           "    num_assistant_tokens: 3\n"
                           "    num_assistant_tokens_schedule: heuristic\n"
                           "    assistant_confidence_threshold: 0.4\n"
                           "    confidence_from_token: 2\n"
                           "    assistant_early_exit: 6\n"
                           "  - {name: draft_model, model: stories260K, num_speculative_tokens: 2}\n"
                           "sampling: {temperature: 0.8, top_k: -1, top_p: 0.95, seed: 7}\n"
                           "generation: {max_tokens: 1e3, stop_strings: END, ignore_eos: true}\n";
  const ExperimentConfig c = parse_experiment_config(yaml, "hf.yaml");
  REQUIRE(c.drafters.size() == 3);
  const DrafterOptions& pl = c.drafters[0].options;
  CHECK(pl.name == "prompt_lookup");
  CHECK(c.drafters[0].label == "prompt_lookup");
  // A plugin may register a drafter named ngram: with plugin: the name is left as written (it
  // became prompt_lookup, which the plugin does not register), as generate's --drafter.
  const ExperimentConfig pc =
      parse_experiment_config(kBase + "drafters:\n  - {plugin: /tmp/libmy_ngram.so, name: ngram}\n", "hf.yaml");
  CHECK(pc.drafters.at(0).options.name == "ngram");
  CHECK(pc.drafters.at(0).label == "ngram");
  // ... and a sweep over drafter.name renames each point as the base entry.
  const std::vector<SweepPoint> pts = expand_sweep(parse_experiment_config(
      kBase + "drafters:\n  - {num_speculative_tokens: 2}\nsweep:\n  drafter.name: [ngram, layer_skip]\n", "hf.yaml"));
  REQUIRE(pts.size() == 2);
  CHECK(pts[0].config.drafters.at(0).options.name == "prompt_lookup");
  CHECK(pts[1].config.drafters.at(0).options.name == "layer_skip");
  CHECK(pl.num_speculative_tokens == 5);
  CHECK(pl.prompt_lookup_max == 4);
  const DrafterOptions& ls = c.drafters[1].options;
  CHECK(ls.num_speculative_tokens == 3);
  CHECK(ls.schedule == "heuristic");
  CHECK(ls.confidence_threshold == 0.4);
  CHECK(ls.confidence_from_token == 2);
  CHECK(pl.confidence_from_token == 1);  // the default
  CHECK(ls.draft_layers_first == 6);
  CHECK(c.drafters[2].options.draft_model == "stories260K");
  CHECK(c.sampling.top_k == 0);  // vLLM's -1 = off
  CHECK(c.sampling.seed == 7);
  CHECK(c.generation.max_new_tokens == 1000);
  CHECK(c.generation.stop == std::vector<std::string>{"END"});
  CHECK(c.generation.ignore_eos);
}

TEST_CASE("bad config input: every error names the key and its line:column", "[config]") {
  SECTION("malformed YAML gives yaml-cpp's message at line:column") {
    CHECK_THAT(config_error("models:\n  target: {path: x\nprompts: [\n"),
               Contains("bad.yaml:3:8: malformed YAML: end of map flow not found"));
    CHECK_THAT(config_error("models:\n  target:\n    path: x\n   format: gguf\n"),
               Contains("bad.yaml:4:4: malformed YAML: end of map not found"));
  }
  SECTION("unknown key: one suggestion and nothing else") {
    const std::string e = config_error(kBase + "sampling:\n  temprature: 0.5\n");
    CHECK_THAT(e, Contains("bad.yaml:6:3: sampling.temprature: unknown key 'temprature' in sampling; did you mean "
                           "'temperature'?"));
    CHECK_THAT(e, !Contains("top_p"));
  }
  SECTION("unknown key without a near miss lists the section's keys; a key from another section points there") {
    CHECK_THAT(config_error(kBase + "sampling:\n  wibble: 1\n"),
               Contains("expected one of: temperature, top_k, top_p, seed"));
    CHECK_THAT(config_error(kBase + "generation:\n  temperature: 1\n"),
               Contains("bad.yaml:6:3: generation.temperature: unknown key 'temperature' in generation; did you mean "
                        "'sampling.temperature'? (generation takes: "));
    // ... with the section's own keys: `output: {file: x.h5}` meant output.path.
    CHECK_THAT(config_error(kBase + "output:\n  file: x.h5\n"),
               Contains("did you mean 'prompts.files'? (output takes: path)"));
    // HF's and vLLM's names that are not aliases name the SpecLab setting (they listed the keys).
    CHECK_THAT(config_error(kBase + "sampling:\n  do_sample: true\n"),
               Contains("unknown key 'do_sample' in sampling; HF's do_sample: SpecLab samples where "
                        "sampling.temperature is above 0"));
    CHECK_THAT(config_error("models:\n  target: {path: stories260K, kv_cache_dtype: float16}\nprompts:\n  inline: [hi]\n"),
               Contains("SpecLab's key is kv_dtype (models.target.kv_dtype)"));
  }
  SECTION("wrong type") {
    CHECK_THAT(config_error(kBase + "sampling:\n  temperature: hot\n"),
               Contains("bad.yaml:6:16: sampling.temperature: expected a number, found \"hot\""));
    CHECK_THAT(config_error(kBase + "generation:\n  max_new_tokens: 12.5\n"),
               Contains("bad.yaml:6:19: generation.max_new_tokens: expected an integer, found \"12.5\""));
    CHECK_THAT(config_error(kBase + "drafters: {name: layer_skip}\n"),
               Contains("bad.yaml:5:11: drafters: expected a list of drafter entries"));
    CHECK_THAT(config_error("models:\n  target: stories260K\nprompts: {inline: [x]}\n"),
               Contains("bad.yaml:2:11: models.target: expected a map of model source keys (path, format, tokenizer, "
                        "weights, activations, device, dtype, kv_dtype), "
                        "found \"stories260K\""));
  }
  SECTION("kv: each key validated once (BlockManagerOptions holds budget_bytes and preemption), named in full") {
    CHECK_THAT(config_error(kBase + "kv:\n  block_size: 0\n"),
               Contains("bad.yaml:6:15: kv.block_size: expected 1..4096 tokens, found 0"));
    CHECK_THAT(config_error(kBase + "kv:\n  budget_bytes: 0\n"), Contains("bad.yaml:6:17: kv.budget_bytes: expected > 0"));
    const ExperimentConfig ok = parse_experiment_config(
        kBase + "kv:\n  block_size: 32\n  budget_bytes: 1MiB\n  preemption: off\n", "ok.yaml", {});
    CHECK(ok.kv.block_size == 32);
    CHECK(ok.kv.budget_bytes == 1 << 20);
    CHECK(ok.kv.preemption == Preemption::kOff);
    // The engine resumes no preempted sequence (a drafter's released cache failed as "unknown id").
    CHECK_THAT(config_error(kBase + "kv:\n  preemption: lowest_priority\n"),
               Contains("bad.yaml:6:15: kv.preemption: expected off: speclab run and check"));
    CHECK(KvOptions().budget_bytes == int64_t(2) << 30);  // KvOptions' default, not BlockManagerOptions' 0
  }
  SECTION("models.target.weights: native or f32") {
    CHECK_THAT(config_error("models:\n  target: {path: stories260K, weights: f16}\nprompts: {inline: [x]}\n"),
               Contains("bad.yaml:2:40: models.target.weights: expected one of native, f32, found 'f16'"));
    const ExperimentConfig ok =
        parse_experiment_config("models:\n  target: {path: stories260K, weights: f32}\nprompts: {inline: [x]}\n", "ok.yaml", {});
    CHECK(ok.models.target.weights == "f32");
  }
  SECTION("models.target.activations: auto, f32 or int8") {
    CHECK_THAT(config_error("models:\n  target: {path: stories260K, activations: f16}\nprompts: {inline: [x]}\n"),
               Contains("bad.yaml:2:44: models.target.activations: expected one of auto, f32, int8, found 'f16'"));
    const ExperimentConfig ok = parse_experiment_config(
        "models:\n  target: {path: stories260K, activations: int8}\nprompts: {inline: [x]}\n", "ok.yaml", {});
    CHECK(ok.models.target.activations == "int8");
  }
  SECTION("equivalence.controls: only the catalogue's names, refused when the config is read") {
    CHECK_THAT(config_error(kBase + "equivalence:\n  controls: [always_accept, always_acept]\n"),
               Contains("bad.yaml:6:13: equivalence.controls: expected control names among always_accept, ") &&
                   Contains("found 'always_acept'"));
    const ExperimentConfig ok =
        parse_experiment_config(kBase + "equivalence:\n  controls: [replacement_from_p]\n", "ok.yaml", {});
    CHECK(ok.equivalence->controls == std::vector<std::string>{"replacement_from_p"});
  }
  SECTION("negative temperature: the struct's validate() message with the YAML location added") {
    const std::string e = config_error(kBase + "sampling:\n  temperature: -1\n");
    CHECK_THAT(e, Contains("bad.yaml:6:16: sampling.temperature: expected a finite temperature >= 0 (0 = greedy), found -1"));
  }
  SECTION("gamma 0, written with an alias, is reported under the written name") {
    const std::string e = config_error(kBase + "drafters:\n  - name: prompt_lookup\n    gamma: 0\n");
    CHECK_THAT(e, Contains("bad.yaml:7:12: drafters[0].gamma: expected gamma in 1..64, found 0"));
  }
  SECTION("an invalid value that is not written points at its section") {
    const std::string e = config_error(kBase + "drafters:\n  - {name: prompt_lookup, gamma: 32, schedule: heuristic}\n");
    CHECK_THAT(e, Contains("bad.yaml:6:5: drafters[0].max_speculative_tokens: expected gamma (32) <= max_speculative_tokens <= 64 "
                           "under the heuristic schedule, found 16 (16 is the default: a gamma above 16 needs it set too)"));
  }
  SECTION("speclab check validates max_speculative_tokens at equivalence.gammas, the draft lengths it runs") {
    const std::string cfg = kBase + "drafters:\n  - {name: prompt_lookup, schedule: heuristic, max_speculative_tokens: 3}\nequivalence:\n  gammas: [1, 2]\n";
    // For speclab run the drafter drafts at its own gamma (the default 4), above its cap.
    CHECK_THAT(config_error(cfg), Contains("drafters[0].max_speculative_tokens: expected gamma (4)"));
    const ExperimentConfig ok = parse_experiment_config(cfg, "ok.yaml", {}, ConfigUse::kCheck);
    CHECK(ok.drafters.at(0).options.max_speculative_tokens == 3);
    // A gamma above the cap was run with the cap raised silently.
    const std::string over =
        kBase + "drafters:\n  - {name: prompt_lookup, schedule: heuristic, max_speculative_tokens: 5}\nequivalence:\n  gammas: [1, 8]\n";
    std::string e;
    try {
      parse_experiment_config(over, "bad.yaml", {}, ConfigUse::kCheck);
    } catch (const Error& err) {
      e = err.what();
    }
    CHECK_THAT(e, Contains("bad.yaml:6:72: drafters[0].max_speculative_tokens: expected at least the largest draft "
                           "length `speclab check` runs (8, of equivalence.gammas), found 5"));
    // Without an equivalence section the cap is not compared with the drafter's own gamma either
    // (check names the missing section once the config is read: the bad-input catalogue).
    const ExperimentConfig none = parse_experiment_config(
        kBase + "drafters:\n  - {name: prompt_lookup, schedule: heuristic, max_speculative_tokens: 3}\n", "ok.yaml", {}, ConfigUse::kCheck);
    CHECK(none.drafters.at(0).options.max_speculative_tokens == 3);
  }
  SECTION("empty sweep list") {
    CHECK_THAT(config_error(kBase + "drafters: [{name: prompt_lookup}]\nsweep:\n  drafter.gamma: []\n"),
               Contains("bad.yaml:7:18: sweep.drafter.gamma: expected a non-empty list of values, found an empty list"));
  }
  SECTION("unknown sweep key") {
    CHECK_THAT(config_error(kBase + "sweep:\n  sampling.temprature: [0, 1]\n"),
               Contains("bad.yaml:6:3: sweep.sampling.temprature: unknown sweep key 'sampling.temprature'; did you mean "
                        "'sampling.temperature'?"));
    CHECK_THAT(config_error(kBase + "sweep:\n  prompts.inline: [a]\n"), Contains("unknown sweep key 'prompts.inline'"));
    CHECK_THAT(config_error(kBase + "sweep:\n  drafter.gamma: [1, 2]\n"),
               Contains("bad.yaml:6:18: sweep.drafter.gamma: expected at least one drafters entry"));
  }
  SECTION("a bad sweep value is located in the sweep list") {
    CHECK_THAT(config_error(kBase + "drafters: [{name: prompt_lookup}]\nsweep:\n  drafter.gamma: [2, 0]\n"),
               Contains("bad.yaml:7:22: sweep.drafter.gamma[1]: expected gamma in 1..64, found 0 "
                        "(drafters[0].num_speculative_tokens, at sweep point drafter.num_speculative_tokens=0)"));
    // Values are validated together: gamma 8 needs the max raised by the other axis.
    const std::string both = kBase +
                             "drafters: [{name: prompt_lookup, schedule: heuristic}]\n"
                             "sweep:\n"
                             "  drafter.gamma: [2, 8]\n"
                             "  drafter.max_speculative_tokens: [8, 4]\n";
    CHECK_THAT(config_error(both), Contains("bad.yaml:8:39: sweep.drafter.max_speculative_tokens[1]: expected gamma (8) <= "
                                            "max_speculative_tokens <= 64 under the heuristic schedule, found 4"));
    CHECK_THAT(config_error(both), Contains("at sweep point drafter.num_speculative_tokens=8, "
                                            "drafter.max_speculative_tokens=4"));
    const ExperimentConfig ok = parse_experiment_config(
        kBase + "drafters: [{name: prompt_lookup}]\nsweep:\n  drafter.gamma: [8]\n"
                "  drafter.max_speculative_tokens: [16]\n",
        "ok.yaml");
    CHECK(expand_sweep(ok).at(0).config.drafters[0].options.max_speculative_tokens == 16);
    CHECK_THAT(config_error(kBase + "sweep:\n  sampling.temperature: [0.5, warm]\n"),
               Contains("bad.yaml:6:31: sweep.sampling.temperature[1]: expected a number, found \"warm\""));
  }
  SECTION("the same setting twice, through an alias") {
    CHECK_THAT(config_error(kBase + "drafters:\n  - name: prompt_lookup\n    gamma: 2\n    num_assistant_tokens: 3\n"),
               Contains("bad.yaml:8:5: drafters[0].num_assistant_tokens: expected one of 'gamma' and "
                        "'num_assistant_tokens' (they name the same setting), found both (first at bad.yaml:7:5)"));
  }
  SECTION("drafter names, labels and models") {
    CHECK_THAT(config_error(kBase + "drafters:\n  - name: prompt_lokup\n"),
               Contains("bad.yaml:6:11: drafters[0].name: expected a built-in drafter"));
    CHECK_THAT(config_error(kBase + "drafters:\n  - name: prompt_lokup\n"), Contains("did you mean 'prompt_lookup'?"));
    CHECK_THAT(config_error(kBase + "drafters:\n  - name: draft_model\n"),
               Contains("bad.yaml:6:5: drafters[0].draft_model: expected a draft model path"));
    CHECK_THAT(config_error(kBase + "drafters:\n  - {name: prompt_lookup, label: x}\n  - {name: layer_skip, label: x}\n"),
               Contains("bad.yaml:7:31: drafters[1].label: expected unique labels"));
    CHECK_THAT(config_error(kBase + "drafters:\n  - {name: layer_skip, draft_layers: 0-x}\n"),
               Contains("bad.yaml:6:38: drafters[0].draft_layers: expected layer indices"));
  }
  SECTION("missing sections and empty documents") {
    CHECK_THAT(config_error("prompts: {inline: [x]}\n"),
               Contains("models.target.path: expected a model path or named entry, found nothing"));
    CHECK_THAT(config_error("models: {target: {path: stories260K}}\n"),
               Contains("prompts.files: expected at least one prompt source"));
    CHECK_THAT(config_error(""), Contains("bad.yaml: expected a map of sections"));
  }
  SECTION("a missing config file is an I/O error naming it") {
    try {
      load_experiment_config(kConfigs + "/no_such_config.yaml");
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kIo);
      CHECK_THAT(e.what(), Contains("no_such_config.yaml"));
    }
  }
}

// Only the points of a sweep run: the config without the sweep's values may be invalid where every
// point is valid (it was refused until 2026-12-05), while a point that is invalid is still refused,
// located at its value; so is an invalid key that no axis sets, at every point.
TEST_CASE("a sweep valid at every point is accepted though the config without its values is not", "[config][sweep]") {
  const std::string gamma20 = kBase + "drafters:\n  - {name: layer_skip, gamma: 20, schedule: heuristic}\n";
  const ExperimentConfig c = parse_experiment_config(gamma20 + "sweep:\n  drafter.max_speculative_tokens: [20, 30]\n", "s.yaml");
  const std::vector<SweepPoint> pts = expand_sweep(c);
  REQUIRE(pts.size() == 2);
  CHECK(pts[0].config.drafters.at(0).options.max_speculative_tokens == 20);
  CHECK(pts[1].config.drafters.at(0).options.max_speculative_tokens == 30);
  CHECK_THAT(config_error(gamma20 + "sweep:\n  drafter.max_speculative_tokens: [30, 10]\n"),
             Contains("bad.yaml:8:40: sweep.drafter.max_speculative_tokens") && Contains("found 10"));
  // A draft model given only by the sweep.
  CHECK(expand_sweep(parse_experiment_config(kBase + "drafters:\n  - {name: draft_model}\nsweep:\n  drafter.draft_model: [stories260K]\n",
                                             "s.yaml"))
            .at(0)
            .config.drafters.at(0)
            .options.draft_model == "stories260K");
  // An error no point can mend is still refused, at its key.
  CHECK_THAT(config_error(kBase + "sampling: {temperature: -1}\nsweep:\n  sampling.seed: [1, 2]\n"),
             Contains("bad.yaml:5:25: sampling.temperature"));
}

// A key written on an entry whose drafter does not read it, and a drafter.<key> sweep no entry
// reads, were ignored (identical points); drafter_key_readers is the one table of who reads what.
TEST_CASE("a drafter key its entry's drafter does not read is refused: written or swept", "[config][sweep]") {
  CHECK_THAT(config_error(kBase + "drafters:\n  - {name: layer_skip, prompt_lookup_max: 5}\n"),
             Contains("bad.yaml:6:") && Contains("drafters[0].prompt_lookup_max: expected none with layer_skip, which does not read "
                      "it (read by: prompt_lookup, or any drafter with prompt_lookup_first: true)"));
  CHECK_THAT(config_error(kBase + "drafters:\n  - {name: eagle, draft_vocab: 100}\n"),
             Contains("drafters[0].draft_vocab: expected none with eagle, which does not read it (read by: draft_model)"));
  CHECK_THAT(config_error(kBase + "drafters:\n  - {name: prompt_lookup, draft_layers: [0, 1]}\n"),
             Contains("drafters[0].draft_layers: expected none with prompt_lookup"));
  CHECK_THAT(config_error(kBase + "drafters:\n  - {name: medusa, params: {a: 1}}\n"),
             Contains("drafters[0].params: expected none with medusa, which does not read it (read by: a plugin's drafter)"));
  CHECK_THAT(config_error(kBase + "drafters:\n  - {name: prompt_lookup}\nsweep:\n  drafter.draft_layers_first: [1, 2]\n"),
             Contains("bad.yaml:8:") && Contains("sweep.drafter.draft_layers_first: expected a key that one of the drafters reads, "
                      "found draft_layers_first, which no entry's drafter reads (read by: layer_skip)"));
  // Controls: the same keys where something reads them.
  CHECK_NOTHROW(parse_experiment_config(kBase + "drafters:\n  - {name: layer_skip, prompt_lookup_first: true, "
                                                "prompt_lookup_max: 5}\n",
                                        "ok.yaml"));
  CHECK_NOTHROW(parse_experiment_config(kBase + "drafters:\n  - {name: draft_model, model: stories260K, draft_vocab: 100}\n",
                                        "ok.yaml"));
  CHECK_NOTHROW(parse_experiment_config(
      kBase + "drafters:\n  - {name: prompt_lookup, retrieval_first: true, retrieval_min: 2, confidence_threshold: 0.5}\n",
      "ok.yaml"));
  // A sweep one entry reads spans both (the other ignores it), as does one over the name.
  CHECK(expand_sweep(parse_experiment_config(kBase + "drafters:\n  - {name: prompt_lookup}\n  - {name: layer_skip}\n"
                                                     "sweep:\n  drafter.draft_layers_first: [1, 2]\n",
                                             "ok.yaml"))
            .size() == 2);
  CHECK_NOTHROW(parse_experiment_config(kBase + "drafters:\n  - {draft_layers_first: 1}\n"
                                                "sweep:\n  drafter.name: [prompt_lookup, layer_skip]\n",
                                        "ok.yaml"));
  // A sweep of a plugin parameter without a plugin entry (its points were identical).
  CHECK_THAT(config_error(kBase + "drafters:\n  - {name: prompt_lookup}\nsweep:\n  drafter.params.foo: [a, b]\n"),
             Contains("sweep.drafter.params.foo: expected a key that one of the drafters reads, found params.foo") &&
                 Contains("read by: a plugin's drafter"));
  // A sweep of prompt_lookup_first leaves only the prompt_lookup_* keys to the points (it turned
  // every check off): draft_vocab on layer_skip is refused still, prompt_lookup_max accepted.
  CHECK_THAT(config_error(kBase + "drafters:\n  - {name: layer_skip, draft_vocab: 5}\n"
                                  "sweep:\n  drafter.prompt_lookup_first: [false, true]\n"),
             Contains("drafters[0].draft_vocab: expected none with layer_skip"));
  CHECK_NOTHROW(parse_experiment_config(kBase + "drafters:\n  - {name: layer_skip, prompt_lookup_max: 5}\n"
                                                "sweep:\n  drafter.prompt_lookup_first: [false, true]\n",
                                        "ok.yaml"));
  // Control: a draft_model entry drafting from models.draft is accepted.
  CHECK_NOTHROW(parse_experiment_config("models:\n  target: {path: stories260K}\n  draft: {path: stories260K}\n"
                                        "prompts:\n  inline: [hello]\ndrafters:\n  - {name: draft_model}\n",
                                        "ok.yaml"));
}

TEST_CASE("sweep keys: per-point settings only, and a drafters entry may not write a swept key", "[config][sweep]") {
  SECTION("name, output.* and equivalence.* cannot vary between points") {
    CHECK_THAT(config_error(kBase + "sweep:\n  name: [a, b]\n"),
               Contains("bad.yaml:6:3: sweep.name: expected a per-point setting, found 'name'"));
    CHECK_THAT(config_error(kBase + "sweep:\n  output.path: [a.h5, b.h5]\n"),
               Contains("sweep.output.path: expected a per-point setting, found 'output.path': one run writes one HDF5 "
                        "file"));
    CHECK_THAT(config_error(kBase + "sweep:\n  equivalence.samples: [1, 2]\n"),
               Contains("the equivalence section configures `speclab check`"));
    CHECK_THAT(config_error(kBase, {"sweep.output.path=[a.h5]"}), Contains("expected a per-point setting"));
    CHECK_THAT(config_error(kBase + "sweep:\n  sampling.top_k: [2, 4, 2]\n"),
               Contains("bad.yaml:6:26: sweep.sampling.top_k[2]: expected distinct values (each is one sweep point), found "
                        "'2' twice"));
  }
  SECTION("numbers are compared and recorded by value") {
    CHECK_THAT(config_error(kBase + "sweep:\n  sampling.temperature: [0, 0.0]\n"),
               Contains("sweep.sampling.temperature[1]: expected distinct values (each is one sweep point), found "
                        "'0.0', the same setting as '0'"));
    const ExperimentConfig c =
        parse_experiment_config(kBase + "drafters: [{name: prompt_lookup}]\nsampling: {temperature: 0.7}\n"
                                        "sweep:\n  sampling.top_p: [0.50, 1e0]\n"
                                        "  drafter.gamma: [02, 4]\n  prompts.chat: [off]\n",
                                "ok.yaml", {});
    CHECK(c.sweep[0].values == std::vector<std::string>{"0.5", "1"});
    CHECK(c.sweep[1].values == std::vector<std::string>{"2", "4"});
    CHECK(c.sweep[2].values == std::vector<std::string>{"off"});  // not a number: as written
    // Booleans and byte sizes too (until 2026-11-29 only what strtod reads: these ran twice).
    CHECK_THAT(config_error(kBase + "sweep:\n  generation.ignore_eos: [true, on]\n"),
               Contains("found 'on', the same setting as 'true'"));
    CHECK_THAT(config_error(kBase + "sweep:\n  kv.budget_bytes: [1MiB, 1048576]\n"),
               Contains("found '1048576' again"));
    CHECK_THAT(config_error(kBase + "sweep:\n  kv.budget_bytes: [1MiB, 1024KiB]\n"),
               Contains("found '1024KiB', the same setting as '1048576'"));
    // Other values by the setting they make (until 2026-12-05 only numbers and booleans: these
    // ran as two identical points).
    CHECK_THAT(config_error(kBase + "sweep:\n  prompts.chat: [off, false]\n"),
               Contains("found 'false', the same setting as 'off'"));
    CHECK_THAT(config_error(kBase + "drafters: [{gamma: 2}]\nsweep:\n  drafter.name: [prompt_lookup, ngram]\n"),
               Contains("found 'ngram', the same setting as 'prompt_lookup'"));
    CHECK_THAT(config_error(kBase + "drafters: [{name: layer_skip}]\nsweep:\n  drafter.draft_layers: [\"0-1\", \"0,1\"]\n"),
               Contains("found '0,1', the same setting as '0-1'"));
  }
  SECTION("prompts.*, repeats and warmup are per point") {
    const ExperimentConfig c = parse_experiment_config(
        kBase + "sweep:\n  prompts.limit: [1, 2]\n  repeats: [1, 3]\n  warmup: [0, 2]\n", "ok.yaml", {});
    const std::vector<SweepPoint> pts = expand_sweep(c);
    REQUIRE(pts.size() == 8);
    CHECK(pts[7].config.prompts.limit == 2);
    CHECK(pts[7].config.repeats == 3);
    CHECK(pts[7].config.warmup == 2);
    CHECK(pts[0].config.repeats == 1);
  }
  SECTION("a drafters entry that writes a key a drafter.<key> sweep sets is an error at that key") {
    CHECK_THAT(config_error(kBase + "drafters:\n  - name: prompt_lookup\n    gamma: 7\nsweep:\n  drafter.gamma: [1, 2]\n"),
               Contains("bad.yaml:7:12: drafters[0].gamma: expected the drafters entries to leave this key to "
                        "sweep.drafter.num_speculative_tokens"));
    // Written by a --set, it names the --set (it named the file, as if written there).
    CHECK_THAT(config_error(kBase + "drafters:\n  - name: prompt_lookup\nsweep:\n  drafter.gamma: [1, 2]\n",
                            {"drafter.gamma=7"}),
               Contains("--set drafter.gamma=7: drafters[0].gamma: expected the drafters entries to leave"));
    CHECK_THAT(config_error(kBase + "drafters:\n  - name: layer_skip\n  - {name: prompt_lookup, "
                                    "max_matching_ngram_size: 2}\nsweep:\n  drafter.prompt_lookup_max: [2, 3]\n"),
               Contains("drafters[1].max_matching_ngram_size: expected the drafters entries to leave"));
    // A top-k or top-p cut where every point decodes greedily changes nothing (refused, as
    // generate refuses --top-k under greedy); with the temperature swept, the T > 0 points use it.
    CHECK_THAT(config_error(kBase + "sampling: {top_k: 5}\n"),
               Contains("bad.yaml:5:19: sampling.top_k: expected no cut, found top_k 5: every point decodes greedily"));
    CHECK_THAT(config_error(kBase + "sampling: {temperature: 0}\nsweep:\n  sampling.top_p: [0.9, 1]\n"),
               Contains("sweep.sampling.top_p: expected no sweep of sampling.top_p"));
    CHECK_NOTHROW(parse_experiment_config(
        kBase + "sampling: {top_p: 0.9}\nsweep:\n  sampling.temperature: [0, 0.7]\n", "ok.yaml", {}));
    // A top-level key may be written and swept: the written value is the base each point replaces.
    const ExperimentConfig ok = parse_experiment_config(
        kBase + "sampling: {temperature: 0.5}\nsweep:\n  sampling.temperature: [0, 1]\n", "ok.yaml", {});
    CHECK(expand_sweep(ok)[1].config.sampling.temperature == 1.0);
  }
}

TEST_CASE("effective_config_yaml: the same settings give the same text however they are written", "[config]") {
  const std::string a = kBase + "sampling: {temperature: 0, top_k: 0}\ngeneration: {max_new_tokens: 8}\n"
                                "drafters:\n  - {name: prompt_lookup, gamma: 2}\n";
  const std::string b = "generation:\n  max_tokens: 8\ndrafters:\n  - {method: prompt_lookup, "
                        "num_speculative_tokens: 2, prompt_lookup_max: 3}\nsampling:\n  temperature: 0.0\n" + kBase;
  const std::string ea = effective_config_yaml(parse_experiment_config(a, "a.yaml", {}));
  const std::string eb = effective_config_yaml(parse_experiment_config(b, "b.yaml", {}));
  CHECK(ea == eb);
  CHECK_THAT(ea, Contains("top_p: 1"));                  // defaults are written out
  CHECK_THAT(ea, Contains("num_speculative_tokens: 2"));  // under the canonical name
  CHECK(yaml_differences(ea, eb).empty());
  const std::string ec = effective_config_yaml(parse_experiment_config(a, "c.yaml", {"generation.max_new_tokens=5"}));
  const std::vector<std::string> d = yaml_differences(ea, ec);
  REQUIRE(d.size() == 1);
  CHECK(d[0] == "generation.max_new_tokens: 8 vs 5");
  CHECK(yaml_differences("output: {path: a.h5}\nx: 1\n", "output: {path: b.h5}\nx: 1\n", {"output"}).empty());
  CHECK(yaml_differences("x: [1, 2]\n", "x: [1]\n") == std::vector<std::string>{"x[1]: 2 vs (absent)"});
  // A key one text lacks (a file written before the key existed) at its default in the other is
  // no difference with `defaults`; off its default it is. drafters[1] takes drafters[0]'s default.
  const std::string defaults = default_config_yaml();
  const std::string old_file = "sampling: {temperature: 0}\ndrafters:\n  - {name: prompt_lookup}\n  - {name: x}\n";
  const std::string now_default = old_file + "kv: {block_size: 16}\n";
  CHECK(yaml_differences(old_file, now_default).size() == 1);  // negative control: without defaults
  CHECK(yaml_differences(old_file, now_default, {}, defaults).empty());
  CHECK(yaml_differences(old_file, old_file + "kv: {block_size: 32}\n", {}, defaults).size() == 1);
  const std::string with_gamma = "sampling: {temperature: 0}\ndrafters:\n  - {name: prompt_lookup}\n  - {name: x, "
                                 "confidence_threshold: 0}\n";
  CHECK(yaml_differences(old_file, with_gamma, {}, defaults).empty());
  CHECK(yaml_differences(old_file, with_gamma, {}, "").size() == 1);
  // Paths are absolute: the same config named by a relative or an absolute path gives one text.
  const std::string paths = "models:\n  target: {path: m/x.bin}\nprompts:\n  files: [p.jsonl]\n";
  const std::string rel = effective_config_yaml(parse_experiment_config(paths, "cfg/t.yaml", {}));
  const std::string absolute =
      effective_config_yaml(parse_experiment_config(paths, std::filesystem::current_path().string() + "/cfg/./t.yaml", {}));
  CHECK(rel == absolute);
  CHECK_THAT(rel, Contains(std::filesystem::current_path().string() + "/cfg/m/x.bin"));
  CHECK_THAT(rel, Contains(std::filesystem::current_path().string() + "/cfg/p.jsonl"));
}

TEST_CASE("load_prompts: JSONL, .jsonl.gz, dotted fields, limit after concatenation", "[config]") {
  const std::string dir = tmp_dir();
  write_file(dir + "/a.jsonl", "{\"q\": \"first\", \"c\": \"x\"}\n\n{\"q\": \"second\", \"c\": \"y\"}\r\n");
  write_file(dir + "/b.jsonl", "{\"q\": \"third\", \"c\": 3}\n");
  const std::string yaml = "models: {target: {path: stories260K}}\n"
                           "prompts:\n"
                           "  files: [a.jsonl, b.jsonl]\n"
                           "  field: q\n"
                           "  category_field: c\n"
                           "  inline: [{text: fourth, id: four}]\n";
  ExperimentConfig c = parse_experiment_config(yaml, dir + "/p.yaml");
  auto p = load_prompts(c);
  REQUIRE(p.size() == 4);
  CHECK(p[0].text == "first");
  CHECK(p[0].id == "a.jsonl:1");
  CHECK(p[1].text == "second");
  CHECK(p[1].id == "a.jsonl:3");  // blank lines are skipped but counted
  CHECK(p[2].category == "3");
  CHECK(p[3].id == "four");
  c.prompts.limit = 3;
  p = load_prompts(c);
  REQUIRE(p.size() == 3);
  CHECK(p[2].text == "third");  // the limit applies after concatenating the files

  SECTION("HumanEval (.jsonl.gz) and GSM8K from the shared datasets") {
    const std::string ds = std::string(SPECLAB_SHARED_DIR) + "/datasets";
    ExperimentConfig h = parse_experiment_config(
        "models: {target: {path: stories260K}}\nprompts: {files: [" + ds +
            "/humaneval.jsonl.gz], field: prompt, id_field: task_id}\n",
        dir + "/h.yaml");
    const auto he = load_prompts(h);
    REQUIRE(he.size() == 164);
    CHECK(he[0].id == "HumanEval/0");
    CHECK_THAT(he[0].text, Contains("def has_close_elements("));
    ExperimentConfig g = parse_experiment_config(
        "models: {target: {path: stories260K}}\nprompts: {files: [" + ds + "/gsm8k_test.jsonl], field: question, limit: 5}\n",
        dir + "/g.yaml");
    const auto gs = load_prompts(g);
    REQUIRE(gs.size() == 5);
    CHECK_THAT(gs[0].text, Contains("Janet"));
  }
  SECTION("a line that is not JSON names file:line") {
    write_file(dir + "/bad.jsonl", "{\"q\": \"ok\"}\n{\"q\": oops}\n");
    ExperimentConfig b = parse_experiment_config(
        "models: {target: {path: stories260K}}\nprompts: {files: [bad.jsonl], field: q}\n", dir + "/b.yaml");
    try {
      load_prompts(b);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
      CHECK_THAT(e.what(), Contains(dir + "/bad.jsonl:2: expected one JSON object per line, found invalid JSON"));
    }
  }
  SECTION("a missing field names file:line and the field") {
    write_file(dir + "/nofield.jsonl", "{\"q\": \"ok\"}\n{\"question\": \"no q here\"}\n");
    ExperimentConfig b = parse_experiment_config(
        "models: {target: {path: stories260K}}\nprompts: {files: [nofield.jsonl], field: q}\n", dir + "/b.yaml");
    try {
      load_prompts(b);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kBadInput);
      CHECK_THAT(e.what(), Contains(dir + "/nofield.jsonl:2: q: expected a string at key 'q'"));
      CHECK_THAT(e.what(), Contains("keys on this line: question"));
    }
  }
  SECTION("a dotted field that does not resolve") {
    write_file(dir + "/turns.jsonl", "{\"turns\": [\"one\", \"two\"]}\n");
    ExperimentConfig b = parse_experiment_config(
        "models: {target: {path: stories260K}}\nprompts: {files: [turns.jsonl], field: turns.1}\n", dir + "/b.yaml");
    CHECK(load_prompts(b)[0].text == "two");
    b.prompts.field = "turns.2";
    CHECK_THROWS_WITH(load_prompts(b), Contains("turns.jsonl:1: turns.2: expected a string at key 'turns.2'"));
    // What failed is named: the index, not the key that exists ("found no such key" until 2026-12-06).
    CHECK_THROWS_WITH(load_prompts(b), Contains("found 'turns' an array of 2, without an index 2"));
    b.prompts.field = "turns.x";
    CHECK_THROWS_WITH(load_prompts(b), Contains("found 'turns' an array of 2, which takes an index, not 'x'"));
    b.prompts.field = "turns.0.y";
    CHECK_THROWS_WITH(load_prompts(b), Contains("found 'turns.0' a string, which holds no 'y'"));
  }
  SECTION("a missing prompt file is an I/O error naming it") {
    ExperimentConfig b = parse_experiment_config(
        "models: {target: {path: stories260K}}\nprompts: {files: [missing.jsonl]}\n", dir + "/b.yaml");
    try {
      load_prompts(b);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::kIo);
      CHECK_THAT(e.what(), Contains(dir + "/missing.jsonl"));
    }
  }
}

TEST_CASE("load_prompts: a field naming a list of strings is a conversation of user turns", "[config][turns]") {
  const std::string dir = tmp_dir();
  write_file(dir + "/mt.jsonl",
             "{\"id\": 81, \"turns\": [\"Write a poem.\", \"Now in French.\"]}\n"
             "{\"id\": 82, \"turns\": [\"Only one turn.\"]}\n"
             "{\"id\": 83, \"turns\": [\"a\", \"b\", \"c \\\"quoted\\\"\"]}\n");
  ExperimentConfig c = parse_experiment_config(
      "models: {target: {path: stories260K}}\nprompts: {files: [mt.jsonl], field: turns, id_field: id}\n", dir + "/p.yaml");
  const auto p = load_prompts(c);
  REQUIRE(p.size() == 3);
  CHECK(p[0].turns == std::vector<std::string>{"Write a poem.", "Now in French."});
  // /prompts records a conversation as a JSON array of its turns.
  CHECK(p[0].text == "[\"Write a poem.\",\"Now in French.\"]");
  CHECK(p[0].text == conversation_text(p[0].turns));
  // A list of one string is a plain prompt.
  CHECK(p[1].turns.empty());
  CHECK(p[1].text == "Only one turn.");
  CHECK(p[2].turns.size() == 3);
  CHECK(p[2].turns[2] == "c \"quoted\"");
  CHECK(nlohmann::json::parse(p[2].text).get<std::vector<std::string>>() == p[2].turns);
  // An answer cut inside a character (max_new_tokens) is recorded with U+FFFD (dump() threw).
  CHECK(conversation_text({"ok", "caf\xC3"}) == "[\"ok\",\"caf\xEF\xBF\xBD\"]");
  // One turn of the same file is still read by its index.
  c.prompts.field = "turns.1";
  CHECK_THROWS_WITH(load_prompts(c), Contains("mt.jsonl:2: turns.1: expected a string at key 'turns.1'"));
  SECTION("a turn that is not a string, or empty, names file:line and the turn") {
    write_file(dir + "/bad.jsonl", "{\"turns\": [\"fine\", 7]}\n");
    c.prompts.files = {"bad.jsonl"};
    c.prompts.field = "turns";
    c.prompts.id_field = "";
    CHECK_THROWS_WITH(load_prompts(c), Contains("bad.jsonl:1: turns.1: expected a string at key 'turns.1' (prompts.field), found a number"));
    write_file(dir + "/bad.jsonl", "{\"turns\": [\"fine\", \"\"]}\n");
    CHECK_THROWS_WITH(load_prompts(c), Contains("bad.jsonl:1: turns: expected non-empty prompt text at key 'turns.1'"));
    write_file(dir + "/bad.jsonl", "{\"turns\": []}\n");
    CHECK_THROWS_WITH(load_prompts(c), Contains("found an empty array"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("load_prompts: an id names one prompt (the same prompt twice is kept)", "[config]") {
  const std::string dir = tmp_dir();
  ::mkdir((dir + "/sub").c_str(), 0755);
  ::mkdir((dir + "/same").c_str(), 0755);
  write_file(dir + "/a.jsonl", "{\"q\": \"first\"}\n");
  write_file(dir + "/sub/a.jsonl", "{\"q\": \"second\"}\n");
  write_file(dir + "/same/a.jsonl", "{\"q\": \"first\"}\n");
  const std::string head = "models: {target: {path: stories260K}}\nprompts:\n  field: q\n";
  // Two files of one name: both default ids are a.jsonl:1.
  ExperimentConfig c = parse_experiment_config(head + "  files: [a.jsonl, sub/a.jsonl]\n", dir + "/p.yaml");
  CHECK_THROWS_WITH(load_prompts(c), Contains("sub/a.jsonl:1: id:") && Contains("found id 'a.jsonl:1' for two different texts") &&
                                         Contains("a.jsonl:1); give the files distinct names"));
  // The same text under the same id is the same prompt.
  c = parse_experiment_config(head + "  files: [a.jsonl, same/a.jsonl]\n", dir + "/p.yaml");
  CHECK(load_prompts(c).size() == 2);
  // Inline: the same id, another category.
  c = parse_experiment_config(head + "  inline: [{id: x, text: t, category: a}, {id: x, text: t, category: b}]\n",
                              dir + "/p.yaml");
  CHECK_THROWS_WITH(load_prompts(c), Contains("prompts.inline[1].id") && Contains("two different categories") &&
                                         Contains("give each inline prompt its own id"));
  // Limit first: a duplicate cut off by the limit is not read.
  c = parse_experiment_config(head + "  files: [a.jsonl, sub/a.jsonl]\n  limit: 1\n", dir + "/p.yaml");
  CHECK(load_prompts(c).size() == 1);
}

TEST_CASE("prompts.sources: per-file keys, a category filter and a per-category cap", "[config]") {
  const std::string dir = tmp_dir();
  write_file(dir + "/s1.jsonl", "{\"p\": \"a1\"}\n{\"p\": \"a2\"}\n{\"p\": \"a3\"}\n");
  write_file(dir + "/s2.jsonl",
             "{\"t\": [\"w1\"], \"k\": \"writing\"}\n{\"t\": [\"m1\"], \"k\": \"math\"}\n"
             "{\"t\": [\"w2\"], \"k\": \"writing\"}\n{\"t\": [\"r1\"], \"k\": \"reasoning\"}\n"
             "{\"t\": [\"w3\"], \"k\": \"writing\"}\n");
  const std::string yaml = "models: {target: {path: stories260K}}\n"
                           "prompts:\n"
                           "  sources:\n"
                           "    - {file: s1.jsonl, field: p, category: code, per_category: 2}\n"
                           "    - {file: s2.jsonl, field: t.0, category_field: k, categories: [writing, reasoning],\n"
                           "       per_category: 2}\n"
                           "  inline: [last]\n";
  const ExperimentConfig c = parse_experiment_config(yaml, dir + "/s.yaml");
  const auto p = load_prompts(c);
  std::vector<std::string> got;
  for (const auto& x : p) got.push_back(x.category + ":" + x.text);
  CHECK(got == std::vector<std::string>{"code:a1", "code:a2", "writing:w1", "writing:w2", "reasoning:r1", ":last"});
  CHECK(p[2].id == "s2.jsonl:1");
  CHECK_THAT(config_error("models: {target: {path: stories260K}}\n"
                          "prompts: {sources: [{file: s1.jsonl, category: x, category_field: k}]}\n"),
             Contains("prompts.sources[0].category: expected category_field or category, found both"));
  CHECK_THAT(config_error("models: {target: {path: stories260K}}\nprompts: {sources: [{file: s1.txt}]}\n"),
             Contains("prompts.sources[0].file: expected a .jsonl or .jsonl.gz file"));
}

TEST_CASE("qwen_pair.yaml: HumanEval and MT-bench writing, reasoning, coding, the 0.5B beside prompt lookup", "[config]") {
  const ExperimentConfig c = load_experiment_config(kConfigs + "/qwen_pair.yaml");
  CHECK(c.models.target.path == "qwen2.5-coder-1.5b-instruct");  // a named entry with dots is kept as written
  REQUIRE(c.models.draft);
  CHECK(c.models.draft->path == "qwen2.5-coder-0.5b-instruct");
  std::map<std::string, int> per_category;
  for (const auto& p : load_prompts(c)) ++per_category[p.category];
  CHECK(per_category == std::map<std::string, int>{{"humaneval", 164}, {"writing", 10}, {"reasoning", 10}, {"coding", 10}});
  CHECK(drafter(c, "draft_model").options.name == "draft_model");
  CHECK(drafter(c, "draft_model_dynamic").options.schedule == "heuristic");
  CHECK(drafter(c, "prompt_lookup_dynamic").options.schedule == "heuristic");
  CHECK(expand_sweep(c).size() == 3);  // gamma 2, 4, 8

  const ExperimentConfig d = load_experiment_config(kConfigs + "/qwen_pair_demo.yaml");
  per_category.clear();
  for (const auto& p : load_prompts(d)) ++per_category[p.category];
  CHECK(per_category == std::map<std::string, int>{{"humaneval", 3}, {"writing", 3}, {"reasoning", 3}, {"coding", 3}});
  CHECK(d.generation.max_new_tokens == 64);
  REQUIRE(expand_sweep(d).size() == 1);  // gamma 2 (the config says why)
  CHECK(expand_sweep(d)[0].config.drafters.at(0).options.num_speculative_tokens == 2);
  CHECK(drafter(d, "draft_model_v64k").options.draft_vocab == 65536);
  CHECK(drafter(d, "draft_model").options.draft_vocab == 0);
  CHECK_THAT(config_error("models: {target: {path: stories260K}}\n"
                          "drafters: [{name: draft_model, draft_model: stories260K, draft_vocab: -1}]\n"),
             Contains("drafters[0].draft_vocab"));
}

TEST_CASE("retrieval_min / retrieval_max: read from YAML, bad values name their key", "[config]") {
  const std::string head = kBase;
  const ExperimentConfig c =
      parse_experiment_config(head + "drafters: [{name: retrieval, retrieval_min: 2, retrieval_max: 12}]\n", "ret.yaml");
  CHECK(c.drafters.at(0).options.name == "retrieval");
  CHECK(c.drafters.at(0).options.retrieval_min == 2);
  CHECK(c.drafters.at(0).options.retrieval_max == 12);
  const DrafterOptions defaults =
      parse_experiment_config(head + "drafters: [{name: retrieval}]\n", "ret.yaml").drafters.at(0).options;
  CHECK(defaults.retrieval_min == 1);
  CHECK(defaults.retrieval_max == 8);
  CHECK_THAT(config_error(head + "drafters: [{name: retrieval, retrieval_max: 65}]\n"),
             Contains("drafters[0].retrieval_max") && Contains("1..64, found 65"));
  CHECK_THAT(config_error(head + "drafters: [{name: retrieval, retrieval_min: 9}]\n"),
             Contains("drafters[0].retrieval_min") && Contains("found 9 and 8"));
  CHECK_THAT(config_error(head + "drafters: [{name: retrieval, retrieval_min: 0}]\n"),
             Contains("drafters[0].retrieval_min"));
}

TEST_CASE("draft_layers and draft_layers_first together are refused, in YAML and in DrafterOptions", "[config]") {
  // layer_skip's two ways of naming its layers (DrafterOptions::validate, so that the command line
  // and a registry caller get the same check as a config).
  const std::string head = kBase;
  CHECK_THAT(config_error(head + "drafters: [{name: layer_skip, draft_layers: [0, 1], draft_layers_first: 2}]\n"),
             Contains("drafters[0].draft_layers") && Contains("either draft_layers or draft_layers_first, found both"));
  DrafterOptions both;
  both.name = "layer_skip";
  both.draft_layers = {0, 1};
  both.draft_layers_first = 2;
  CHECK_THROWS_WITH(both.validate(), Contains("either draft_layers or draft_layers_first"));
}

TEST_CASE("prompt_lookup_first: read from YAML, and refused where it means nothing", "[config]") {
  const std::string head = kBase;
  const ExperimentConfig c = parse_experiment_config(
      head + "drafters: [{name: layer_skip, gamma: 4, prompt_lookup_first: true, prompt_lookup_min: 2, "
             "fallback_speculative_tokens: 1}]\n",
      "lookup.yaml");
  const DrafterOptions& o = c.drafters.at(0).options;
  CHECK(o.prompt_lookup_first);
  CHECK(o.prompt_lookup_min == 2);
  CHECK(o.fallback_speculative_tokens == 1);
  CHECK_FALSE(parse_experiment_config(head + "drafters: [{name: layer_skip}]\n", "plain.yaml").drafters.at(0).options.prompt_lookup_first);
  CHECK_THAT(config_error(head + "drafters: [{name: prompt_lookup, prompt_lookup_first: true}]\n"),
             Contains("drafters[0].prompt_lookup_first") && Contains("another drafter"));
  CHECK_THAT(config_error(head + "drafters: [{name: layer_skip, fallback_speculative_tokens: 1}]\n"),
             Contains("drafters[0].fallback_speculative_tokens") && Contains("prompt_lookup_first: true"));
  CHECK_THAT(config_error(head + "drafters: [{name: layer_skip, prompt_lookup_first: true, "
                                 "fallback_speculative_tokens: -1}]\n"),
             Contains("drafters[0].fallback_speculative_tokens") && Contains("0..64"));
  // Above gamma is allowed (a step's gamma caps it): a gamma sweep keeps one value.
  CHECK(parse_experiment_config(head + "drafters: [{name: layer_skip, gamma: 1, prompt_lookup_first: true, "
                                       "fallback_speculative_tokens: 2}]\n",
                                "cap.yaml")
            .drafters.at(0)
            .options.fallback_speculative_tokens == 2);
  CHECK_THAT(config_error(head + "drafters: [{name: layer_skip, prompt_lookup_first: maybe}]\n"),
             Contains("drafters[0].prompt_lookup_first"));
}

TEST_CASE("retrieval_first: read from YAML, alone or behind prompt lookup, and refused on retrieval itself", "[config]") {
  const ExperimentConfig c = parse_experiment_config(
      kBase + "drafters: [{name: eagle, prompt_lookup_first: true, retrieval_first: true, retrieval_min: 3, "
              "fallback_speculative_tokens: 1}]\n",
      "chain.yaml");
  const DrafterOptions& o = c.drafters.at(0).options;
  CHECK(o.prompt_lookup_first);
  CHECK(o.retrieval_first);
  CHECK(o.retrieval_min == 3);
  CHECK_FALSE(parse_experiment_config(kBase + "drafters: [{name: eagle}]\n", "plain.yaml").drafters.at(0).options.retrieval_first);
  // The cap needs a source in front of the drafter: the datastore alone is one.
  CHECK(parse_experiment_config(kBase + "drafters: [{name: eagle, retrieval_first: true, fallback_speculative_tokens: 1}]\n",
                                "alone.yaml")
            .drafters.at(0)
            .options.fallback_speculative_tokens == 1);
  CHECK_THAT(config_error(kBase + "drafters: [{name: retrieval, retrieval_first: true}]\n"),
             Contains("drafters[0].retrieval_first") && Contains("another drafter"));
  CHECK_THAT(config_error(kBase + "drafters: [{name: eagle, retrieval_first: 2}]\n"), Contains("drafters[0].retrieval_first"));
  // retrieval_datastore names the datastore retrieval_first reads, relative to the config's folder
  // as every path; without retrieval_first it would be ignored, and is refused.
  const ExperimentConfig named = parse_experiment_config(
      kBase + "drafters: [{name: eagle, retrieval_first: true, retrieval_datastore: stores/mine.safetensors}]\n",
      "/data/exp/named.yaml");
  CHECK(named.drafters.at(0).options.retrieval_datastore == "/data/exp/stores/mine.safetensors");
  CHECK(parse_experiment_config(kBase + "drafters: [{name: eagle, retrieval_first: true}]\n", "d.yaml")
            .drafters.at(0)
            .options.retrieval_datastore.empty());
  CHECK_THAT(config_error(kBase + "drafters: [{name: eagle, retrieval_datastore: mine.safetensors}]\n"),
             Contains("drafters[0].retrieval_datastore") && Contains("expected retrieval_first: true beside it"));
  CHECK_THAT(config_error(kBase + "drafters: [{name: retrieval, retrieval_datastore: mine.safetensors}]\n"),
             Contains("drafters[0].retrieval_datastore") && Contains("reads its datastore from draft_model"));
}

// models.draft names a model, its format and its llama2.c tokenizer; the tokenizer reaches the
// draft_model entries (it was dropped until 2026-11-29, so a draft whose tokenizer is not the
// tokenizer.bin beside it could not be used). Placement and precision are the target's: those
// keys are refused under models.draft (they were accepted and ignored).
TEST_CASE("models.draft: path, format and tokenizer reach draft_model entries, other keys are refused",
          "[config]") {
  const ExperimentConfig c = parse_experiment_config(
      "models:\n"
      "  target: {path: stories260K}\n"
      "  draft: {path: /d/stories.bin, format: llama2c, tokenizer: /d/tok512.bin}\n"
      "prompts:\n"
      "  inline: [hello]\n"
      "drafters:\n"
      "  - name: draft_model\n"
      "  - {name: draft_model, label: own, draft_model: /e/other.bin, draft_model_tokenizer: /e/tok.bin}\n",
      "draft.yaml");
  REQUIRE(c.drafters.size() == 2);
  CHECK(c.drafters[0].options.draft_model == "/d/stories.bin");
  CHECK(c.drafters[0].options.draft_model_format == "llama2c");
  CHECK(c.drafters[0].options.draft_model_tokenizer == "/d/tok512.bin");
  CHECK(c.drafters[1].options.draft_model == "/e/other.bin");
  CHECK(c.drafters[1].options.draft_model_tokenizer == "/e/tok.bin");
  for (const char* key : {"kv_dtype: int8", "weights: f32", "device: cpu", "dtype: float32", "activations: f32"}) {
    INFO(key);
    CHECK_THAT(config_error("models:\n  target: {path: stories260K}\n  draft: {path: /d/s.bin, " + std::string(key) +
                            "}\nprompts:\n  inline: [hello]\n"),
               Contains("models.draft"));
  }
}

// A sweep over drafter.name: the entry's default label names no one drafter (it was the name
// before the sweep at every point, so layer_skip's results read "prompt_lookup"); an explicit
// label is kept.
TEST_CASE("a drafter.name sweep gives unlabelled entries a neutral label", "[config][sweep]") {
  const ExperimentConfig c =
      parse_experiment_config(kBase + "drafters: [{draft_layers_first: 2}, {draft_layers_first: 3, label: ls3}]\n"
                                      "sweep: {drafter.name: [prompt_lookup, layer_skip]}\n",
                              "names.yaml");
  const std::vector<SweepPoint> pts = expand_sweep(c);
  REQUIRE(pts.size() == 2);
  for (const SweepPoint& p : pts) {
    REQUIRE(p.config.drafters.size() == 2);
    CHECK(p.config.drafters[0].label == "drafter");
    CHECK(p.config.drafters[1].label == "ls3");
  }
  CHECK(pts[1].config.drafters[0].options.name == "layer_skip");
  const ExperimentConfig plain = parse_experiment_config(kBase + "drafters: [{name: layer_skip}]\n", "plain.yaml");
  CHECK(plain.drafters[0].label == "layer_skip");
}

// Errors found once models are loaded name the key's place in the file, or the --set that wrote
// it (speclab run and check call located_config_error; they named the file alone).
TEST_CASE("located_config_error: a model-time error gets the key's line and column, or its --set", "[config]") {
  const std::string path = tmp_dir() + "/located.yaml";
  {
    std::ofstream f(path);
    f << kBase << "drafters:\n  - name: layer_skip\n    draft_layers_first: 9\n";
  }
  const Error e(ErrorKind::kConfig, "expected at most 5 layers, found 9", path, "drafters[0].draft_layers_first");
  CHECK(std::string(located_config_error(e, path).what()) ==
        path + ":7:25: drafters[0].draft_layers_first: expected at most 5 layers, found 9");
  const Error k(ErrorKind::kConfig, "too small", path, "kv.budget_bytes");
  CHECK_THAT(std::string(located_config_error(k, path, {"kv.budget_bytes=4KiB"}).what()),
             StartsWith("--set kv.budget_bytes=4KiB: kv.budget_bytes: too small"));
  // Not written (a default): the file alone, as before; another file: unchanged.
  CHECK(std::string(located_config_error(k, path).what()) == path + ": kv.budget_bytes: too small");
  const Error other(ErrorKind::kIo, "cannot open", "/x/model.gguf", "path");
  CHECK(std::string(located_config_error(other, path).what()) == "/x/model.gguf: path: cannot open");
  std::remove(path.c_str());
}

TEST_CASE("one YAML document: a second one in the file or a --set value is refused, not dropped", "[config]") {
  // YAML::Load read the first document alone: the second one's settings never ran (2026-12-06). The
  // error is located at the second document's first line.
  CHECK_THAT(config_error(kBase + "---\nsampling: {temperature: 0.7}\n"),
             Catch::Contains("bad.yaml:6:1") && Catch::Contains("expected one YAML document, found 2"));
  CHECK_THAT(config_error(kBase, {"name=a\n---\nb"}),
             Catch::Contains("expected one YAML value after '=', found 2 documents"));
  // Controls: a document start marker before the one document, and a --set value of one line.
  CHECK(parse_experiment_config("---\n" + kBase, "ok.yaml").prompts.inline_prompts.size() == 1);
  CHECK(parse_experiment_config(kBase, "ok.yaml", {"name=a---b"}).name == "a---b");
}

TEST_CASE("a comma outside a flow list is refused at its line and not parsed until memory runs out", "[config]") {
  // yaml-cpp 0.7's LoadAll never returned on these texts: it started a new empty document at the ','
  // again and again (a `--set generation.stop=,` took 24 GB before the kernel killed it).
  CHECK_THAT(config_error(","), Catch::Contains("bad.yaml:1:1") && Catch::Contains("a ',' outside [...] or {...}"));
  CHECK_THAT(config_error(kBase + "---\n,"),
             Catch::Contains("bad.yaml:6:1") && Catch::Contains("a ',' outside [...] or {...}"));
  CHECK_THAT(config_error(kBase, {"generation.stop=,"}),
             Catch::Contains("--set generation.stop=,") && Catch::Contains("a ',' outside [...] or {...}"));
  CHECK_THAT(config_error(kBase, {"generation.stop=- a\n,"}), Catch::Contains("a ',' outside [...] or {...}"));
  // Commas where YAML allows them, and a quoted one.
  CHECK(parse_experiment_config(kBase, "ok.yaml", {"generation.stop=[\",\", a]"}).generation.stop ==
        std::vector<std::string>{",", "a"});
  CHECK(parse_experiment_config(kBase, "ok.yaml", {"generation.stop=\",\""}).generation.stop ==
        std::vector<std::string>{","});
  CHECK(parse_experiment_config(kBase, "ok.yaml", {"name=a, b"}).name == "a, b");
}

TEST_CASE("a --set of nothing for a list key is refused, not read as no values", "[config]") {
  // `--set generation.stop=#` ('#' starts a YAML comment) removed every stop string without a word.
  CHECK_THAT(config_error(kBase, {"generation.stop=#"}),
             Catch::Contains("--set generation.stop=#") && Catch::Contains("found nothing (write [] for none"));
  CHECK_THAT(config_error(kBase, {"generation.stop="}), Catch::Contains("found nothing (write [] for none"));
  CHECK(parse_experiment_config(kBase, "ok.yaml", {"generation.stop=[]"}).generation.stop.empty());
  CHECK(parse_experiment_config(kBase, "ok.yaml", {"generation.stop='#'"}).generation.stop ==
        std::vector<std::string>{"#"});
  // In the file, a key with nothing after it is still no values.
  CHECK(parse_experiment_config(kBase + "generation: {stop: }\n", "ok.yaml").generation.stop.empty());
}

TEST_CASE("a sweep of list values: only a layer list is pointed at its string form", "[config]") {
  // The hint sent generation.stop to one stop string "a,b" (which ran as that literal) and
  // prompts.files to a file named "a.jsonl,b.jsonl".
  const std::string stop = config_error(kBase + "sweep:\n  generation.stop: [[a, b]]\n");
  CHECK_THAT(stop, Catch::Contains("sweep.generation.stop[0]") &&
                       Catch::Contains("a list-valued key is swept by one config (or one --set generation.stop=[...])"));
  CHECK_THAT(stop, !Catch::Contains("string form"));
  CHECK_THAT(config_error(kBase + "drafters: [{name: layer_skip}]\nsweep:\n  drafter.draft_layers: [[0, 1]]\n"),
             Catch::Contains("a layer list sweeps its string form"));
}

TEST_CASE("a confidence_from_token past every draft position the entry reaches is refused", "[config]") {
  // It was accepted and never applied its threshold (the threshold gates draft positions from
  // confidence_from_token on, and a step of gamma 2 has no third).
  const std::string entry = "drafters:\n  - {name: layer_skip, draft_layers: [0], num_speculative_tokens: 2, "
                            "confidence_threshold: 0.5, confidence_from_token: 3}\n";
  CHECK_THAT(config_error(kBase + entry), Catch::Contains("bad.yaml:6:") &&
                                              Catch::Contains("drafters[0].confidence_from_token") &&
                                              Catch::Contains("at most its gamma (2), found 3"));
  // Reached at some point of a gamma sweep, or under a schedule up to max_speculative_tokens: taken.
  const std::string swept = "drafters:\n  - {name: layer_skip, draft_layers: [0], confidence_threshold: 0.5, "
                            "confidence_from_token: 3}\nsweep:\n  drafter.num_speculative_tokens: ";
  CHECK_NOTHROW(parse_experiment_config(kBase + swept + "[2, 4]\n", "ok.yaml"));
  CHECK_THAT(config_error(kBase + swept + "[1, 2]\n"), Catch::Contains("at most the largest swept gamma (2), found 3"));
  CHECK_NOTHROW(parse_experiment_config(kBase + entry, "ok.yaml", {"drafters.0.schedule=heuristic"}));
  CHECK_NOTHROW(parse_experiment_config(kBase + entry, "ok.yaml", {"drafters.0.confidence_from_token=2"}));
  CHECK_THAT(config_error(kBase + entry, {"drafters.0.schedule=heuristic", "drafters.0.max_speculative_tokens=2"}),
             Catch::Contains("at most its max_speculative_tokens (schedule heuristic) (2), found 3"));
  // The cost schedule picks 0..gamma and never reads max_speculative_tokens (taken until 2026-12-06).
  CHECK_THAT(config_error(kBase + entry, {"drafters.0.schedule=cost"}), Catch::Contains("at most its gamma (2), found 3"));
}

TEST_CASE("max_speculative_tokens is the heuristic schedule's cap alone", "[config]") {
  // A constant or cost gamma above 16 needed the cap raised too, to no effect (until 2026-12-06).
  const ExperimentConfig c = parse_experiment_config(kBase + "drafters:\n  - {name: prompt_lookup, gamma: 32}\n", "ok.yaml");
  CHECK(c.drafters.at(0).options.num_speculative_tokens == 32);
  CHECK_NOTHROW(parse_experiment_config(kBase + "drafters:\n  - {name: prompt_lookup, gamma: 32, schedule: cost}\n", "ok.yaml"));
  CHECK_THAT(config_error(kBase + "drafters:\n  - {name: prompt_lookup, gamma: 32, schedule: heuristic}\n"),
             Catch::Contains("drafters[0].max_speculative_tokens: expected gamma (32) <= max_speculative_tokens <= 64 "
                             "under the heuristic schedule, found 16 (16 is the default"));
  CHECK_THAT(config_error(kBase + "drafters:\n  - {name: prompt_lookup, max_speculative_tokens: 65}\n"),
             Catch::Contains("drafters[0].max_speculative_tokens: expected 1..64, found 65"));
}

TEST_CASE("a --set through a YAML anchor shared by aliases is refused, not applied to every alias", "[config]") {
  // yaml-cpp gives an anchor and its aliases one node: `--set sampling.seed=9` also set
  // max_new_tokens and the entry's gamma to 9, and the file's config_yaml showed `*1` (until
  // 2026-12-07).
  const std::string scalars = kBase + "sampling: {seed: &n 4}\ngeneration: {max_new_tokens: *n}\n"
                                      "drafters: [{name: prompt_lookup, gamma: *n}]\n";
  for (const char* set : {"sampling.seed=9", "generation.max_new_tokens=9", "drafters.0.gamma=9", "drafter.gamma=9"}) {
    INFO(set);
    CHECK_THAT(config_error(scalars, {set}),
               Catch::Contains(std::string("--set ") + set) && Catch::Contains("no YAML alias shares") &&
                   Catch::Contains("sampling.seed, generation.max_new_tokens, drafters[0].gamma"));
  }
  // A key beside the shared one is set as before, and the aliases still read the anchor.
  const ExperimentConfig c = parse_experiment_config(scalars, "ok.yaml", {"sampling.temperature=0.5"});
  CHECK(c.sampling.temperature == 0.5);
  CHECK(c.sampling.seed == 4);
  CHECK(c.generation.max_new_tokens == 4);
  // A whole entry shared by two list items: writing into either changed both.
  const std::string entries = kBase + "drafters:\n  - &d {name: prompt_lookup, gamma: 2}\n  - *d\n";
  CHECK_THAT(config_error(entries, {"drafters.0.gamma=5"}), Catch::Contains("drafters[0], drafters[1]"));
  CHECK_THAT(config_error(entries, {"drafters.1=[]"}), Catch::Contains("no YAML alias shares"));
}

TEST_CASE("a drafter.<key> override on a config mixing drafters sets the entries that read it", "[config]") {
  // It was refused on the first entry whose drafter does not read the key, so a config with
  // prompt_lookup and layer_skip could take neither drafter.prompt_lookup_max nor
  // drafter.draft_layers (a drafter.<key> sweep already let such entries ignore it).
  const std::string mixed = kBase + "drafters: [{name: prompt_lookup}, {name: layer_skip, draft_layers: [0]}]\n";
  const ExperimentConfig c = parse_experiment_config(mixed, "ok.yaml", {"drafter.prompt_lookup_max=5"});
  CHECK(c.drafters[0].options.prompt_lookup_max == 5);
  const ExperimentConfig d = parse_experiment_config(mixed, "ok.yaml", {"drafter.draft_layers=0-1"});
  CHECK(d.drafters[1].options.draft_layers == std::vector<int64_t>{0, 1});
  // A key no entry reads is still refused, naming the --set.
  CHECK_THAT(config_error(mixed, {"drafter.retrieval_max=4"}),
             Catch::Contains("--set drafter.retrieval_max=4") && Catch::Contains("which no entry's drafter reads"));
  // An entry's own key that its drafter does not read is refused as before, and a params map a
  // --set made is blamed on the --set, not on the file.
  CHECK_THAT(config_error(mixed, {"drafters.1.prompt_lookup_max=5"}), Catch::Contains("does not read it"));
  CHECK_THAT(config_error(mixed, {"drafters.0.params.x=1"}),
             Catch::StartsWith("--set drafters.0.params.x=1: drafters[0].params: expected none with prompt_lookup"));
}

TEST_CASE("prompts.field and prompts.category_field cannot be swept", "[config][sweep]") {
  // Accepted as sweep keys, then always refused at the second point (the same ids with other
  // texts); refused up front now, as name and output.* are.
  for (const char* key : {"prompts.field", "prompts.category_field"}) {
    INFO(key);
    CHECK_THAT(config_error(kBase + "sweep:\n  " + key + ": [a, b]\n"),
               Catch::Contains(std::string("sweep.") + key) && Catch::Contains("run the config once per value"));
  }
  CHECK(parse_experiment_config(kBase + "sweep:\n  prompts.limit: [1, 2]\n", "ok.yaml").sweep.size() == 1);
}

TEST_CASE("models.draft with no draft_model entry to read it is refused", "[config]") {
  // It was loaded by nothing, silently: unread drafter keys were refused, models.draft was not.
  const std::string kDrafted = "models:\n  target: {path: stories260K}\n  draft: {path: stories260K}\n"
                               "prompts:\n  inline: [hello]\n";
  CHECK_THAT(config_error(kDrafted + "drafters: [{name: prompt_lookup}]\n"),
             Catch::Contains("bad.yaml:3:") && Catch::Contains("models.draft: expected models.draft only beside a "
                                                               "draft_model drafter"));
  // Read by a draft_model entry (the control), also where only one sweep point runs one.
  const std::string with = kDrafted + "drafters: [{name: draft_model}]\n";
  CHECK(parse_experiment_config(with, "ok.yaml").drafters[0].options.draft_model == "stories260K");
  CHECK(parse_experiment_config(kDrafted + "drafters: [{label: d}]\n"
                                        "sweep:\n  drafter.name: [prompt_lookup, draft_model]\n",
                                "ok.yaml")
            .sweep.size() == 1);
}

TEST_CASE("equivalence: top_k 1 is refused as temperature 0 is, and a negative temperature is not called 0",
          "[config][equivalence]") {
  // top_k 1 leaves one candidate per row: both engines deterministic for every model, every cell
  // tested nothing, and the check ran to its end before failing.
  CHECK_THAT(config_error(kBase + "equivalence: {top_ks: [5, 1]}\n"),
             Catch::Contains("equivalence.top_ks") && Catch::Contains("found 1: with one candidate per row"));
  CHECK(parse_experiment_config(kBase + "equivalence: {top_ks: [0, 2]}\n", "ok.yaml").equivalence->top_ks.size() == 2);
  const std::string negative = config_error(kBase + "equivalence: {temperatures: [-1]}\n");
  CHECK_THAT(negative, Catch::Contains("expected finite temperatures > 0, found -1"));
  CHECK_THAT(negative, !Catch::Contains("at temperature 0"));
  CHECK_THAT(config_error(kBase + "equivalence: {temperatures: [0]}\n"), Catch::Contains("at temperature 0"));
}

TEST_CASE("a plugin's file parameters are relative to the YAML file", "[config][plugins]") {
  // params.file (medusa_ext's heads) was opened relative to the working directory: the same config
  // run from elsewhere failed, or read another file; and the run did not fingerprint it.
  const std::string yaml = kBase + "drafters:\n  - {plugin: /abs/x.so, name: x, params: {file: h.bin, heads_file: "
                                   "d/e.bin, model_file: /abs/m.bin, n: h.bin, trace_path: t.jsonl}}\n";
  const ExperimentConfig c = parse_experiment_config(yaml, "/tmp/cfgdir/c.yaml");
  const auto& p = c.drafters[0].options.params;
  CHECK(p.at("file") == "/tmp/cfgdir/h.bin");
  CHECK(p.at("heads_file") == "/tmp/cfgdir/d/e.bin");
  CHECK(p.at("model_file") == "/abs/m.bin");  // absolute: as written
  CHECK(p.at("n") == "h.bin");                // not a file parameter: text as written
  CHECK(p.at("trace_path") == "t.jsonl");     // nor an output's path (the plugin's to resolve)
  CHECK(config::is_path_parameter("file"));
  CHECK_FALSE(config::is_path_parameter("_file"));
  CHECK_FALSE(config::is_path_parameter("filed"));
}

TEST_CASE("a plugin entry names its drafter, and an empty plugin path is refused", "[config][plugins]") {
  // Without name: the error came when the plugin loaded, saying "found 'prompt_lookup'" (the
  // default, which the user never wrote); plugin: '' was taken as none.
  CHECK_THAT(config_error(kBase + "drafters:\n  - {plugin: /abs/x.so}\n"),
             Catch::Contains("bad.yaml:6:") && Catch::Contains("drafters[0].plugin: expected name: beside plugin:"));
  CHECK_THAT(config_error(kBase + "drafters:\n  - {plugin: '', name: evil}\n"),
             Catch::Contains("drafters[0].plugin: expected the path of a drafter plugin (a .so file), found an empty one"));
  // Named, or named by a sweep (the controls).
  CHECK(parse_experiment_config(kBase + "drafters:\n  - {plugin: /abs/x.so, method: x}\n", "ok.yaml").drafters.size() == 1);
  CHECK(parse_experiment_config(kBase + "drafters:\n  - {plugin: /abs/x.so}\nsweep:\n  drafter.name: [x, y]\n", "ok.yaml")
            .sweep.size() == 1);
}

TEST_CASE("an empty label and an empty plugin parameter name are refused", "[config]") {
  // label: "" became the drafter's name without a word; params: {'': 1} reached the plugin.
  CHECK_THAT(config_error(kBase + "drafters:\n  - {name: prompt_lookup, label: ''}\n"),
             Catch::Contains("drafters[0].label: expected a non-empty label"));
  CHECK_THAT(config_error(kBase + "drafters:\n  - {plugin: /abs/x.so, name: x, params: {'': 1}}\n"),
             Catch::Contains("expected a parameter name, found an empty one"));
  CHECK(parse_experiment_config(kBase + "drafters:\n  - {name: prompt_lookup}\n", "ok.yaml").drafters[0].label ==
        "prompt_lookup");
}

TEST_CASE("a training config: train.init naming the draft it writes is refused and data.cache_dir defaults to the checkout",
          "[config][train]") {
  const std::string dir = std::string(SPECLAB_BINARY_DIR) + "/test_config_train";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/init.yaml") << "target: {path: stories260K}\ndata: {prompts: {inline: [{text: hi}]}}\n"
                                       "train: {init: d.safetensors}\noutput: {path: d.safetensors}\n";
  // --overwrite moved the draft aside before the init was read: "cannot open: No such file".
  CHECK_THROWS_WITH(load_train_config(dir + "/init.yaml"),
                    Catch::Contains("init.yaml:3") && Catch::Contains("train.init: expected a draft other than output.path"));
  // Without data.cache_dir: the checkout's .cache/draft_data (it was the working directory's,
  // while the same value written in the file was the YAML file's directory's).
  std::ofstream(dir + "/cache.yaml") << "target: {path: stories260K}\ndata: {prompts: {inline: [{text: hi}]}}\n";
  CHECK(load_train_config(dir + "/cache.yaml").data.cache_dir == std::string(SPECLAB_SOURCE_DIR) + "/.cache/draft_data");
  std::ofstream(dir + "/cache2.yaml") << "target: {path: stories260K}\n"
                                         "data: {prompts: {inline: [{text: hi}]}, cache_dir: .cache/draft_data}\n";
  CHECK(load_train_config(dir + "/cache2.yaml").data.cache_dir == dir + "/.cache/draft_data");
}

TEST_CASE("an integer written as a float beyond 2^53 is refused, not rounded", "[config]") {
  // sampling.seed 9007199254740993.0 ran as 9007199254740992 (a double cannot tell them apart).
  CHECK_THAT(config_error(kBase + "sampling: {seed: 9007199254740993.0}\n"), Catch::Contains("sampling.seed"));
  CHECK_THAT(config_error(kBase + "sampling: {seed: 1.234567890123456789e18}\n"), Catch::Contains("sampling.seed"));
  CHECK(parse_experiment_config(kBase + "sampling: {seed: 9007199254740993}\n", "ok.yaml").sampling.seed ==
        9007199254740993ull);  // in digits: exact
  CHECK(parse_experiment_config(kBase + "sampling: {seed: 1e5}\n", "ok.yaml").sampling.seed == 100000);
}
