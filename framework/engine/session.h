// Session — the one decoding loop under every command (generate, run, check, bench and the
// equivalence checks): one target, its KV pool, and per sequence an optional drafter.
//
//   Session s(target, decoder, {&kv, pool});
//   s.add_observer(timer);                          // optional: timing, p/q logging, tests
//   s.begin({prompt, {&drafter, options}, gen, sampling});   // prefill, first token, drafter begin
//   while (!s.done()) s.step();                     // one step: propose -> reserve -> forward ->
//                                                   // verify -> commit/roll back -> accept
//   GenerationResult r = s.end();                   // releases the KV sequence and drafter state
//
// AR decoding is the same loop without a drafter: every step verifies an empty draft, which
// reduces to AR's token choice and consumes the verifier stream exactly as AR does (one uniform()
// per token under sampling, none under greedy decoding).
//
// RNG streams: the verifier draws from Rng(sampling.seed); the drafter from the second stream of
// the same seed (Rng::stream(seed, 1): jump()-separated, never overlapping the verifier's).
//
// Observers (StepObserver) see the loop and annotate its records; they never steer it. Per-sequence
// state ends through RAII: if anything throws, the KV sequence is released and the drafter's
// end(seq) runs when the Session or the next begin() drops the sequence.
#pragma once

#include <memory>
#include <vector>

#include "framework/core/model.h"
#include "framework/core/token_decoder.h"
#include "framework/draft/drafter.h"
#include "framework/draft/drafter_options.h"
#include "framework/engine/generation.h"
#include "framework/engine/step_record.h"
#include "framework/engine/verifier.h"
#include "framework/kv/kv_cache_manager.h"

namespace speclab {

// Where the target's KV lives: a pool of a (possibly shared) manager.
struct KvTarget {
  KvCacheManager* kv = nullptr;
  PoolId pool = 0;
};

// How a sequence is decoded: by the target alone (drafter == nullptr), or speculatively.
struct Method {
  Drafter* drafter = nullptr;  // built for the session's KV manager (DrafterEnv)
  DrafterOptions options;      // gamma, schedule, confidence threshold (unused without a drafter)
};

struct Request {
  TokenList prompt;  // [n_prompt] ids, BOS included when the model wants one
  Method method;
  GenerationOptions generation;
  SamplingOptions sampling;
};

// The named parts of the loop, as observers see them.
enum class Phase { kPrefill, kDraftBegin, kPropose, kReserve, kVerify, kAccept, kCommit };

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void on_begin(const Request&) {}
  virtual void on_phase_begin(Phase) {}
  virtual void on_phase_end(Phase) {}
  // After the rule decided a step: its inputs and verdict. May annotate `record`.
  virtual void on_verified(const VerifyInputs&, const Verdict&, SpecStep& record) {}
  // Every emitted token, in order (the first one comes from the prefill).
  virtual void on_token(Token) {}
  // The step's record before step() returns it. May annotate it.
  virtual void on_step(SpecStep& record) {}
  // The sequence's result before end() returns it. May annotate it.
  virtual void on_end(GenerationResult& result) {}
};

class Session {
 public:
  // target and decoder outlive the session; kv.kv must not be null. rule: the acceptance rule
  // (lossless by default).
  Session(const Model& target, const TokenDecoder& decoder, KvTarget kv, AcceptanceRule rule = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Observers are called in the order added; they must outlive the session's sequences.
  void add_observer(StepObserver& observer);

  // Starts a sequence (dropping one still open): validates the options, prefills the prompt,
  // emits the first token and begins the drafter. Throws Error(kBadInput, ..., "prompt") when the
  // prompt is empty, out of vocabulary or does not fit the context.
  void begin(const Request& request);
  bool done() const;
  // One step of the open sequence (requires !done()); returns its record.
  SpecStep step();
  // The sequence's result; releases its KV and the drafter's per-sequence state.
  GenerationResult end();

  const Model& target() const { return target_; }
  KvTarget kv() const { return kv_; }

 private:
  struct Sequence;
  template <typename F>
  auto phase(Phase p, F&& f);
  DraftBlock propose(Sequence& s);
  at::Tensor forward(Sequence& s, const TokenList& input);
  // tokens: [m] int64 at positions [n, n + m); returns [n_out, vocab] float32 (n_out = m, or logits_last_n).
  at::Tensor target_forward(Sequence& s, const at::Tensor& tokens /*[m]*/, int64_t n, int64_t m, int64_t logits_last_n);
  void pass_hidden(Sequence& s, int64_t first_pos);
  Verdict verify(Sequence& s, const DraftBlock& d, const at::Tensor& logits /*[drafted + 1, vocab] float32*/,
                 SpecStep& record);
  void commit(Sequence& s, int drafted, const Verdict& v);
  void emit(Sequence& s, Token t);
  // The KV manager's bytes in use (all pools) and the target sequence's, into the result's peaks.
  void note_kv_peak(Sequence& s);

  const Model& target_;
  const TokenDecoder& decoder_;
  KvTarget kv_;
  AcceptanceRule rule_;
  std::vector<StepObserver*> observers_;
  std::unique_ptr<Sequence> seq_;
};

// A private KV manager big enough for one sequence of `tokens` tokens of `config`'s model.
KvOptions kv_options_for(const ModelConfig& config, int64_t tokens, int32_t block_size = 16);

// Checks prompt length and ids against the context; Error(kBadInput, ..., "prompt").
void check_prompt_fits(const TokenList& prompt, const ModelConfig& config);

}  // namespace speclab
