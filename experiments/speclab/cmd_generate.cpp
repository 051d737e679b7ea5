// speclab generate — decode one prompt and print the text.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "experiments/speclab/cli.h"
#include "framework/core/error.h"
#include "framework/core/utf8_check.h"
#include "experiments/app/session_parts.h"
#include "framework/engine/observers.h"
#include "framework/engine/spec_decode.h"
#include "framework/io/config_fields.h"
#include "framework/io/yaml_util.h"
#include "models/llama/gemv.h"

namespace speclab::cli {

namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (b >= 1024.0 && u < 3) {
    b /= 1024.0;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, units[u]);
  return buf;
}

void print_model_info(const LoadedTarget& m, std::ostream& os) {
  const ModelConfig& c = m.model->config();  // the loader's config plus where the model runs
  os << "model:        " << m.info.source << " (" << m.info.format << ", loaded in " << m.load_seconds << " s)\n"
     << "architecture: " << c.architecture << ", " << c.num_hidden_layers << " layers, hidden " << c.hidden_size
     << ", heads " << c.num_attention_heads << "/" << c.num_key_value_heads << " (q/kv), head_dim " << c.head_dim
     << ", vocab " << c.vocab_size << ", context " << c.max_position_embeddings << ", rope_theta " << c.rope_theta
     << "\n"
     << "on disk:      " << m.info.storage_types << "; " << human_bytes(static_cast<double>(m.info.file_bytes))
     << " of tensor data\n"
     << "weights:      " << human_bytes(static_cast<double>(m.model->weight_bytes())) << " in memory (" << m.model->weight_storage() << ")\n"
     << "KV per token: 2 * " << c.num_hidden_layers << " layers * " << c.num_key_value_heads << " kv_heads * "
     << c.head_dim << (c.kv_geometry().int8() ? " head_dim (+ 4 scale bytes)" : " head_dim") << " * "
     << c.kv_geometry().element_bytes() << " bytes ("
     << c.kv_geometry().dtype << ") = " << c.kv_bytes_per_token(c.kv_geometry().element_bytes()) << " bytes ("
     << human_bytes(static_cast<double>(c.kv_bytes_per_token(c.kv_geometry().element_bytes())) *
                    c.max_position_embeddings)
     << " for the full context, on " << c.device << ")\n";
  if (c.device == "cpu")
    os << "kernels:      " << kernel_isa_name(kernel_isa())
       << " (this CPU's best, capped by SPECLAB_KERNEL_ISA where set)\n";
}

void print_timing(const GenerationResult& r, const char* mode) {
  const double n = static_cast<double>(r.tokens.size());
  std::fprintf(stderr,
               "prompt tokens: %zu, new tokens: %zu, stop: %s, target forwards: %lld\n"
               "KV cache: peak %.2f MiB in use over all pools (draft included), %.2f MiB referenced by the "
               "target sequence\n"
               "prefill: %.3f s (%.1f tok/s); drafter begin (a draft model's or an EAGLE head's prefill): %.3f s; decode: %.3f s "
               "(%.1f tok/s); mode: %s\n",
               r.prompt.size(), r.tokens.size(), to_string(r.stop_reason), static_cast<long long>(r.forward_calls),
               r.kv_peak_bytes / 1048576.0, r.kv_seq_peak_bytes / 1048576.0,
               r.prefill_seconds, r.prompt.size() / std::max(r.prefill_seconds, 1e-9), r.draft_prefill_seconds,
               r.decode_seconds,
               (n - 1) / std::max(r.decode_seconds, 1e-9), mode);
}

// The output ended at the model's context, not where -n or EOS would have ended it: said on
// stderr (stdout holds the text alone). It was said only under --verbose, as "stop: context".
void note_context_stop(const GenerationResult& r, int64_t max_new_tokens) {
  if (r.stop_reason != StopReason::kContext) return;
  std::fprintf(stderr,
               "note: the output stopped at the end of the model's context (%zu prompt + %zu new tokens), before "
               "--max-new-tokens %lld\n",
               r.prompt.size(), r.tokens.size(), static_cast<long long>(max_new_tokens));
}

}  // namespace

int cmd_generate(const std::vector<std::string>& args) {
  ModelArgs margs;
  std::string prompt, chat = "auto", system;
  GenerationOptions gen;
  SamplingOptions samp;
  bool naive = false, verbose = false, stats = false;
  std::string seed;  // parsed as the YAML key is: Boost read "-1" as 2^64 - 1
  std::string kv_budget;  // as kv.budget_bytes: bytes, or with a unit (4GiB)
  DrafterArgs dargs;
  po::options_description desc("speclab generate");
  margs.add_to(desc);
  dargs.add_to(desc);
  desc.add_options()
      ("prompt,p", po::value(&prompt)->required(), "prompt text")
      ("chat", po::value(&chat)->default_value(chat), "apply the model's chat template: auto | on | off")
      ("system", po::value(&system), "system message (chat mode)")
      ("max-new-tokens,n", po::value(&gen.max_new_tokens)->default_value(gen.max_new_tokens), "maximum new tokens")
      ("stop", po::value(&gen.stop)->multitoken(), "stop string(s)")
      ("ignore-eos", po::bool_switch(&gen.ignore_eos), "do not stop at EOS")
      ("temperature,t", po::value(&samp.temperature)->default_value(samp.temperature), "0 = greedy")
      ("top-k", po::value(&samp.top_k)->default_value(samp.top_k), "0 = off (vLLM's -1 too, as in YAML)")
      ("top-p", po::value(&samp.top_p)->default_value(samp.top_p), "1 = off")
      ("seed", po::value(&seed)->default_value(std::to_string(samp.seed)), "RNG seed, 0 to 2^64 - 1")
      ("naive", po::bool_switch(&naive), "no KV cache: recompute the whole sequence every step")
      ("kv-budget", po::value(&kv_budget),
       "K/V bytes over the target's and the drafter's caches (as kv.budget_bytes: 4GiB, 512MiB, bytes); default "
       "2 GiB, or what the target's cache needs for this prompt and -n (twice that with a drafter) where that is more")
      ("verbose,v", po::bool_switch(&verbose), "print model memory accounting and timings to stderr")
      ("stats", po::bool_switch(&stats), "speculative: also run AR and print acceptance, mean accepted length, speedup");
  po::variables_map vm;
  if (!parse_or_help("usage: speclab generate --prompt TEXT [options]", desc, args, vm)) return kExitOk;
  // The flags are checked before the model loads (a large model takes a while to), but for what
  // needs the model: its chat template, its layer count, a draft's vocabulary.
  if (dargs.plugin.empty()) dargs.drafter = canonical_drafter_name(dargs.drafter);  // --drafter ngram, as in YAML
  dargs.check_used(vm);
  if (!yaml_util::parse_uint64(seed, samp.seed))
    throw Error(ErrorKind::kConfig, "expected a non-negative integer below 2^64, found '" + seed + "'", "command line",
                "--seed");
  if (samp.top_k == -1) samp.top_k = 0;  // vLLM's "off", as a config's sampling.top_k reads it
  try {
    gen.validate();
    samp.validate();
  } catch (const Error& e) {
    throw flag_named(flag_named(e, "generation", {{"max_new_tokens", "--max-new-tokens"}, {"stop", "--stop"}}),
                     "sampling",
                     {{"temperature", "--temperature"}, {"top_k", "--top-k"}, {"top_p", "--top-p"}, {"seed", "--seed"}});
  }
  // Greedy decoding draws nothing: a top-k or top-p cut would be ignored (their "off" values are
  // accepted; --seed too, which a plugin's drafter may draw from even under greedy).
  if (samp.temperature == 0.0) {
    if (samp.top_k != 0)
      throw Error(ErrorKind::kConfig, "expected --temperature > 0 with --top-k (temperature 0 is greedy and draws nothing)",
                  "command line", "--top-k");
    if (samp.top_p != 1.0)
      throw Error(ErrorKind::kConfig, "expected --temperature > 0 with --top-p (temperature 0 is greedy and draws nothing)",
                  "command line", "--top-p");
  }
  if (naive && !dargs.drafter.empty())
    throw Error(ErrorKind::kConfig, "--naive is an AR mode; drop it with --drafter", "command line", "--naive");
  // Naive decoding keeps no K/V cache: a --kv-dtype would be ignored (and -v reported a cache).
  if (naive && vm.count("kv-dtype") && !vm["kv-dtype"].defaulted())
    throw Error(ErrorKind::kConfig, "expected no --kv-dtype with --naive, which keeps no K/V cache", "command line",
                "--kv-dtype");
  if (naive && vm.count("kv-budget"))
    throw Error(ErrorKind::kConfig, "expected no --kv-budget with --naive, which keeps no K/V cache", "command line",
                "--kv-budget");
  if (stats && dargs.drafter.empty()) throw Error(ErrorKind::kConfig, "--stats needs --drafter", "command line", "--stats");
  // An empty --system would render as no system message (the template's default system prompt,
  // e.g. Qwen's "You are Qwen..."), not as the empty system turn HF and llama.cpp render for it.
  if (vm.count("system") && system.empty())
    throw Error(ErrorKind::kConfig,
                "expected a non-empty system message, found an empty one (an empty system turn is not supported: "
                "without --system the chat template's default applies)",
                "command line", "--system");
  // Text flags must be UTF-8, as a config's and a prompt file's text must: a Latin-1 byte became
  // byte-fallback tokens silently (the model saw other text than the user meant).
  // --stop too: a stop string with such a byte never matched the decoded text (until 2026-12-06).
  std::vector<std::pair<const char*, const std::string*>> texts = {{"--prompt", &prompt}, {"--system", &system}};
  for (const std::string& s : gen.stop) texts.emplace_back("--stop", &s);
  for (const auto& [flag, text] : texts)
    if (const size_t bad = first_invalid_utf8(*text); bad != std::string::npos)
      throw Error(ErrorKind::kConfig,
                  "expected UTF-8 text, found the byte " + byte_name(*text, bad) + " at byte " + std::to_string(bad) +
                      ", which is not well-formed UTF-8",
                  "command line", flag);
  check_chat_flags(chat, system);
  const DrafterOptions dopts = dargs.drafter.empty() ? DrafterOptions{} : dargs.options();
  if (!dargs.drafter.empty() && dopts.schedule == "cost" && !samp.deterministic())
    std::cerr << "warning: --schedule cost under sampling: the output is not reproducible from --seed (each step's "
                 "gamma follows the measured timings, and with it the verifier's random draws)\n";

  const std::unique_ptr<LoadedTarget> loaded = load_runtime_model(margs);
  const LoadedTarget& m = *loaded;
  if (verbose) print_model_info(m, std::cerr);
  const TokenList ids = build_prompt(m, prompt, chat, system);
  const Tokenizer& tok = *m.info.tokenizer;
  if (naive) {
    GenerationResult r = generate_ar(*m.model, tok, ids, gen, samp, KvMode::kNaive);
    std::cout << r.text << std::endl;
    note_context_stop(r, gen.max_new_tokens);
    if (verbose) print_timing(r, "AR naive");
    return kExitOk;
  }

  // One Session: the speculative run (or AR without --drafter), then AR for --stats. One budget
  // over the target's and the drafter's caches. It was a fixed 2 GiB, with no flag: a model with a
  // large cache per token failed mid-run, told to raise kv.budget_bytes, which generate has no way
  // to (until 2026-12-07).
  const ModelConfig& mc = m.model->config();
  const int64_t ctx = mc.max_position_embeddings > 0 ? mc.max_position_embeddings : int64_t(1) << 30;
  KvOptions kv;  // 16-token blocks
  if (!kv_budget.empty()) {
    const yaml_util::YamlOrigin origin("command line");
    config::byte_count().read(yaml_util::YamlValue(&origin, YAML::Node(kv_budget), YAML::Node(), "--kv-budget"), config::Ctx{},
                              kv.budget_bytes);
  } else {
    // The target's positions at most (prompt, -n, a verification pass's rows); with a drafter
    // twice that: room for a draft model's or head's cache, which is smaller than the target's for
    // the pairs SpecLab runs. (Each pool may take the whole budget: no more than needed is asked.)
    const int64_t room = dargs.drafter.empty() ? 0 : dopts.longest_draft() + 1;
    const int64_t positions =
        std::min<int64_t>(static_cast<int64_t>(ids.size()) + std::min<int64_t>(gen.max_new_tokens, ctx) + room, ctx);
    kv.budget_bytes =
        std::max(kv.budget_bytes, (dargs.drafter.empty() ? 1 : 2) * kv_options_for(mc, positions).budget_bytes);
  }
  const auto budget_flag = [&](const Error& e) {
    if (e.field() != "kv.budget_bytes" && !(e.file() == "kv" && e.field() == "budget_bytes")) return e;
    std::string msg = e.message();
    if (const size_t at = msg.find("raise kv.budget_bytes"); at != std::string::npos)
      msg.replace(at, 21, "raise --kv-budget");
    if (const size_t at = msg.find("generation.max_new_tokens"); at != std::string::npos) msg.replace(at, 25, "-n");
    return Error(e.kind(), msg, "command line", "--kv-budget");
  };
  std::unique_ptr<SessionParts> parts_owner;
  try {
    parts_owner = std::make_unique<SessionParts>(m, kv);
    // Up front, as `run` checks its budget: a given budget that cannot hold the AR run of this
    // prompt to -n failed after the tokens it had decoded.
    check_budget_holds_ar_runs(*parts_owner, {ids}, gen.max_new_tokens, ctx, "command line");
  } catch (const Error& e) {
    throw budget_flag(e);
  }
  SessionParts& parts = *parts_owner;
  Method method;
  // The name the run was asked for (a plugin's entry name, as `run` labels it), not whatever the
  // drafter's own name() returns.
  const std::string& drafter_name = dopts.name;
  if (!dargs.drafter.empty()) {
    method = {dargs.named_by_flags([&] { return &parts.add_drafter(dopts); }), dopts};
  }
  Session session(*m.model, tok, parts.kv_target());
  PhaseTimer timer;
  ProbabilityLog log;
  session.add_observer(timer);
  session.add_observer(log);
  // The prompt's own errors (empty, longer than the context) named "prompt", not the flag.
  const auto begin = [&](const Request& r) {
    try {
      session.begin(r);
    } catch (const Error& e) {
      if (e.file() == "prompt") throw Error(e.kind(), e.message(), "command line", "--prompt");
      throw budget_flag(e);
    }
  };
  const auto to_end = [&] {
    try {
      return run_to_end(session);
    } catch (const Error& e) {
      throw budget_flag(e);
    }
  };
  begin({ids, method, gen, samp});
  const SpecResult r = to_end();
  std::cout << r.text << std::endl;
  note_context_stop(r, gen.max_new_tokens);
  if (verbose) print_timing(r, method.drafter ? ("speculative (" + drafter_name + ")").c_str() : "AR cached");
  if (stats) {
    const Method no_drafter;
    begin({ids, no_drafter, gen, samp});
    const SpecResult ar = to_end();
    const double t_spec = r.prefill_seconds + r.draft_prefill_seconds + r.decode_seconds,
                 t_ar = ar.prefill_seconds + ar.decode_seconds;
    const char* same = ar.tokens == r.tokens
                           ? "output identical to AR"
                           : (samp.deterministic() ? "OUTPUT DIFFERS FROM AR" : "sampled: outputs differ by design");
    if (r.steps.empty()) {
      // The prefill's token was the whole output (-n 1, or EOS first): no step drafted, so there is
      // no acceptance and no decode phase to compare (it printed a ratio of two timer noises).
      std::printf("drafter %s: no speculative steps (the prefill's token ended the output): no acceptance or "
                  "speedup to report; %s\n",
                  drafter_name.c_str(), same);
      return kExitOk;
    }
    int64_t drafted = 0;
    for (const SpecStep& st : r.steps) drafted += st.drafted;
    // alpha as `speclab run` and its report define it (accepted / examined positions); the share
    // of all drafted tokens accepted beside it (drafts after a rejection are never examined).
    char acceptance[128] = "alpha: no drafts";
    if (drafted > 0)
      std::snprintf(acceptance, sizeof acceptance, "alpha %.3f (accepted / examined positions; %.3f of all drafted)",
                    r.alpha(), r.acceptance_rate());
    std::printf("drafter %s, gamma %d (%s): %zu steps, %zu target forwards, %s, mean accepted "
                "length %.3f tokens/forward\n",
                drafter_name.c_str(), method.options.num_speculative_tokens, method.options.schedule.c_str(),
                r.steps.size(), static_cast<size_t>(r.forward_calls), acceptance, r.mean_accepted_length());
    // Decode phase (prompt processing of both models excluded), as `speclab run` reports it: per
    // decoded token on both sides (the prefill's token excluded), since under sampling the two runs
    // stop at EOS at different lengths and a ratio of total times counted that as speed (a
    // 126-token speculative run against a 300-token AR one read 1.50x at 0.63x per token). The
    // totals follow, per generated token.
    const double spec_decoded = static_cast<double>(r.tokens.size()) - 1.0,
                 ar_decoded = static_cast<double>(ar.tokens.size()) - 1.0;
    // An AR run that ended on its prefill token (sampled EOS) decoded nothing to compare with.
    char decode_speedup[32] = "n/a";
    if (ar_decoded >= 1)
      std::snprintf(decode_speedup, sizeof decode_speedup, "%.2fx",
                    (ar.decode_seconds / ar_decoded) / (r.decode_seconds / spec_decoded));
    const double total_speedup =
        (t_ar / static_cast<double>(ar.tokens.size())) / (t_spec / static_cast<double>(r.tokens.size()));
    std::printf("decode time: speculative %.3f s for %.0f tokens (draft %.3f, verify %.3f, accept %.3f, kv %.3f), "
                "AR %.3f s for %.0f -> speedup %s per token; with prefill (draft's %.3f s included) %.3f s vs "
                "%.3f s -> %.2fx per token; %s\n",
                r.decode_seconds, spec_decoded, r.draft_seconds, r.verify_seconds, r.accept_seconds, r.kv_seconds,
                ar.decode_seconds, ar_decoded, decode_speedup, r.draft_prefill_seconds, t_spec, t_ar, total_speedup,
                same);
  }
  return kExitOk;
}

}  // namespace speclab::cli
