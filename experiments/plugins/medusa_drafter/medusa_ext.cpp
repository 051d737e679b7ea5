// medusa_ext — the Medusa drafter (Cai et al. 2024, Medusa-1) as an out-of-tree plugin: the heads
// `speclab train-draft` writes (architecture: medusa; docs/train-draft.md), run on the target's
// hidden states through the host services table (framework/draft/host_api.h, version 2).
//
// It computes what the built-in `medusa` drafter (framework/draft/builtin/medusa_drafter.h) does,
// with its own loops for the heads and the host's final_norm() and lm_head() for the target's
// frozen parts:
//   - target_hidden_layers() asks the engine for the target's last layer; observe_target_hidden()
//     keeps the rows of the latest target forward (the prefill, then each verification pass);
//   - propose(): with T context tokens, the feature f = final_norm(h at position T - 2) is the one
//     whose LM head gave the pending token; head k = 1..min(K, max_k) drafts the k-th token after
//     it from h_k = f + SiLU(W_k f + b_k), logits = lm_head(h_k), restricted to the head's rows
//     (vocab_ids: the reduced FR-Spec head the heads were trained with);
//   - greedy: the argmax over those rows (ties: the lowest id); sampling: q = the host's probs() of
//     the logits over the full vocabulary (tokens outside the head at -inf), one uniform() draw,
//     and q is reported; ctx.min_confidence stops drafting at the first head below it.
//
// Options: params.file, the heads' .safetensors. The file must say speclab.draft=medusa and fit
// the target's hidden size and vocabulary. (The built-in drafter also checks that the heads were
// trained for this very target, by a hash of its weights; no host service gives a plugin that
// hash, so this plugin checks the shapes only.)
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
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

const char* const kName = "medusa_ext";

// IEEE half -> float.
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    f = man ? NAN : INFINITY;
  } else {
    f = std::ldexp(static_cast<float>(man | 0x400u), static_cast<int>(exp) - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits |= sign;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The trained heads, read from the safetensors file train-draft writes.
struct Heads {
  int64_t d = 0;
  std::vector<std::vector<float>> weight;  // K of [d, d] row-major
  std::vector<std::vector<float>> bias;    // K of [d]
  std::vector<int64_t> vocab_ids;          // [V'] target token id of each head row
};

Heads read_heads(const std::string& path, int64_t hidden, int64_t vocab) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open the medusa heads file");
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  if (!in || n == 0 || n > (64u << 20)) throw std::runtime_error(path + ": not a safetensors file");
  std::string header(static_cast<size_t>(n), '\0');
  in.read(&header[0], static_cast<std::streamsize>(n));
  if (!in) throw std::runtime_error(path + ": the safetensors header is cut short");
  const nlohmann::json j = nlohmann::json::parse(header, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw std::runtime_error(path + ": the safetensors header is not JSON");
  const std::string draft = j.value("__metadata__", nlohmann::json::object()).value("speclab.draft", "");
  if (draft != "medusa")
    throw std::runtime_error(path + ": not a medusa draft (speclab.draft is '" + draft + "')");
  const uint64_t data_start = 8 + n;
  auto read = [&](const std::string& name, std::vector<int64_t> shape) {
    if (!j.contains(name)) throw std::runtime_error(path + ": no tensor " + name);
    const nlohmann::json& t = j.at(name);
    if (t.at("shape").get<std::vector<int64_t>>() != shape)
      throw std::runtime_error(path + ": tensor " + name + " does not fit the target's shapes");
    const std::string dtype = t.at("dtype").get<std::string>();
    const auto off = t.at("data_offsets").get<std::vector<uint64_t>>();
    size_t count = 1;
    for (int64_t s : shape) count *= static_cast<size_t>(s);
    const size_t width = dtype == "F32" ? 4 : dtype == "F16" ? 2 : 0;
    if (width == 0 || off.size() != 2 || off[1] - off[0] != count * width)
      throw std::runtime_error(path + ": tensor " + name + ": expected F32 or F16 data of its shape");
    std::vector<char> raw(count * width);
    in.seekg(static_cast<std::streamoff>(data_start + off[0]));
    in.read(raw.data(), static_cast<std::streamsize>(raw.size()));
    if (!in) throw std::runtime_error(path + ": tensor " + name + " is cut short");
    std::vector<float> out(count);
    for (size_t i = 0; i < count; ++i) {
      if (width == 4) {
        std::memcpy(&out[i], &raw[4 * i], 4);
      } else {
        uint16_t h;
        std::memcpy(&h, &raw[2 * i], 2);
        out[i] = half_to_float(h);
      }
    }
    return out;
  };
  Heads h;
  h.d = hidden;
  for (int k = 0; j.contains("heads." + std::to_string(k) + ".weight"); ++k) {
    h.weight.push_back(read("heads." + std::to_string(k) + ".weight", {hidden, hidden}));
    h.bias.push_back(read("heads." + std::to_string(k) + ".bias", {hidden}));
  }
  if (h.weight.empty()) throw std::runtime_error(path + ": no medusa head (heads.0.weight)");
  if (!j.contains("vocab_ids")) throw std::runtime_error(path + ": no tensor vocab_ids");
  const int64_t v = j.at("vocab_ids").at("shape").at(0).get<int64_t>();
  for (float id : read("vocab_ids", {v})) {
    if (!(id >= 0 && id < static_cast<float>(vocab))) throw std::runtime_error(path + ": vocab_ids must be target token ids");
    h.vocab_ids.push_back(static_cast<int64_t>(id));
  }
  return h;
}

class MedusaExt final : public speclab::Drafter {
 public:
  MedusaExt(const SpeclabHostApi* host, Heads heads)
      : host_(host), heads_(std::move(heads)), vocab_(host->model.vocab_size) {}

  std::string name() const override { return kName; }
  void begin(SeqId, const TokenList&) override { reset(); }
  void accept(SeqId, int) override {}
  void end(SeqId) override { reset(); }
  std::vector<int64_t> target_hidden_layers() const override { return {host_->model.n_layers - 1}; }

  void observe_target_hidden(SeqId, const std::vector<const float*>& hidden, int64_t n, int64_t d,
                             int64_t first_pos) override {
    if (hidden.size() != 1 || d != heads_.d) throw std::runtime_error("medusa_ext: unexpected target hidden states");
    rows_.assign(hidden[0], hidden[0] + n * d);
    first_pos_ = first_pos;
    n_rows_ = n;
  }

  DraftBlock propose(const DraftContext& ctx, int max_k) override {
    DraftBlock b;
    const int64_t k = std::min<int64_t>(max_k, static_cast<int64_t>(heads_.weight.size()));
    if (k < 1 || ctx.tokens == nullptr || ctx.tokens->size() < 2) return b;
    const int64_t at = static_cast<int64_t>(ctx.tokens->size()) - 2;  // the feature that gave the pending token
    if (first_pos_ < 0 || at < first_pos_ || at >= first_pos_ + n_rows_)
      throw std::runtime_error("medusa_ext: the target's feature at position " + std::to_string(at) +
                               " was not observed");
    const int64_t d = heads_.d;
    std::vector<float> f(static_cast<size_t>(d)), h(static_cast<size_t>(k * d));
    check(host_->final_norm(host_->host, &rows_[static_cast<size_t>((at - first_pos_) * d)], 1, f.data(), error_,
                            sizeof error_));
    for (int64_t j = 0; j < k; ++j) {  // h_j = f + SiLU(W_j f + b_j)
      const float* w = heads_.weight[static_cast<size_t>(j)].data();
      const float* bias = heads_.bias[static_cast<size_t>(j)].data();
      for (int64_t e = 0; e < d; ++e) {
        float z = bias[e];
        for (int64_t i = 0; i < d; ++i) z += w[e * d + i] * f[static_cast<size_t>(i)];
        h[static_cast<size_t>(j * d + e)] = f[static_cast<size_t>(e)] + z / (1.0f + std::exp(-z));
      }
    }
    logits_.resize(static_cast<size_t>(k * vocab_));
    check(host_->lm_head(host_->host, h.data(), k, logits_.data(), error_, sizeof error_));
    for (int64_t j = 0; j < k; ++j)
      if (!append(&logits_[static_cast<size_t>(j * vocab_)], ctx, b)) break;
    return b;
  }

 private:
  void reset() {
    first_pos_ = -1;
    n_rows_ = 0;
  }

  void check(int status) const {
    if (status != SPECLAB_OK) throw std::runtime_error(std::string(kName) + ": " + error_);
  }

  // One head's token from its logits over the full vocabulary (only the head's rows count);
  // false when ctx.min_confidence stops drafting here.
  bool append(const float* full, const DraftContext& ctx, DraftBlock& b) {
    const std::vector<int64_t>& ids = heads_.vocab_ids;
    int32_t x = 0;
    float conf = 1.0f;
    if (host_->is_greedy(speclab_sampling(ctx))) {
      size_t best = 0;
      for (size_t r = 1; r < ids.size(); ++r)
        if (full[ids[r]] > full[ids[best]] || (full[ids[r]] == full[ids[best]] && ids[r] < ids[best])) best = r;
      x = static_cast<int32_t>(ids[best]);
      if (ctx.min_confidence > 0.0) {
        double z = 0.0;
        for (int64_t id : ids) z += std::exp(static_cast<double>(full[id] - full[ids[best]]));
        conf = static_cast<float>(1.0 / z);
        if (conf < ctx.min_confidence && ctx.confidence_applies(b.tokens.size())) return false;
      }
    } else {
      std::vector<float> head_logits(static_cast<size_t>(vocab_), -INFINITY), q(static_cast<size_t>(vocab_));
      for (int64_t id : ids) head_logits[static_cast<size_t>(id)] = full[id];
      check(host_->probs(speclab_sampling(ctx), head_logits.data(), vocab_, q.data(), error_, sizeof error_));
      x = draw(q, speclab_rng(ctx));
      conf = *std::max_element(q.begin(), q.end());
      if (ctx.confidence_applies(b.tokens.size()) && conf < ctx.min_confidence) return false;
      b.probs.push_back(std::move(q));
      b.logits.push_back(std::move(head_logits));
    }
    b.tokens.push_back(x);
    b.confidence.push_back(conf);
    return true;
  }

  // Inverse-CDF draw with one uniform() of the drafter's stream: the first token whose cumulative
  // probability exceeds u * sum(p) (as the host's own sampler draws).
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
    return last;
  }

  const SpeclabHostApi* host_;
  Heads heads_;
  int64_t vocab_;
  std::vector<float> rows_;  // [n_rows_, d] the latest target forward's last-layer rows
  int64_t first_pos_ = -1, n_rows_ = 0;
  std::vector<float> logits_;  // [k, vocab]
  char error_[512] = {};
};

void write_error(char* error, size_t error_len, const std::string& message) {
  if (error != nullptr && error_len > 0) std::snprintf(error, error_len, "%s", message.c_str());
}

speclab::Drafter* create(const speclab::DrafterOptions* options, const SpeclabHostApi* host, char* error,
                         size_t error_len) {
  try {
    if (host->version < 2 || host->size < sizeof(SpeclabHostApi) || host->model.n_layers <= 0) {
      write_error(error, error_len, "needs a host with the target model and its output head (host services table "
                                    "version 2 or later)");
      return nullptr;
    }
    std::string file;
    for (const auto& [key, value] : options->params) {
      if (key != "file") {
        write_error(error, error_len, "params." + key + ": unknown parameter, expected only 'file'");
        return nullptr;
      }
      file = value;
    }
    if (file.empty()) {
      write_error(error, error_len, "params.file: expected the medusa heads (.safetensors) that speclab train-draft wrote");
      return nullptr;
    }
    return new MedusaExt(host, read_heads(file, host->model.hidden_size, host->model.vocab_size));
  } catch (const std::exception& e) {
    write_error(error, error_len, e.what());
    return nullptr;
  }
}

void destroy(speclab::Drafter* drafter) { delete drafter; }

const SpeclabDrafterPlugin kPlugin = {
    SPECLAB_DRAFTER_ABI_VERSION,
    kName,
    "Medusa heads trained by speclab train-draft, on the target's hidden states (host services v2); params: file",
    &create,
    &destroy,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const SpeclabDrafterPlugin* speclab_drafter_plugin(void) {
  return &kPlugin;
}
