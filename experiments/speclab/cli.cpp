#include "experiments/speclab/cli.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>

#include "framework/core/error.h"
#include "framework/core/model_source.h"
#include "framework/core/thread_pool.h"
#include "framework/io/yaml_util.h"
#include "models/llama/gemv.h"
#include "models/loaders/export.h"

namespace speclab::cli {

void ModelArgs::add_to(po::options_description& desc) {
  desc.add_options()
      ("model,m", po::value(&model)->default_value(model),
       ("model path (.gguf file, llama2.c .bin, HF directory) or named entry: " + named_model_list()).c_str())
      ("format", po::value(&format)->default_value(format), "auto | gguf | safetensors | llama2c")
      ("tokenizer", po::value(&tokenizer), "llama2.c tokenizer.bin (default: beside the model)")
      ("weights", po::value(&weights)->default_value(weights),
       "native (GGUF F16/BF16, Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/IQ4_NL, Q2_K..Q6_K and IQ4_XS matrices stay in their blocks) | f32 (dequantize everything at load)")
      ("activations", po::value(&activations)->default_value(activations),
       "auto | int8 (activation rows quantized to int8 against packed weights, the default) | f32")
      ("device", po::value(&device)->default_value(device), "cpu | cuda | cuda:N (weights, K/V and activations live there)")
      ("dtype", po::value(&dtype)->default_value(dtype),
       "auto (CPU: as --weights says; CUDA: bfloat16) | float32 | bfloat16 | float16 (weights dequantized to it at load)")
      ("kv-dtype", po::value(&kv_dtype)->default_value(kv_dtype),
       "auto (float16 for quantized GGUF weights on the CPU, as llama.cpp; else the model's dtype) | float32 | "
       "float16 | int8 (the K/V cache; float16 halves the bytes attention reads, int8 (CPU) nearly halves them again)")
      ("threads", po::value(&threads)->default_value(threads), "CPU threads for the model kernels (0 = all cores)");
}

ModelSource ModelArgs::source() const {
  ModelSource s;
  s.path = model;
  s.format = format;
  s.tokenizer = tokenizer;
  s.weights = weights;
  s.activations = activations;
  s.device = device;
  s.dtype = dtype;
  s.kv_dtype = kv_dtype;
  return s;
}

Error flag_named(const Error& e, const std::string& section, const std::map<std::string, std::string>& flags) {
  const std::string prefix = section + ".";
  const std::string field = e.field().rfind(prefix, 0) == 0 ? e.field().substr(prefix.size()) : e.field();
  const auto it = flags.find(field);
  if (it == flags.end()) return e;
  return Error(e.kind(), e.message(), e.file() == section || e.file().empty() ? "command line" : e.file(), it->second);
}

void add_device_override(std::vector<std::string>& overrides, const std::string& device,
                         const std::string& config_path) {
  if (device.empty()) return;
  const WrittenKey set = written_key(config_path, overrides, "models.target.device");
  if (set.where.rfind("--set ", 0) == 0)
    throw Error(ErrorKind::kConfig,
                "expected --device or a --set of models.target.device, found both (" + set.where.substr(6) +
                    " and --device " + device + ")",
                "command line", "--device");
  overrides.push_back("models.target.device=" + device);
}

Error device_flag_error(const Error& e, const std::string& device) {
  if (device.empty() || e.file() != "--set models.target.device=" + device) return e;
  return Error(e.kind(), e.message(), "command line", "--device");
}

Error ModelArgs::flag_error(const Error& e) {
  static const std::map<std::string, std::string> flags = {
      {"path", "--model"},       {"format", "--format"}, {"tokenizer", "--tokenizer"}, {"weights", "--weights"},
      {"activations", "--activations"}, {"device", "--device"}, {"dtype", "--dtype"},   {"kv_dtype", "--kv-dtype"},
  };
  return e.file() == "model" ? flag_named(e, "model", flags) : e;
}

void DrafterArgs::add_to(po::options_description& desc) {
  po::options_description own("drafter (speculative decoding; without --drafter, AR decoding)");
  own.add_options()
      ("drafter", po::value(&drafter), "speculative decoding with: prompt_lookup (or ngram) | layer_skip | draft_model | eagle | medusa | retrieval | <plugin name>")
      ("plugin", po::value(&plugin), "drafter plugin shared library (.so)")
      ("gamma", po::value(&gamma)->default_value(gamma), "draft tokens per step (num_speculative_tokens)")
      ("schedule", po::value(&schedule)->default_value(schedule), "draft length schedule: constant | heuristic (from --gamma, +2 after a fully accepted step, -1 otherwise, "
                                                         "up to max(--gamma, 16)) | cost (gamma 0..--gamma by measured costs)")
      ("confidence-threshold", po::value(&confidence_threshold)->default_value(confidence_threshold),
       "stop drafting below this draft top probability (0 = off)")
      ("confidence-from-token", po::value(&confidence_from_token)->default_value(confidence_from_token),
       "the first draft position the confidence threshold applies to (earlier tokens are always drafted)")
      ("prompt-lookup-min", po::value(&lookup_min)->default_value(lookup_min), "prompt_lookup: shortest n-gram")
      ("prompt-lookup-max", po::value(&lookup_max)->default_value(lookup_max), "prompt_lookup: longest n-gram")
      ("prompt-lookup-first", po::bool_switch(&lookup_first),
       "any other drafter: draft a prompt-lookup continuation where the context has a match, the drafter elsewhere")
      ("retrieval-first", po::bool_switch(&retrieval_first),
       "any other drafter: where prompt lookup (if first) has no match, the retrieval datastore's continuation of a "
       "suffix match of --retrieval-min or more tokens, the drafter elsewhere")
      ("retrieval-datastore", po::value(&retrieval_datastore),
       "with --retrieval-first: the datastore it reads (default: the target's trained or shipped one, docs/train-draft.md)")
      ("fallback-gamma", po::value(&fallback_gamma)->default_value(fallback_gamma),
       "with --prompt-lookup-first or --retrieval-first: the drafter's (and the datastore's) tokens per step at most (0 = --gamma)")
      ("retrieval-min", po::value(&retrieval_min)->default_value(retrieval_min), "retrieval: shortest context suffix matched in the datastore")
      ("retrieval-max", po::value(&retrieval_max)->default_value(retrieval_max), "retrieval: longest context suffix matched in the datastore")
      ("draft-layers", po::value(&layers), "layer_skip: target layers the draft runs, e.g. 0-14 (default: first half)")
      ("draft-model", po::value(&draft_model), "draft_model: model path or named entry; eagle, medusa: the head; retrieval: the datastore (default: the trained or shipped one, docs/train-draft.md)")
      ("draft-format", po::value(&draft_format)->default_value(draft_format), "draft_model: format")
      ("draft-tokenizer", po::value(&draft_tokenizer), "draft_model: a llama2.c draft's tokenizer.bin (default: beside it)")
      ("draft-vocab", po::value(&draft_vocab)->default_value(draft_vocab),
       "draft_model: LM head over the N most frequent tokens only (FR-Spec; 0 = whole vocabulary)")
      ("param", po::value(&params)->multitoken(), "plugin parameter key=value (repeatable)");
  for (const auto& o : own.options()) names_.push_back(o->long_name());
  desc.add(own);
}

void DrafterArgs::check_used(const po::variables_map& vm) const {
  const auto given = [&](const std::string& n) { return vm.count(n) > 0 && !vm[n].defaulted(); };
  if (given("drafter") && drafter.empty())
    throw Error(ErrorKind::kConfig, "expected a drafter name (without --drafter, AR decoding), found an empty one",
                "command line", "--drafter");
  // --plugin "" was taken as no plugin, and the plugin's drafter name as an unknown built-in.
  if (given("plugin") && plugin.empty())
    throw Error(ErrorKind::kConfig, "expected the path of a drafter plugin (a .so file), found an empty one",
                "command line", "--plugin");
  if (drafter.empty()) {
    for (const std::string& n : names_)
      if (n != "drafter" && given(n))
        throw Error(ErrorKind::kConfig, "expected --drafter with --" + n + " (without --drafter, generate decodes AR and "
                                        "would ignore it), found none", "command line", "--" + n);
    return;
  }
  // A flag the built-in drafter never reads would be ignored. A plugin's drafter may read any
  // option (and a plugin may take a built-in's name), so nothing is refused with --plugin.
  if (given("plugin")) return;
  const std::vector<std::string>& builtins = builtin_drafter_names();
  if (std::find(builtins.begin(), builtins.end(), drafter) == builtins.end()) {
    std::string known;
    for (const std::string& b : builtins) known += (known.empty() ? "" : ", ") + b;
    throw Error(ErrorKind::kConfig,
                "unknown drafter '" + drafter + "'; known drafters: " + known +
                    " (or load a plugin with --plugin)",
                "command line", "--drafter");
  }
  if (drafter == "draft_model" && draft_model.empty())
    throw Error(ErrorKind::kConfig, "expected a draft model path or named entry with --drafter draft_model, found none",
                "command line", "--draft-model");
  // flag -> the DrafterOptions key it sets, whose readers drafter_key_readers lists (the other
  // flags, gamma and the schedule flags, apply to every drafter).
  static const std::map<std::string, std::string> keys = {
      {"prompt-lookup-min", "prompt_lookup_min"},
      {"prompt-lookup-max", "prompt_lookup_max"},
      {"retrieval-min", "retrieval_min"},
      {"retrieval-max", "retrieval_max"},
      {"draft-layers", "draft_layers"},
      {"draft-model", "draft_model"},
      {"draft-format", "draft_model_format"},
      {"draft-tokenizer", "draft_model_tokenizer"},
      {"draft-vocab", "draft_vocab"},
      {"confidence-threshold", "confidence_threshold"},
      {"confidence-from-token", "confidence_from_token"},
      {"param", "params"},
  };
  DrafterOptions sources;  // what decides who reads a key: the drafter and its lookup/datastore sources
  sources.name = drafter;
  sources.prompt_lookup_first = lookup_first;
  sources.retrieval_first = retrieval_first;
  for (const auto& [flag, key] : keys) {
    if (!given(flag) || drafter_reads_key(sources, key)) continue;
    std::string by;
    for (const std::string& w : drafter_key_readers(key).readers) by += (by.empty() ? "" : ", ") + w;
    if (by.empty()) by = "a plugin's drafter";
    // The sources in front of a drafter read their keys too (it named only the drafters).
    if (key.rfind("prompt_lookup_", 0) == 0) by += ", or any drafter with --prompt-lookup-first";
    if (key.rfind("retrieval_", 0) == 0 || key.rfind("confidence_", 0) == 0)
      by += ", or any drafter with --retrieval-first";
    throw Error(ErrorKind::kConfig,
                "expected no --" + flag + " with --drafter " + drafter + ", which does not read it (read by: " + by + ")",
                "command line", "--" + flag);
  }
}

DrafterOptions DrafterArgs::options() const {
  DrafterOptions o;
  o.name = drafter;
  o.plugin = plugin;
  o.num_speculative_tokens = gamma;
  o.max_speculative_tokens = std::max(gamma, 16);
  o.schedule = schedule;
  o.confidence_threshold = confidence_threshold;
  o.confidence_from_token = confidence_from_token;
  o.prompt_lookup_min = lookup_min;
  o.prompt_lookup_max = lookup_max;
  o.prompt_lookup_first = lookup_first;
  o.fallback_speculative_tokens = fallback_gamma;
  o.retrieval_min = retrieval_min;
  o.retrieval_max = retrieval_max;
  o.retrieval_first = retrieval_first;
  o.retrieval_datastore = retrieval_datastore;
  if (!layers.empty()) o.draft_layers = parse_layer_list(layers, "--draft-layers");
  o.draft_model = draft_model;
  o.draft_model_format = draft_format;
  o.draft_model_tokenizer = draft_tokenizer;
  o.draft_vocab = draft_vocab;
  for (const auto& kv : params) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      throw Error(ErrorKind::kConfig, "expected key=value, found '" + kv + "'", "command line", "--param");
    const std::string key = kv.substr(0, eq);
    // "a =1" passed the key "a " to the plugin (a YAML key cannot end in a blank; until 2026-12-07).
    if (key.find_first_of(" \t") == 0 || key.find_last_of(" \t") == key.size() - 1)
      throw Error(ErrorKind::kConfig, "expected a key without surrounding blanks, found '" + key + "' in '" + kv + "'",
                  "command line", "--param");
    if (o.params.count(key))  // the last value won without a word (until 2026-12-06)
      throw Error(ErrorKind::kConfig, "expected each parameter once, found '" + key + "' again in '" + kv + "'",
                  "command line", "--param");
    o.params[key] = kv.substr(eq + 1);
  }
  named_by_flags([&] { o.validate(); });
  // A threshold from a draft position no step reaches never applies (as a config's entry).
  const int64_t reach = o.longest_draft();
  if (o.plugin.empty() && o.confidence_threshold > 0.0 && o.confidence_from_token > reach)
    throw Error(ErrorKind::kConfig,
                "expected a draft position a step reaches, at most " +
                    std::string(o.schedule != "heuristic" ? "--gamma" : "the heuristic schedule's largest draft") + " (" +
                    std::to_string(reach) + "), found " + std::to_string(o.confidence_from_token) +
                    ": the confidence threshold would never apply",
                "command line", "--confidence-from-token");
  return o;
}

Error DrafterArgs::flag_error(const Error& e) {
  static const std::map<std::string, std::string> flags = {
      {"name", "--drafter"},
      {"plugin", "--plugin"},
      {"num_speculative_tokens", "--gamma"},
      {"max_speculative_tokens", "--gamma"},
      {"schedule", "--schedule"},
      {"confidence_threshold", "--confidence-threshold"},
      {"confidence_from_token", "--confidence-from-token"},
      {"prompt_lookup_min", "--prompt-lookup-min"},
      {"prompt_lookup_max", "--prompt-lookup-max"},
      {"prompt_lookup_first", "--prompt-lookup-first"},
      {"retrieval_first", "--retrieval-first"},
      {"retrieval_datastore", "--retrieval-datastore"},
      {"fallback_speculative_tokens", "--fallback-gamma"},
      {"retrieval_min", "--retrieval-min"},
      {"retrieval_max", "--retrieval-max"},
      {"draft_layers", "--draft-layers"},
      {"draft_layers_first", "--draft-layers"},
      {"draft_model", "--draft-model"},
      {"draft_model_format", "--draft-format"},
      {"draft_model_tokenizer", "--draft-tokenizer"},
      {"draft_vocab", "--draft-vocab"},
      {"params", "--param"},
  };
  // A field may be written as its config path ("drafter.draft_model", read_draft's).
  const Error named = flag_named(e, "drafter", flags);
  if (named.file() != "command line") return named;
  return Error(named.kind(), with_flag_names(named.message()), named.file(), named.field());
}

std::string with_flag_names(std::string message) {
  // The keys that a DrafterOptions::validate() message may name beside the one at fault (not
  // draft_model, which is also a drafter's name). Longer keys first, so that none is a prefix of
  // a later one's match.
  static const std::pair<const char*, const char*> keys[] = {
      {"fallback_speculative_tokens", "--fallback-gamma"},
      {"confidence_from_token", "--confidence-from-token"},
      {"confidence_threshold", "--confidence-threshold"},
      {"retrieval_datastore", "--retrieval-datastore"},
      {"prompt_lookup_first", "--prompt-lookup-first"},
      {"prompt_lookup_min", "--prompt-lookup-min"},
      {"prompt_lookup_max", "--prompt-lookup-max"},
      {"retrieval_first", "--retrieval-first"},
      {"retrieval_min", "--retrieval-min"},
      {"retrieval_max", "--retrieval-max"},
  };
  for (const auto& [key, flag] : keys) {
    const std::string k = key;
    std::string out;
    size_t i = 0;
    while (i < message.size()) {
      const size_t at = message.find(k, i);
      const bool word = at != std::string::npos && (at == 0 || !(std::isalnum(static_cast<unsigned char>(message[at - 1])) ||
                                                               message[at - 1] == '_' || message[at - 1] == '-')) &&
                        (at + k.size() == message.size() ||
                         !(std::isalnum(static_cast<unsigned char>(message[at + k.size()])) || message[at + k.size()] == '_'));
      if (at == std::string::npos) {
        out += message.substr(i);
        break;
      }
      out += message.substr(i, at - i);
      i = at + k.size();
      if (!word) {
        out += k;
        continue;
      }
      // "key: true" is the flag, "key: false" no flag, "key: 3" the flag and its value.
      if (message.compare(i, 6, ": true") == 0) {
        out += flag;
        i += 6;
      } else if (message.compare(i, 7, ": false") == 0) {
        out += std::string("no ") + flag;
        i += 7;
      } else if (message.compare(i, 2, ": ") == 0) {
        out += std::string(flag) + " ";
        i += 2;
      } else {
        out += flag;
      }
    }
    message = out;
  }
  return message;
}

void validate_threads(int threads) {
  if (threads < 0 || threads > kMaxThreads)
    throw Error(ErrorKind::kConfig,
                "expected 0 (all cores) to " + std::to_string(kMaxThreads) + " threads, found " + std::to_string(threads),
                "command line", "--threads");
}

void set_threads(int threads) {
  validate_threads(threads);
  set_compute_threads(threads);
}

void apply_kernel_isa_env() {
  const char* v = std::getenv("SPECLAB_KERNEL_ISA");
  if (v == nullptr || *v == '\0') return;
  const std::string s = v;
  const KernelIsa isa = s == "scalar"       ? KernelIsa::kScalar
                        : s == "avx2"       ? KernelIsa::kAvx2
                        : s == "avx512"     ? KernelIsa::kAvx512
                        : s == "avx512vnni" ? KernelIsa::kAvx512Vnni
                                            : throw Error(ErrorKind::kConfig,
                                                          "expected scalar, avx2, avx512 or avx512vnni, found '" + s + "'",
                                                          "environment", "SPECLAB_KERNEL_ISA");
  set_kernel_isa_cap(isa);
}

std::unique_ptr<LoadedTarget> load_runtime_model(const ModelArgs& args) {
  set_threads(args.threads);
  try {
    return load_target(args.source());
  } catch (const Error& e) {
    // The tokenizer file's own errors name the file only ("error: /x: cannot open tokenizer file").
    if (!args.tokenizer.empty() && e.file() == args.tokenizer && e.field().empty())
      throw Error(e.kind(), e.message(), e.file(), "--tokenizer");
    // So do the model file's ("error: x.gguf: no such file or directory" named no --model).
    if (e.file() == args.source().path && e.field().empty()) throw Error(e.kind(), e.message(), e.file(), "--model");
    throw ModelArgs::flag_error(e);
  }
}

void check_chat_flags(const std::string& chat, const std::string& system) {
  if (chat != "on" && chat != "off" && chat != "auto")
    throw Error(ErrorKind::kConfig, "expected on, off or auto; found '" + chat + "'", "command line", "--chat");
  if (chat == "off" && !system.empty())
    throw Error(ErrorKind::kConfig,
                "expected no --system with --chat off (a system message is part of the chat template: it would be ignored)",
                "command line", "--system");
}

TokenList build_prompt(const LoadedTarget& m, const std::string& text, const std::string& chat,
                       const std::string& system) {
  check_chat_flags(chat, system);
  check_chat_renders(m.info, chat, m.info.source, "--chat", "--chat off");
  const bool use_chat = use_chat_template(m.info, chat);
  if (use_chat && !m.info.chat_template.available())
    throw Error(ErrorKind::kConfig, "the model ships no chat template; use --chat off", m.info.source, "--chat");
  if (!use_chat && !system.empty())  // --chat auto on a model without a template
    throw Error(ErrorKind::kConfig,
                "expected no --system without a chat template (a system message is part of the chat template, and "
                "this model has none: it would be ignored)",
                "command line", "--system");
  return encode_prompt(m.info, text, use_chat, system);
}

bool parse_or_help(const std::string& usage, po::options_description& desc, const std::vector<std::string>& args,
                   po::variables_map& vm, const std::string& positional, const std::string& help_notes,
                   int positional_count) {
  desc.add_options()("help,h", "show this help");
  po::positional_options_description pos;
  if (!positional.empty()) pos.add(positional.c_str(), positional_count);
  try {
    po::parsed_options parsed = po::command_line_parser(args).options(desc).positional(pos).run();
    // A number flag whose text no double can hold: Boost read 1e-400 as 0 (--temperature 1e-400
    // decoded greedily, and --top-k beside it was refused as if under temperature 0).
    // An integer flag reads what a config's integer key reads ("1e3", exactly integral; YAML's
    // max_new_tokens: 1e3 was taken while -n 1e3 was refused in Boost's words), and one out of the
    // type's range is refused naming the flag and the range.
    for (po::option& o : parsed.options) {
      const po::option_description* d = o.unregistered ? nullptr : desc.find_nothrow(o.string_key, false);
      if (!d) continue;
      const po::value_semantic* sem = d->semantic().get();
      const bool i32 = dynamic_cast<const po::typed_value<int>*>(sem) != nullptr;
      const bool i64 = dynamic_cast<const po::typed_value<int64_t>*>(sem) != nullptr ||
                       dynamic_cast<const po::typed_value<long long>*>(sem) != nullptr;
      if (!i32 && !i64) continue;
      for (std::string& v : o.value) {
        int64_t x = 0;
        const bool ok = yaml_util::parse_int64(v, x);
        const int64_t lo = i32 ? std::numeric_limits<int>::min() : std::numeric_limits<int64_t>::min();
        const int64_t hi = i32 ? std::numeric_limits<int>::max() : std::numeric_limits<int64_t>::max();
        if (!ok || x < lo || x > hi)
          throw Error(ErrorKind::kConfig,
                      "expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) + ", found '" +
                          v + "'",
                      "command line", "--" + o.string_key);
        v = std::to_string(x);
      }
    }
    for (const po::option& o : parsed.options) {
      const po::option_description* d = o.unregistered ? nullptr : desc.find_nothrow(o.string_key, false);
      if (!d || !dynamic_cast<const po::typed_value<double>*>(d->semantic().get())) continue;
      for (const std::string& v : o.value) {
        double x = 0;
        bool out_of_range = false;
        if (!yaml_util::parse_double(v, x, &out_of_range) && out_of_range)
          throw Error(ErrorKind::kConfig, yaml_util::double_range_message(v), "command line", "--" + o.string_key);
      }
    }
    po::store(parsed, vm);
    if (vm.count("help")) {
      std::cout << usage << "\n\n" << (help_notes.empty() ? "" : help_notes + "\n\n") << desc << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw Error(ErrorKind::kConfig, e.what(), "command line");
  }
  return true;
}

}  // namespace speclab::cli

namespace speclab::cli {

void print_summary(const ExperimentSummary& summary, const std::vector<PointRecord>& points) {
  std::printf("alpha: per-token acceptance rate [95%% Wilson CI]; tau: tokens per target forward; c: draft/target cost "
              "per token; speedup: AR / speculative decode-phase wall time per decoded token (prefill excluded); predicted: Leviathan et al. (2023) from alpha, "
              "c and each step's number of drafted tokens; efficiency: speedup / predicted; lossless: greedy output identical to AR\n\n");
  std::printf("%s", format_summary_table(summary.overall, points).c_str());
  bool several_categories = false;
  for (const auto& m : summary.by_category)
    several_categories = several_categories || m.category != summary.by_category.front().category;
  if (several_categories)
    std::printf("\nby prompt category:\n%s", format_summary_table(summary.by_category, points).c_str());
  std::fflush(stdout);
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

void apply_output_flag(ExperimentConfig& config, const std::string& path, const std::string& flag) {
  if (path.empty()) return;
  try {
    set_output_path(config, path);
  } catch (const Error& e) {
    throw Error(e.kind(), e.message(), "command line", flag);
  }
}

}  // namespace speclab::cli
