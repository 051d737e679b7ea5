#include "framework/engine/batch_decode.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <memory>

#include "framework/core/error.h"
#include "framework/core/token_tensor.h"
#include "framework/engine/session.h"
#include "framework/kv/kv_cache_manager.h"
#include "framework/sampling/logits_source.h"
#include "framework/sampling/sampling.h"

namespace speclab {

void BatchDecodeOptions::validate() const {
  if (width < 1)
    throw Error(ErrorKind::kConfig, "expected a width of at least 1, found " + std::to_string(width), "batch",
                "width");
}

namespace {

// One prompt in flight: its KV sequence, stop rule and tokens so far; with hidden layers, the
// rows gathered so far.
struct Lane {
  size_t index = 0;
  std::unique_ptr<KvSequence> seq;
  std::unique_ptr<StopCriteria> stop;
  BatchAnswer answer;
  std::vector<std::vector<at::Tensor>> hidden;  // [layers] of row blocks
  std::vector<int64_t> top1;
  bool stopped = false;  // the last token is out; its own row is still to run (hidden layers only)
};

}  // namespace

void generate_ar_batch(const Model& model, const TokenDecoder& decoder, const std::vector<TokenList>& prompts,
                       const GenerationOptions& gen, const BatchDecodeOptions& options,
                       const std::function<void(size_t index, const BatchAnswer& answer)>& on_done) {
  gen.validate();
  options.validate();
  const ModelConfig& c = model.config();
  for (const TokenList& p : prompts) check_prompt_fits(p, c);
  if (prompts.empty()) return;
  int64_t width = std::min<int64_t>(options.width, static_cast<int64_t>(prompts.size()));
  if (model.row_exact_batch() > 0) width = std::min(width, model.row_exact_batch());
  const bool keep = !options.hidden_layers.empty();
  const size_t L = options.hidden_layers.size();
  size_t longest = 0;
  for (const TokenList& p : prompts) longest = std::max(longest, p.size());
  // max_new_tokens is clamped first: a sum near INT64_MAX overflowed.
  const int64_t per_seq = std::min<int64_t>(
      c.max_position_embeddings,
      static_cast<int64_t>(longest) + std::min<int64_t>(gen.max_new_tokens, c.max_position_embeddings));
  KvOptions kv_options = kv_options_for(c, per_seq);
  kv_options.budget_bytes *= width;  // each lane's blocks (kv_options_for keeps one spare block per sequence)
  KvCacheManager kv(kv_options);
  const PoolId pool = kv.add_pool(c.kv_geometry());
  const SamplingOptions greedy;
  Rng unused(0);  // greedy picks draw nothing
  std::vector<float> scratch;
  auto argmax = [&](const at::Tensor& logits, int64_t row) {
    return naming_logits_source(kTargetModelSource, [&] {
      return pick_token(logits.data_ptr<float>() + row * logits.size(1), c.vocab_size, greedy, unused, scratch);
    });
  };
  ForwardOptions fo;
  std::vector<at::Tensor> hidden_out;
  if (keep) {
    fo.hidden_layers = options.hidden_layers;
    fo.hidden_out = &hidden_out;
  }

  // Starts prompt i in a lane: prefill, first token.
  auto start = [&](Lane& lane, size_t i) {
    lane.index = i;
    lane.seq = std::make_unique<KvSequence>(kv, pool);
    const TokenList& p = prompts[i];
    const int64_t n = static_cast<int64_t>(p.size());
    lane.stop = std::make_unique<StopCriteria>(decoder, gen, n, c.max_position_embeddings);
    kv.reserve(lane.seq->id(), n);
    ForwardOptions pre = fo;
    pre.logits_last_n = keep ? 0 : 1;  // every row's top-1 when the rows are kept
    const at::Tensor logits = model.forward(token_tensor(p), position_tensor(0, n), kv.view(lane.seq->id(), n), pre);
    SPECLAB_CHECK(kv.commit(lane.seq->id(), n) == KvStatus::kOk, "commit of the prompt");
    if (keep) {
      lane.hidden.assign(L, {});
      for (size_t l = 0; l < L; ++l) lane.hidden[l].push_back(hidden_out[l]);
      for (int64_t r = 0; r < n; ++r) lane.top1.push_back(argmax(logits, r));
    }
    const Token t = argmax(logits, logits.size(0) - 1);
    lane.answer.tokens.push_back(t);
    lane.stopped = lane.stop->push(t);
  };
  auto finish = [&](Lane& lane) {
    if (keep) {
      for (size_t l = 0; l < L; ++l) lane.answer.hidden.push_back(at::cat(lane.hidden[l], 0));
      lane.answer.top1 = at::tensor(lane.top1, at::kLong);
    }
    if (on_done) on_done(lane.index, lane.answer);
    lane.seq.reset();  // releases its blocks before the next prompt takes them
  };

  std::vector<Lane> lanes;
  size_t next = 0;
  // Fills free lanes with prompts until `width` are in flight (or none are left).
  auto refill = [&]() {
    while (static_cast<int64_t>(lanes.size()) < width && next < prompts.size()) {
      Lane lane;
      start(lane, next++);
      if (lane.stopped && !keep)
        finish(lane);
      else
        lanes.push_back(std::move(lane));
    }
  };
  refill();
  while (!lanes.empty()) {
    const int64_t B = static_cast<int64_t>(lanes.size());
    at::Tensor tokens = at::empty({B}, at::kLong), positions = at::empty({B}, at::kLong);
    std::vector<KvView> views;
    for (int64_t b = 0; b < B; ++b) {
      Lane& lane = lanes[static_cast<size_t>(b)];
      const SeqId id = lane.seq->id();
      kv.reserve(id, 1);
      tokens.data_ptr<int64_t>()[b] = lane.answer.tokens.back();
      positions.data_ptr<int64_t>()[b] = kv.length(id);
      views.push_back(kv.view(id, 1));
    }
    const at::Tensor logits = model.forward_decode_batch(tokens, positions, views, fo);  // [B, vocab]
    std::vector<Lane> running;
    for (int64_t b = 0; b < B; ++b) {
      Lane& lane = lanes[static_cast<size_t>(b)];
      SPECLAB_CHECK(kv.commit(lane.seq->id(), 1) == KvStatus::kOk, "commit of a decoded token");
      const Token t = argmax(logits, b);
      if (keep) {
        for (size_t l = 0; l < L; ++l) lane.hidden[l].push_back(hidden_out[l].narrow(0, b, 1));
        lane.top1.push_back(t);
      }
      if (!lane.stopped) {
        lane.answer.tokens.push_back(t);
        lane.stopped = lane.stop->push(t);
        if (!lane.stopped || keep) {  // with kept rows, a stopped lane runs its last token's row
          running.push_back(std::move(lane));
          continue;
        }
      }
      finish(lane);
    }
    lanes = std::move(running);
    refill();
  }
}

}  // namespace speclab
