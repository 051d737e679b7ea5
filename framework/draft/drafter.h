// Drafter — the one interface every draft strategy implements (STYLE.md §5; compare llama.cpp's
// common/speculative.h init/draft/accept/free).
//
// Lifecycle for one sequence:
//   begin(seq, prompt)        once, after the target prefilled `prompt` (not when the prefill's
//                             token ends the run: then neither begin nor end is called)
//   propose(ctx, max_k)       each step: up to max_k draft tokens continuing ctx.tokens
//   accept(seq, n_accepted)   each step: how many of the proposed tokens the target kept
//   end(seq)                  once, when the sequence finishes (release drafter state)
// The engine (framework/engine/spec_decode.h) never branches on the drafter type.
//
// Probabilities: a drafter that samples its tokens from a distribution returns, for each draft
// token, the full processed distribution q it sampled from (after the same temperature/top-k/
// top-p transform the target's p gets: framework/sampling/sampling.h logits_to_probs). A
// deterministic drafter (n-gram lookup, a greedy draft) returns no probs; the verifier then
// treats q as one-hot at the draft token, which is still lossless (Leviathan et al. 2023).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "framework/core/rng.h"
#include "framework/core/types.h"
#include "framework/sampling/sampling.h"

namespace speclab {

class KvCacheManager;
class Model;

struct DraftBlock {
  TokenList tokens;                      // [k] proposed tokens, k <= max_k (may be 0)
  std::vector<std::vector<float>> probs;  // [k][vocab] processed q per token, or empty
  std::vector<float> confidence;          // [k] the drafter's top probability per step (if known)
  // [k][vocab] the raw draft logits behind `probs` (optional; the built-in model and head
  // drafters fill it when sampling and DraftContext::want_logits asks). Only the equivalence
  // checks' negative controls read it.
  std::vector<std::vector<float>> logits;
  // Which source proposed these tokens, for a drafter that combines several (SourcesFirstDrafter:
  // "prompt_lookup", "retrieval" or its wrapped drafter's name); empty: the drafter itself.
  // Logged per step.
  std::string source;
};

// What a drafter sees when proposing.
struct DraftContext {
  SeqId seq = -1;                      // the target's KV sequence
  const TokenList* tokens = nullptr;   // prompt + every emitted token; back() is the pending token
                                       // (emitted, not yet fed to the target)
  int64_t n_prompt = 0;
  const SamplingOptions* sampling = nullptr;  // the run's sampling options (q uses the same)
  Rng* rng = nullptr;                  // the drafter's own stream (never the verifier's)
  double min_confidence = 0.0;         // stop drafting once the top draft prob drops below this
  int confidence_from_token = 1;       // ... at this draft position (1-based) or later; earlier ones always go
  // Whether the threshold stops the draft token that would follow `drafted` tokens.
  bool confidence_applies(size_t drafted) const {
    return min_confidence > 0.0 && static_cast<int64_t>(drafted) + 1 >= confidence_from_token;
  }
  // The caller reads DraftBlock::logits (an equivalence check's control that recomputes q from
  // them; AcceptanceRule::needs_draft_logits). Otherwise a drafter need not copy [vocab] logits
  // per draft token.
  bool want_logits = false;
};

// Shared resources a drafter may use; handed over by the registry at construction. A plugin
// drafter cannot call into these C++ objects: it gets the host services table built over them
// (framework/draft/host_api.h, host_services.h) instead.
struct DrafterEnv {
  const Model* target = nullptr;   // the target model (layer_skip runs a subset of its layers)
  KvCacheManager* kv = nullptr;    // the shared KV manager (one budget for target and drafts)
  int32_t target_pool = -1;        // the target's pool in `kv`
  int64_t vocab_size = 0;          // the target's vocabulary size
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string name() const = 0;
  virtual void begin(SeqId seq, const TokenList& prompt) = 0;
  virtual DraftBlock propose(const DraftContext& ctx, int max_k) = 0;
  virtual void accept(SeqId seq, int n_accepted) = 0;
  virtual void end(SeqId seq) {}
  // Prompt reuse, optional: the equivalence checks begin thousands of sequences on one prompt.
  // With it on, a drafter may keep what begin() computed for the last prompt (a draft model's
  // prefilled KV) and start a later sequence on an equal prompt from a copy of it; that
  // sequence must then behave exactly as after a fresh begin(). Off releases whatever was kept.
  // The default keeps nothing.
  virtual void reuse_prompt_state(bool on) {}

  // Target hidden states (EAGLE-style drafters read the target's last-layer features). The
  // target layers whose residual stream (ForwardOptions::hidden_layers) this drafter reads from
  // every target forward of its sequence, the prefill and each verification pass; empty (the
  // default): none, and the engine asks the target for none.
  virtual std::vector<int64_t> target_hidden_layers() const { return {}; }
  // Called after each such forward (for the prefill: right after begin()): hidden[l] points to
  // [n, d] float32 row-major rows of layer target_hidden_layers()[l] for the positions
  // [first_pos, first_pos + n) of that call. Rows past the accepted prefix belong to rejected
  // drafts: accept() tells how many of a verification pass's rows the target kept (1 + n_accepted).
  virtual void observe_target_hidden(SeqId seq, const std::vector<const float*>& hidden, int64_t n, int64_t d,
                                     int64_t first_pos) {}
};

}  // namespace speclab
