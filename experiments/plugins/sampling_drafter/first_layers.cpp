// first_layers — an out-of-tree sampling drafter plugin built on the host services table
// (framework/draft/host_api.h; docs/plugins.md walks through it).
//
// Self-speculation, as the built-in layer_skip: the draft is the target's own first `layers`
// layers, run through the host's forward on the target's own KV sequence. Each draft step is one
// forward of one token (the pending token, then each draft token) at the next position past the
// committed prefix; those positions hold only the first layers' K/V until the verification pass
// overwrites them in every layer, and the engine rolls back what it rejects.
//
// Under sampling, q is the host's transform of the draft logits (exactly what the target's p
// gets: temperature, top-k, top-p), the token is drawn from q with one host uniform() of the
// drafter's stream, and q is returned with the token: the verifier is told the distribution the
// token really came from. Under greedy decoding it drafts the host's argmax and returns no q (the
// verifier treats it as one-hot), with the argmax's probability at temperature 1 as its confidence
// when a confidence_threshold is set.
//
// Built with -DBIASED (first_layers_biased.so) it is a negative control: it draws the token from
// q' = the transform of 2 * logits (half the run's temperature) but still reports q, so the
// output is no longer distributed as the target's. `speclab check` must fail it.
//
// Options: params.layers, an integer in [1, the target's layer count]; default half of the
// layers (at least 1).
#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include "framework/draft/drafter.h"
#include "framework/draft/drafter_options.h"
#include "framework/draft/plugin_abi.h"

namespace {

using speclab::DraftBlock;
using speclab::DraftContext;
using speclab::SeqId;
using speclab::TokenList;

#ifdef BIASED
const char* const kName = "first_layers_biased";
#else
const char* const kName = "first_layers";
#endif

class FirstLayers final : public speclab::Drafter {
 public:
  FirstLayers(const SpeclabHostApi* host, int64_t n_layers) : host_(host), vocab_(host->model.vocab_size) {
    for (int64_t l = 0; l < n_layers; ++l) layers_.push_back(l);
  }

  std::string name() const override { return kName; }
  void begin(SeqId, const TokenList&) override {}
  void accept(SeqId, int) override {}  // the engine truncates the shared sequence

  DraftBlock propose(const DraftContext& ctx, int max_k) override {
    DraftBlock block;
    if (max_k <= 0 || ctx.tokens == nullptr || ctx.tokens->empty()) return block;
    // The pending token sits at the committed length: it is emitted but not yet fed.
    const int64_t pos = static_cast<int64_t>(ctx.tokens->size()) - 1;
    check(host_->kv_reserve(host_->host, ctx.seq, max_k, error_, sizeof error_));
    const bool greedy = host_->is_greedy(speclab_sampling(ctx)) != 0;
    std::vector<float> logits(static_cast<size_t>(vocab_)), q(logits.size());
    int32_t feed = ctx.tokens->back();
    for (int i = 0; i < max_k; ++i) {
      forward(ctx.seq, feed, pos + i, logits.data());
      int32_t x = 0;
      if (greedy) {
        check(host_->argmax(logits.data(), vocab_, &x, error_, sizeof error_));
        // A confidence_threshold needs one confidence per draft token on this path too (the host
        // refuses a block without them): the argmax's probability at temperature 1, as the
        // built-in model drafters report it.
        if (ctx.min_confidence > 0.0) {
          speclab::SamplingOptions plain;
          plain.temperature = 1.0;
          check(host_->probs(reinterpret_cast<const SpeclabSampling*>(&plain), logits.data(), vocab_, q.data(), error_,
                             sizeof error_));
          const float confidence = q[static_cast<size_t>(x)];
          if (ctx.confidence_applies(block.tokens.size()) && confidence < ctx.min_confidence) break;
          block.confidence.push_back(confidence);
        }
      } else {
        check(host_->probs(speclab_sampling(ctx), logits.data(), vocab_, q.data(), error_, sizeof error_));
        x = draw(sampled_from(ctx, logits, q), speclab_rng(ctx));
        const float confidence = *std::max_element(q.begin(), q.end());
        if (ctx.confidence_applies(block.tokens.size()) && confidence < ctx.min_confidence) break;
        block.probs.push_back(q);
        block.confidence.push_back(confidence);
      }
      block.tokens.push_back(x);
      feed = x;
    }
    return block;
  }

 private:
  void check(int status) const {
    if (status != SPECLAB_OK) throw std::runtime_error(std::string(kName) + ": " + error_);
  }

  // logits[vocab] of one token at `position` of `seq`, through the first layers only.
  void forward(SeqId seq, int32_t token, int64_t position, float* logits) {
    SpeclabForward f{};
    f.seq = seq;
    f.tokens = &token;
    f.n = 1;
    f.start = position;
    f.layers = layers_.data();
    f.n_layers = static_cast<int64_t>(layers_.size());
    f.n_logits = 1;
    f.logits = logits;
    check(host_->forward(host_->host, &f, error_, sizeof error_));
  }

  // The distribution the token is drawn from: q itself, unless this is the biased control.
  const std::vector<float>& sampled_from(const DraftContext& ctx, std::vector<float>& logits,
                                         const std::vector<float>& q) {
#ifdef BIASED
    for (float& l : logits) l *= 2.0f;
    biased_.resize(q.size());
    check(host_->probs(speclab_sampling(ctx), logits.data(), vocab_, biased_.data(), error_, sizeof error_));
    return biased_;
#else
    return q;
#endif
  }

  // Inverse-CDF draw with one uniform() of the drafter's stream: the first token whose cumulative
  // probability exceeds u * sum(p).
  int32_t draw(const std::vector<float>& p, SpeclabRng* rng) const {
    double total = 0.0;
    for (float v : p) total += v;
    const double u = host_->uniform(rng) * total;
    double cum = 0.0;
    int32_t last = 0;
    for (size_t j = 0; j < p.size(); ++j) {
      if (p[j] <= 0.0f) continue;
      cum += p[j];
      last = static_cast<int32_t>(j);
      if (u < cum) return last;
    }
    return last;  // only when rounding leaves u at the very end
  }

  const SpeclabHostApi* host_;
  int64_t vocab_;
  std::vector<int64_t> layers_;  // 0 .. layers-1
  std::vector<float> biased_;    // [vocab] the BIASED build's sampling distribution
  char error_[512] = {};
};

void write_error(char* error, size_t error_len, const std::string& message) {
  if (error != nullptr && error_len > 0) std::snprintf(error, error_len, "%s", message.c_str());
}

speclab::Drafter* create(const speclab::DrafterOptions* options, const SpeclabHostApi* host, char* error,
                         size_t error_len) {
  try {
    // Version 1 of the table is enough: every function this plugin calls sits before final_norm.
    if (host->size < offsetof(SpeclabHostApi, final_norm) || host->model.n_layers <= 0 || host->model.vocab_size <= 0) {
      write_error(error, error_len, "needs a host with the target model (host services table version 1 or later)");
      return nullptr;
    }
    const int64_t n = host->model.n_layers;
    int64_t layers = std::max<int64_t>(1, n / 2);
    for (const auto& [key, value] : options->params) {
      size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(value, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (key != "layers") {
        write_error(error, error_len, "params." + key + ": unknown parameter, expected only 'layers'");
        return nullptr;
      }
      if (used == 0 || used != value.size() || v < 1 || v > n) {
        write_error(error, error_len, "params.layers: expected an integer in [1, " + std::to_string(n) +
                                          "] (the target's layers), found '" + value + "'");
        return nullptr;
      }
      layers = v;
    }
    return new FirstLayers(host, layers);
  } catch (const std::exception& e) {
    write_error(error, error_len, e.what());
    return nullptr;
  }
}

void destroy(speclab::Drafter* drafter) { delete drafter; }

const SpeclabDrafterPlugin kPlugin = {
    SPECLAB_DRAFTER_ABI_VERSION,
    kName,
#ifdef BIASED
    "NEGATIVE CONTROL: draws from q at half the temperature but reports q; params: layers",
#else
    "samples from the target's first layers (self-speculation through the host services); params: layers",
#endif
    &create,
    &destroy,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const SpeclabDrafterPlugin* speclab_drafter_plugin(void) {
  return &kPlugin;
}
