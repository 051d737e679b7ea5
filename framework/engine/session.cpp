#include "framework/engine/session.h"

#include <algorithm>
#include <chrono>
#include <type_traits>

#include "framework/core/error.h"
#include "framework/core/token_tensor.h"
#include "framework/draft/draft_block_check.h"
#include "framework/draft/draft_length.h"
#include "framework/sampling/logits_source.h"

namespace speclab {

namespace {

// Drafts after a drafted EOS can never be emitted: the EOS, kept, ends the sequence, and rejected,
// takes them with it. They cost verification rows, and where the EOS was kept they were recorded
// as accepted tokens of a run that had ended (a self-draft of SmolLM2 recorded 8 accepted for 3
// tokens emitted, until 2026-12-06). The cut changes no output: the verifier's draws up to the
// EOS are the same, and none after it are used.
void drop_drafts_after_eos(DraftBlock& d, const TokenDecoder& decoder) {
  for (size_t i = 0; i + 1 < d.tokens.size(); ++i) {
    if (!decoder.is_eos(d.tokens[i])) continue;
    const size_t keep = i + 1;
    d.tokens.resize(keep);
    if (!d.probs.empty()) d.probs.resize(keep);
    if (!d.logits.empty()) d.logits.resize(std::min(keep, d.logits.size()));
    if (!d.confidence.empty()) d.confidence.resize(keep);
    return;
  }
}

}  // namespace

KvOptions kv_options_for(const ModelConfig& config, int64_t tokens, int32_t block_size) {
  KvOptions o;
  o.block_size = block_size;
  const int64_t blocks = (tokens + block_size - 1) / block_size + 1;
  o.budget_bytes = blocks * kv_bytes_per_block(config.num_hidden_layers, config.num_key_value_heads,
                                               config.kv_geometry().stored_head_dim(), block_size,
                                               static_cast<int64_t>(config.kv_geometry().element_bytes()));
  return o;
}

void check_prompt_fits(const TokenList& prompt, const ModelConfig& config) {
  if (prompt.empty()) throw Error(ErrorKind::kBadInput, "expected at least one prompt token, found none", "prompt");
  if (static_cast<int64_t>(prompt.size()) >= config.max_position_embeddings)
    throw Error(ErrorKind::kBadInput,
                "prompt does not fit the model context: " + std::to_string(prompt.size()) +
                    " tokens, the context holds " + std::to_string(config.max_position_embeddings) +
                    " (the prompt and at least one new token must fit)",
                "prompt");
  for (Token t : prompt)
    if (t < 0 || t >= config.vocab_size)
      throw Error(ErrorKind::kBadInput,
                  "token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                      std::to_string(config.vocab_size) + ")",
                  "prompt");
}

// The state of one open sequence. Destroying it ends the drafter's per-sequence state, then
// releases the KV sequence (members are destroyed after the destructor body).
struct Session::Sequence {
  Sequence(const Request& r, KvCacheManager& kv, PoolId pool, const TokenDecoder& decoder, int64_t context)
      : req(r),
        kv_seq(kv, pool),
        stop(decoder, req.generation, static_cast<int64_t>(req.prompt.size()), context,
             req.prompt.empty() ? Token(-1) : req.prompt.back()),
        rng(r.sampling.seed),
        draft_rng(Rng::stream(r.sampling.seed, 1)),
        draft_rng_at_propose(draft_rng),
        policy(req.method.options),
        tokens(r.prompt) {
    res.prompt = r.prompt;
  }
  ~Sequence() {
    if (!drafter_begun) return;
    try {
      req.method.drafter->end(id());
    } catch (...) {  // a destructor must not throw; end() ran on the normal path already
    }
  }
  SeqId id() const { return kv_seq.id(); }

  Request req;
  KvSequence kv_seq;
  StopCriteria stop;
  Rng rng;        // the verifier's stream (AR's)
  Rng draft_rng;  // the drafter's stream
  Rng draft_rng_at_propose;  // draft_rng as the last proposal began (VerifyInputs::draft_rng_at_propose)
  DraftLengthPolicy policy;
  TokenList tokens;  // prompt + every emitted token; back() is pending (emitted, not yet fed)
  GenerationResult res;
  bool done = false;
  bool drafter_begun = false;
  std::vector<at::Tensor> hidden;  // [layers] of [n, d]: the last target forward's hidden states for the drafter
};

Session::Session(const Model& target, const TokenDecoder& decoder, KvTarget kv, AcceptanceRule rule)
    : target_(target), decoder_(decoder), kv_(kv), rule_(std::move(rule)) {
  SPECLAB_CHECK(kv_.kv != nullptr, "a Session needs a KV manager");
}

Session::~Session() = default;

void Session::add_observer(StepObserver& observer) { observers_.push_back(&observer); }

template <typename F>
auto Session::phase(Phase p, F&& f) {
  for (StepObserver* o : observers_) o->on_phase_begin(p);
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    for (StepObserver* o : observers_) o->on_phase_end(p);
  } else {
    auto out = f();
    for (StepObserver* o : observers_) o->on_phase_end(p);
    return out;
  }
}

void Session::begin(const Request& request) {
  seq_.reset();
  request.generation.validate();
  request.sampling.validate();
  if (request.method.drafter) request.method.options.validate();
  const ModelConfig& c = target_.config();
  check_prompt_fits(request.prompt, c);
  seq_ = std::make_unique<Sequence>(request, *kv_.kv, kv_.pool, decoder_, c.max_position_embeddings);
  Sequence& s = *seq_;
  for (StepObserver* o : observers_) o->on_begin(s.req);
  phase(Phase::kPrefill, [&] {
    const int64_t n = static_cast<int64_t>(s.req.prompt.size());
    kv_.kv->reserve(s.id(), n);
    const at::Tensor logits = target_forward(s, token_tensor(s.req.prompt), 0, n, 1);
    SPECLAB_CHECK(kv_.kv->commit(s.id(), n) == KvStatus::kOk, "commit of the prompt");
    ++s.res.forward_calls;
    std::vector<float> scratch;
    emit(s, naming_logits_source(kTargetModelSource, [&] {
           return pick_token(logits.data_ptr<float>(), c.vocab_size, s.req.sampling, s.rng, scratch);
         }));
  });
  note_kv_peak(s);  // a run may end on its first token
  // ... and then no step drafts: the drafter is not started (a draft model prefilled the whole
  // prompt, and an 8,191-token prompt cost EAGLE 4.4 s, for a run of one token; until 2026-12-07).
  if (Drafter* d = s.req.method.drafter; d && !s.done) {
    phase(Phase::kDraftBegin, [&] {
      d->begin(s.id(), s.req.prompt);
      s.drafter_begun = true;
      pass_hidden(s, 0);
    });
    note_kv_peak(s);  // a draft model's own prefill
  }
}

bool Session::done() const { return !seq_ || seq_->done; }

SpecStep Session::step() {
  SPECLAB_CHECK(seq_ && !seq_->done, "step() needs an open sequence that is not done");
  Sequence& s = *seq_;
  SpecStep record;

  // 1. propose: up to max_k draft tokens continuing s.tokens (none without a drafter)
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t_propose = Clock::now();
  const DraftBlock d = phase(Phase::kPropose, [&] { return propose(s); });
  const double draft_seconds = std::chrono::duration<double>(Clock::now() - t_propose).count();
  const int k = static_cast<int>(d.tokens.size());

  // 2. reserve the k + 1 slots of the pass, so that verification never allocates
  phase(Phase::kReserve, [&] { kv_.kv->reserve(s.id(), k + 1); });
  note_kv_peak(s);  // the pass's k + 1 rows, and whatever the drafter holds for its drafts

  // 3. one target forward over [pending, drafts] at positions [n, n + k], n = the KV length
  TokenList input(1, s.tokens.back());
  input.insert(input.end(), d.tokens.begin(), d.tokens.end());
  const Clock::time_point t_verify = Clock::now();
  const at::Tensor logits = phase(Phase::kVerify, [&] { return forward(s, input); });
  const double verify_seconds = std::chrono::duration<double>(Clock::now() - t_verify).count();

  // 4. verify: how many drafts the target keeps, and the recovered or bonus token
  const Verdict v =
      phase(Phase::kAccept, [&] { return naming_logits_source(kTargetModelSource, [&] { return verify(s, d, logits, record); }); });

  // 5. commit the k + 1 written positions, roll back the rejected drafts, tell the drafter
  phase(Phase::kCommit, [&] { commit(s, k, v); });

  // 6. record and emit: the kept drafts, then the verdict's token
  record.drafted = k;
  record.accepted = v.n_accepted;
  record.bonus = v.bonus;
  if (k > 0) record.source = d.source;
  for (int i = 0; i < k; ++i) record.accepted_mask.push_back(i < v.n_accepted ? 1 : 0);
  s.policy.update(k, v.n_accepted, verify_seconds, draft_seconds);
  for (int i = 0; i < v.n_accepted && !s.done; ++i) emit(s, d.tokens[static_cast<size_t>(i)]);
  if (!s.done) emit(s, v.next_token);
  for (StepObserver* o : observers_) o->on_step(record);
  return record;
}

DraftBlock Session::propose(Sequence& s) {
  Drafter* drafter = s.req.method.drafter;
  const ModelConfig& c = target_.config();
  // k drafts write positions [n, n + k] and, all kept, emit k + 1 tokens. Both limits leave room
  // for the last of them: max_new_tokens counts emitted tokens; the context holds prompt +
  // generated tokens (StopCriteria), n + 1 of them before the step, n + k + 2 after it, so a
  // draft beyond k = context - n - 2 would be verified only for its token to be cut off.
  const int64_t n = kv_.kv->length(s.id());
  const int64_t room =
      std::min<int64_t>(s.req.generation.max_new_tokens - s.stop.n_generated(), c.max_position_embeddings - n - 1) - 1;
  const int max_k = static_cast<int>(std::max<int64_t>(0, std::min<int64_t>(s.policy.next(), room)));
  s.draft_rng_at_propose = s.draft_rng;
  if (!drafter || max_k == 0) return {};
  DraftContext ctx;
  ctx.seq = s.id();
  ctx.tokens = &s.tokens;
  ctx.n_prompt = static_cast<int64_t>(s.req.prompt.size());
  ctx.sampling = &s.req.sampling;
  ctx.rng = &s.draft_rng;
  ctx.min_confidence = s.req.method.options.confidence_threshold;
  ctx.confidence_from_token = s.req.method.options.confidence_from_token;
  ctx.want_logits = rule_.needs_draft_logits;
  DraftBlock d = naming_logits_source("drafter " + drafter->name(), [&] { return drafter->propose(ctx, max_k); });
  check_draft_block(d, max_k, c.vocab_size, drafter->name());
  if (!s.req.generation.ignore_eos) drop_drafts_after_eos(d, decoder_);
  return d;
}

at::Tensor Session::forward(Sequence& s, const TokenList& input) {
  const int64_t n = kv_.kv->length(s.id()), m = static_cast<int64_t>(input.size());
  at::Tensor logits = target_forward(s, token_tensor(input), n, m, 0);
  ++s.res.forward_calls;
  if (s.drafter_begun) pass_hidden(s, n);
  return logits;
}

// The target's forward over m tokens at positions [n, n + m); with the hidden states the drafter
// reads (Drafter::target_hidden_layers) kept in s.hidden for pass_hidden.
at::Tensor Session::target_forward(Sequence& s, const at::Tensor& tokens, int64_t n, int64_t m, int64_t logits_last_n) {
  ForwardOptions fo;
  fo.logits_last_n = logits_last_n;
  if (Drafter* d = s.req.method.drafter) {
    fo.hidden_layers = d->target_hidden_layers();
    // A layer the target does not have failed inside the model as an internal check (exit 1),
    // naming no drafter (found with a plugin on 2026-12-06).
    const int64_t layers = target_.config().num_hidden_layers;
    for (const int64_t l : fo.hidden_layers)
      if (l < 0 || l >= layers)
        throw Error(ErrorKind::kBadInput,
                    "expected hidden layers of the target in 0.." + std::to_string(layers - 1) + ", found " +
                        std::to_string(l),
                    "drafter " + d->name(), "target_hidden_layers");
  }
  s.hidden.clear();
  if (!fo.hidden_layers.empty()) fo.hidden_out = &s.hidden;
  return target_.forward(tokens, position_tensor(n, m), kv_.kv->view_at(s.id(), n, m), fo);
}

void Session::pass_hidden(Sequence& s, int64_t first_pos) {
  if (s.hidden.empty()) return;
  std::vector<const float*> rows;
  for (at::Tensor& h : s.hidden) {
    h = h.contiguous();
    rows.push_back(h.data_ptr<float>());
  }
  s.req.method.drafter->observe_target_hidden(s.id(), rows, s.hidden[0].size(0), s.hidden[0].size(1), first_pos);
  s.hidden.clear();
}

Verdict Session::verify(Sequence& s, const DraftBlock& d, const at::Tensor& logits, SpecStep& record) {
  const SamplingOptions& sampling = s.req.sampling;
  const int64_t vocab = logits.size(1);
  const bool need_p = !sampling.greedy() || rule_.needs_p_when_greedy;
  const std::vector<std::vector<float>> p =
      need_p ? target_probs(logits.data_ptr<float>(), logits.size(0), vocab, sampling)
             : std::vector<std::vector<float>>();
  VerifyInputs in;
  in.draft = &d;
  in.target_logits = logits.data_ptr<float>();
  in.vocab = vocab;
  in.p = &p;
  in.sampling = &sampling;
  in.rng = &s.rng;
  in.draft_rng_at_propose = &s.draft_rng_at_propose;
  const Verdict v = rule_.verify ? rule_.verify(in) : lossless_acceptance(in);
  for (StepObserver* o : observers_) o->on_verified(in, v, record);
  return v;
}

void Session::commit(Sequence& s, int drafted, const Verdict& v) {
  KvCacheManager& kv = *kv_.kv;
  const int64_t n = kv.length(s.id());
  SPECLAB_CHECK(kv.commit(s.id(), drafted + 1) == KvStatus::kOk, "commit of the verified positions");
  SPECLAB_CHECK(kv.truncate(s.id(), n + 1 + v.n_accepted) == KvStatus::kOk, "rollback of the rejected drafts");
  if (Drafter* d = s.req.method.drafter) d->accept(s.id(), v.n_accepted);
  note_kv_peak(s);
}

void Session::note_kv_peak(Sequence& s) {
  const KvCacheManager& kv = *kv_.kv;
  s.res.kv_peak_bytes = std::max(s.res.kv_peak_bytes, kv.bytes_used());
  s.res.kv_seq_peak_bytes = std::max(s.res.kv_seq_peak_bytes, kv.usage(s.id()).bytes_referenced);
}

void Session::emit(Sequence& s, Token t) {
  s.tokens.push_back(t);
  s.res.tokens.push_back(t);
  for (StepObserver* o : observers_) o->on_token(t);
  s.done = s.stop.push(t);
}

GenerationResult Session::end() {
  SPECLAB_CHECK(seq_ != nullptr, "end() needs an open sequence");
  Sequence& s = *seq_;
  if (s.drafter_begun) {
    s.drafter_begun = false;
    s.req.method.drafter->end(s.id());
  }
  GenerationResult r = std::move(s.res);
  r.stop_reason = s.stop.reason();
  r.text = s.stop.text();
  seq_.reset();
  for (StepObserver* o : observers_) o->on_end(r);
  return r;
}

}  // namespace speclab
