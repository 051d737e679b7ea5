#include "framework/engine/ar_decode.h"

#include <chrono>
#include <memory>

#include "framework/core/error.h"
#include "framework/kv/contiguous_kv.h"
#include "framework/kv/kv_cache_manager.h"

namespace speclab {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
at::Tensor as_tensor(const TokenList& ids) {
  std::vector<int64_t> v(ids.begin(), ids.end());
  return at::tensor(v, at::kLong);
}
}  // namespace

KvOptions kv_options_for(const ModelConfig& config, int64_t tokens, int32_t block_size) {
  KvOptions o;
  o.block_size = block_size;
  const int64_t blocks = (tokens + block_size - 1) / block_size + 1;
  o.budget_bytes = blocks * kv_bytes_per_block(config.num_hidden_layers, config.num_key_value_heads,
                                               config.head_dim, block_size, 4);
  return o;
}

void check_prompt_fits(const TokenList& prompt, const ModelConfig& config) {
  if (prompt.empty()) throw Error(ErrorKind::kBadInput, "expected at least one prompt token, found none", "prompt");
  if (static_cast<int64_t>(prompt.size()) >= config.max_position_embeddings)
    throw Error(ErrorKind::kBadInput,
                "prompt is longer than the model context: " + std::to_string(prompt.size()) +
                    " tokens, the context holds " + std::to_string(config.max_position_embeddings) +
                    " (and at least one new token must fit)",
                "prompt");
  for (Token t : prompt)
    if (t < 0 || t >= config.vocab_size)
      throw Error(ErrorKind::kBadInput,
                  "token id " + std::to_string(t) + " is outside the vocabulary [0, " +
                      std::to_string(config.vocab_size) + ")",
                  "prompt");
}

Token pick_token(const float* logits, int64_t vocab, const SamplingOptions& sampling, Rng& rng,
                 std::vector<float>& scratch) {
  if (sampling.greedy()) return argmax(logits, vocab);
  logits_to_probs(logits, vocab, sampling, scratch);
  return sample(scratch, rng);
}

GenerationResult generate_ar(const Model& model, const Tokenizer& tokenizer, const TokenList& prompt,
                             const GenerationOptions& gen, const SamplingOptions& sampling, KvMode mode,
                             const TokenCallback& on_token, KvTarget kv_target) {
  gen.validate();
  sampling.validate();
  const ModelConfig& c = model.config();
  check_prompt_fits(prompt, c);
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  const int64_t capacity = std::min<int64_t>(c.max_position_embeddings, n_prompt + gen.max_new_tokens);

  GenerationResult res;
  res.prompt = prompt;
  StopCriteria stop(tokenizer, gen, n_prompt, c.max_position_embeddings);
  Rng rng(sampling.seed);
  std::vector<float> scratch;
  TokenList seq = prompt;

  auto emit = [&](const at::Tensor& logits_row) {  // logits_row: [vocab]
    at::Tensor row = logits_row.contiguous();
    Token t = pick_token(row.data_ptr<float>(), c.vocab_size, sampling, rng, scratch);
    seq.push_back(t);
    res.tokens.push_back(t);
    if (on_token) on_token(t);
    return stop.push(t);
  };

  auto t0 = Clock::now();
  if (mode == KvMode::kCached) {
    std::unique_ptr<KvCacheManager> own;
    if (!kv_target.kv) {
      own = std::make_unique<KvCacheManager>(kv_options_for(c, capacity));
      kv_target = {own.get(), own->add_pool(c)};
    }
    KvCacheManager& kv = *kv_target.kv;
    KvSequence seq_kv(kv, kv_target.pool);
    const SeqId sid = seq_kv.id();
    kv.reserve(sid, n_prompt);
    at::Tensor logits = model.forward(as_tensor(prompt), at::arange(n_prompt, at::kLong), kv.view(sid, n_prompt),
                                      ForwardOptions{{}, 1});
    SPECLAB_CHECK(kv.commit(sid, n_prompt) == KvStatus::kOk, "commit of the prompt");
    ++res.forward_calls;
    bool done = emit(logits[0]);
    res.prefill_seconds = seconds_since(t0);
    auto t1 = Clock::now();
    while (!done) {
      const int64_t pos = kv.length(sid);
      kv.reserve(sid, 1);
      at::Tensor tok = at::full({1}, static_cast<int64_t>(seq.back()), at::kLong);
      logits = model.forward(tok, at::full({1}, pos, at::kLong), kv.view(sid, 1));
      SPECLAB_CHECK(kv.commit(sid, 1) == KvStatus::kOk, "commit of a decoded token");
      res.kv_peak_bytes = std::max(res.kv_peak_bytes, kv.bytes_used());
      res.kv_seq_peak_bytes = std::max(res.kv_seq_peak_bytes, kv.usage(sid).bytes_referenced);
      ++res.forward_calls;
      done = emit(logits[0]);
    }
    res.decode_seconds = seconds_since(t1);
  } else {
    bool done = false;
    bool first = true;
    auto t1 = t0;
    while (!done) {
      const int64_t n = static_cast<int64_t>(seq.size());
      ContiguousKv scratch_kv(c, n);  // recomputed from scratch every step
      at::Tensor logits = model.forward(as_tensor(seq), at::arange(n, at::kLong), scratch_kv.append_view(n),
                                        ForwardOptions{{}, 1});
      ++res.forward_calls;
      done = emit(logits[0]);
      if (first) {
        res.prefill_seconds = seconds_since(t0);
        t1 = Clock::now();
        first = false;
      }
    }
    res.decode_seconds = seconds_since(t1);
  }
  res.stop_reason = stop.reason();
  res.text = stop.text();
  return res;
}

}  // namespace speclab
