#include "framework/draft/host_services.h"

#include <ATen/ops/from_blob.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/core/model.h"
#include "framework/kv/kv_cache_manager.h"
#include "framework/sampling/sampling.h"

namespace speclab {
namespace {

int code_of(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kBadInput: return SPECLAB_E_BAD_INPUT;
    case ErrorKind::kUnsupported: return SPECLAB_E_UNSUPPORTED;
    case ErrorKind::kConfig: return SPECLAB_E_CONFIG;
    case ErrorKind::kIo: return SPECLAB_E_IO;
    case ErrorKind::kResource: return SPECLAB_E_RESOURCE;
    case ErrorKind::kInternal: return SPECLAB_E_INTERNAL;
  }
  return SPECLAB_E_INTERNAL;
}

void write_error(char* error, size_t error_len, const char* message) {
  if (error != nullptr && error_len > 0) std::snprintf(error, error_len, "%s", message);
}

// Runs the body of one table function: SPECLAB_OK, or the code and message of what it threw.
// Nothing may unwind into the plugin's frames.
template <typename F>
int answer(char* error, size_t error_len, F&& body) noexcept {
  try {
    body();
    return SPECLAB_OK;
  } catch (const Error& e) {
    write_error(error, error_len, e.what());
    return code_of(e.kind());
  } catch (const std::bad_alloc&) {
    write_error(error, error_len, "out of memory");
    return SPECLAB_E_RESOURCE;
  } catch (const std::exception& e) {
    write_error(error, error_len, e.what());
    return SPECLAB_E_INTERNAL;
  } catch (...) {
    write_error(error, error_len, "an exception that is not a std::exception");
    return SPECLAB_E_INTERNAL;
  }
}

// what() reads "<function>: <argument>: <message>".
[[noreturn]] void bad(const char* function, const std::string& argument, const std::string& message) {
  throw Error(ErrorKind::kBadInput, message, function, argument);
}

void require(bool ok, const char* function, const char* argument, const char* expected) {
  if (!ok) bad(function, argument, std::string("expected ") + expected + ", found null");
}

HostServices& host_of(SpeclabHost* h, const char* function) {
  require(h != nullptr, function, "host", "api->host");
  return *reinterpret_cast<HostServices*>(h);
}

const Model& target_of(const HostServices& host, const char* function) {
  if (host.env().target == nullptr)
    throw Error(ErrorKind::kConfig, "this host has no target model (the drafter was built without one)", function);
  return *host.env().target;
}

KvCacheManager& kv_of(const HostServices& host, const char* function) {
  if (host.env().kv == nullptr)
    throw Error(ErrorKind::kConfig, "this host has no KV manager (the drafter was built without one)", function);
  return *host.env().kv;
}

// A live sequence of the target's pool.
void check_seq(const HostServices& host, KvCacheManager& kv, SeqId seq, const char* function) {
  if (!kv.blocks().contains(seq))
    bad(function, "seq", "expected a live KV sequence, found " + std::to_string(seq) + " (released or never issued)");
  if (kv.blocks().pool_of(seq) != host.env().target_pool)
    bad(function, "seq", "expected a sequence of the target's pool, found sequence " + std::to_string(seq) +
                             " of pool " + std::to_string(kv.blocks().pool_of(seq)));
}

void check_own(HostServices& host, SeqId seq, const char* function) {
  if (host.own().count(seq) > 0) return;
  // A sequence of its own already released (a second seq_release) was explained as the target's.
  const KvCacheManager* kv = host.env().kv;
  const bool live = kv != nullptr && kv->blocks().contains(seq);
  bad(function, "seq",
      "expected a sequence this drafter created with seq_create, found " + std::to_string(seq) +
          (live ? " (the target's sequence is committed and rolled back by the engine)"
                : " (released already, or never issued)"));
}

void check_status(KvStatus status, const char* function) {
  if (status != KvStatus::kOk) bad(function, "seq", std::string("the KV manager answered ") + to_string(status));
}

const SamplingOptions& sampling_of(const SpeclabSampling* s) { return *reinterpret_cast<const SamplingOptions*>(s); }

// ---- the table's functions ----

double host_uniform(SpeclabRng* rng) {
  if (rng == nullptr) return std::numeric_limits<double>::quiet_NaN();
  return reinterpret_cast<Rng*>(rng)->uniform();
}

int host_is_greedy(const SpeclabSampling* sampling) {
  return sampling == nullptr || sampling_of(sampling).greedy() ? 1 : 0;
}

int host_probs(const SpeclabSampling* sampling, const float* logits, int64_t vocab, float* probs, char* error,
               size_t error_len) {
  return answer(error, error_len, [&] {
    require(sampling != nullptr, "probs", "sampling", "speclab_sampling(ctx)");
    require(logits != nullptr, "probs", "logits", "[vocab] logits");
    require(probs != nullptr, "probs", "probs", "a [vocab] output buffer");
    thread_local std::vector<float> out;
    logits_to_probs(logits, vocab, sampling_of(sampling), out);
    std::copy(out.begin(), out.end(), probs);
  });
}

int host_argmax(const float* logits, int64_t vocab, int32_t* token, char* error, size_t error_len) {
  return answer(error, error_len, [&] {
    require(logits != nullptr, "argmax", "logits", "[vocab] logits");
    require(token != nullptr, "argmax", "token", "an output token");
    *token = argmax(logits, vocab);
  });
}

// The body of a model or KV function: `body(host, kv)` under answer(), with both checked to exist.
template <typename F>
int kv_call(SpeclabHost* h, const char* function, char* error, size_t error_len, F&& body) {
  return answer(error, error_len, [&] {
    HostServices& host = host_of(h, function);
    body(host, kv_of(host, function));
  });
}

// The layers a forward pass runs: args' list (ascending, in range) or all of them.
std::vector<int64_t> layers_of(const SpeclabForward& a, int64_t n_layers) {
  if (a.n_layers < 0) bad("forward", "n_layers", "expected a count >= 0, found " + std::to_string(a.n_layers));
  std::vector<int64_t> run;
  if (a.n_layers == 0) {
    for (int64_t l = 0; l < n_layers; ++l) run.push_back(l);
    return run;
  }
  require(a.layers != nullptr, "forward", "layers", "[n_layers] layer indices");
  run.assign(a.layers, a.layers + a.n_layers);
  for (size_t i = 0; i < run.size(); ++i) {
    if (run[i] < 0 || run[i] >= n_layers)
      bad("forward", "layers[" + std::to_string(i) + "]",
          "expected a layer in [0, " + std::to_string(n_layers) + "), found " + std::to_string(run[i]));
    if (i > 0 && run[i] <= run[i - 1])
      bad("forward", "layers[" + std::to_string(i) + "]",
          "expected ascending layers, found " + std::to_string(run[i]) + " after " + std::to_string(run[i - 1]));
  }
  return run;
}

// Checks everything a forward pass reads before it writes anything; returns the positions.
std::vector<int64_t> check_forward(HostServices& host, KvCacheManager& kv, const ModelConfig& c,
                                   const SpeclabForward& a) {
  const int64_t n = a.n;
  if (n < 1) bad("forward", "n", "expected at least one token, found " + std::to_string(n));
  require(a.tokens != nullptr, "forward", "tokens", "[n] token ids");
  for (int64_t i = 0; i < n; ++i)
    if (a.tokens[i] < 0 || a.tokens[i] >= c.vocab_size)
      bad("forward", "tokens[" + std::to_string(i) + "]",
          "expected a token id in [0, " + std::to_string(c.vocab_size) + "), found " + std::to_string(a.tokens[i]));
  check_seq(host, kv, a.seq, "forward");
  const int64_t length = kv.length(a.seq), capacity = kv.blocks().capacity(a.seq);
  if (a.start < 0) bad("forward", "start", "expected a position >= 0, found " + std::to_string(a.start));
  if (host.own().count(a.seq) == 0 && a.start < length)
    bad("forward", "start",
        "expected start >= " + std::to_string(length) + " (the committed length) on a sequence this drafter does "
        "not own, found " + std::to_string(a.start) + ": the accepted prefix holds the target's K/V");
  // On a sequence of its own the positions before start must hold K/V: attention reads them (a
  // start past them was accepted, and the pass read slots never written).
  if (const auto own = host.own().find(a.seq); own != host.own().end()) {
    const int64_t written = std::max(own->second, length);
    if (a.start > written)
      bad("forward", "start",
          "expected start <= " + std::to_string(written) + " (positions [0, " + std::to_string(written) +
              ") of this sequence hold K/V), found " + std::to_string(a.start) +
              ": the positions between would be read unwritten");
  }
  if (a.start + n > capacity)
    bad("forward", "start",
        "positions [" + std::to_string(a.start) + ", " + std::to_string(a.start + n) + ") are not all reserved: "
        "capacity " + std::to_string(capacity) + " (kv_reserve first)");
  std::vector<int64_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    pos[static_cast<size_t>(i)] = a.positions != nullptr ? a.positions[i] : a.start + i;
    if (pos[static_cast<size_t>(i)] < 0 || pos[static_cast<size_t>(i)] >= c.max_position_embeddings)
      bad("forward", "positions[" + std::to_string(i) + "]",
          "expected a position in [0, " + std::to_string(c.max_position_embeddings) + "), found " +
              std::to_string(pos[static_cast<size_t>(i)]));
  }
  if (a.n_logits < 1 || a.n_logits > n)
    bad("forward", "n_logits", "expected 1 <= n_logits <= n = " + std::to_string(n) + ", found " +
                                   std::to_string(a.n_logits));
  if (a.n_hidden < 0) bad("forward", "n_hidden", "expected a count >= 0, found " + std::to_string(a.n_hidden));
  if (a.n_hidden > 0) {
    require(a.hidden_layers != nullptr, "forward", "hidden_layers", "[n_hidden] layer indices");
    require(a.hidden != nullptr, "forward", "hidden", "an [n_hidden, n, hidden_size] output buffer");
  }
  return pos;
}

int host_forward(SpeclabHost* h, const SpeclabForward* args, char* error, size_t error_len) {
  return kv_call(h, "forward", error, error_len, [&](HostServices& host, KvCacheManager& kv) {
    const Model& model = target_of(host, "forward");
    require(args != nullptr, "forward", "args", "a SpeclabForward");
    const SpeclabForward& a = *args;
    const ModelConfig& c = model.config();
    const std::vector<int64_t> pos = check_forward(host, kv, c, a);
    ForwardOptions fo;
    fo.layers = layers_of(a, c.num_hidden_layers);
    for (int64_t i = 0; i < a.n_hidden; ++i)
      if (std::find(fo.layers.begin(), fo.layers.end(), a.hidden_layers[i]) == fo.layers.end())
        bad("forward", "hidden_layers[" + std::to_string(i) + "]",
            "expected one of the layers that run, found " + std::to_string(a.hidden_layers[i]));
    if (a.n_layers == 0) fo.layers.clear();  // all layers
    fo.logits_last_n = a.n_logits;
    fo.hidden_layers.assign(a.hidden_layers, a.hidden_layers + a.n_hidden);
    std::vector<at::Tensor> hidden;
    fo.hidden_out = &hidden;

    const std::vector<int64_t> ids(a.tokens, a.tokens + a.n);
    const at::Tensor logits =
        model.forward(at::tensor(ids, at::kLong), at::tensor(pos, at::kLong), kv.view_at(a.seq, a.start, a.n), fo)
            .contiguous();  // [n_logits, vocab]
    SPECLAB_CHECK(logits.size(0) == a.n_logits && logits.size(1) == c.vocab_size, "forward: logits shape");
    if (const auto own = host.own().find(a.seq); own != host.own().end())
      own->second = std::max(own->second, a.start + a.n);
    if (a.logits != nullptr) std::memcpy(a.logits, logits.data_ptr<float>(), sizeof(float) * logits.numel());
    for (size_t i = 0; i < hidden.size(); ++i) {
      const at::Tensor hs = hidden[i].contiguous();  // [n, hidden]
      SPECLAB_CHECK(hs.numel() == a.n * c.hidden_size, "forward: hidden state shape");
      std::memcpy(a.hidden + i * a.n * c.hidden_size, hs.data_ptr<float>(), sizeof(float) * hs.numel());
    }
  });
}

int host_kv_length(SpeclabHost* h, int64_t seq, int64_t* length, char* error, size_t error_len) {
  return kv_call(h, "kv_length", error, error_len, [&](HostServices&, KvCacheManager& kv) {
    require(length != nullptr, "kv_length", "length", "an output length");
    if (!kv.blocks().contains(seq)) bad("kv_length", "seq", "expected a live KV sequence, found " + std::to_string(seq));
    *length = kv.length(seq);
  });
}

int host_kv_reserve(SpeclabHost* h, int64_t seq, int64_t n, char* error, size_t error_len) {
  return kv_call(h, "kv_reserve", error, error_len, [&](HostServices& host, KvCacheManager& kv) {
    check_seq(host, kv, seq, "kv_reserve");
    if (n < 0) bad("kv_reserve", "n", "expected a count >= 0, found " + std::to_string(n));
    // Positions the target has no RoPE row for: forward() refuses them later, so the blocks would
    // be held for nothing.
    if (host.env().target != nullptr) {
      const int64_t max_pos = host.env().target->config().max_position_embeddings, length = kv.length(seq);
      if (length + n > max_pos)
        bad("kv_reserve", "n",
            "expected at most " + std::to_string(max_pos - length) + " positions (the target's " +
                std::to_string(max_pos) + " less the sequence's length " + std::to_string(length) + "), found " +
                std::to_string(n));
    }
    kv.reserve(seq, n);
  });
}

int host_kv_commit(SpeclabHost* h, int64_t seq, int64_t n, char* error, size_t error_len) {
  return kv_call(h, "kv_commit", error, error_len, [&](HostServices& host, KvCacheManager& kv) {
    check_own(host, seq, "kv_commit");
    // Named with the lengths (it read "seq: the KV manager answered out of range").
    const int64_t length = kv.length(seq), capacity = kv.blocks().capacity(seq);
    const int64_t written = std::max(host.own()[seq], length);
    if (n < 0 || length + n > capacity)
      bad("kv_commit", "n",
          "expected 0 <= n <= " + std::to_string(capacity - length) + " (the reserved positions past the length " +
              std::to_string(length) + "; kv_reserve first), found " + std::to_string(n));
    if (length + n > written)
      bad("kv_commit", "n",
          "expected positions that a forward wrote: [" + std::to_string(length) + ", " + std::to_string(written) +
              "), found n = " + std::to_string(n) + " reaching " + std::to_string(length + n));
    check_status(kv.commit(seq, n), "kv_commit");
  });
}

int host_kv_truncate(SpeclabHost* h, int64_t seq, int64_t new_len, char* error, size_t error_len) {
  return kv_call(h, "kv_truncate", error, error_len, [&](HostServices& host, KvCacheManager& kv) {
    check_own(host, seq, "kv_truncate");
    const int64_t length = kv.length(seq);
    if (new_len < 0 || new_len > length)
      bad("kv_truncate", "new_len",
          "expected 0 <= new_len <= the length " + std::to_string(length) + ", found " + std::to_string(new_len));
    check_status(kv.truncate(seq, new_len), "kv_truncate");
    host.own()[seq] = std::min(host.own()[seq], new_len);
  });
}

int host_seq_create(SpeclabHost* h, int64_t* seq, char* error, size_t error_len) {
  return kv_call(h, "seq_create", error, error_len, [&](HostServices& host, KvCacheManager& kv) {
    require(seq != nullptr, "seq_create", "seq", "an output sequence id");
    if (host.env().target_pool < 0)
      throw Error(ErrorKind::kConfig, "this host has no target pool (the drafter was built without one)", "seq_create");
    const SeqId id = kv.create(host.env().target_pool);
    host.own()[id] = 0;
    *seq = id;
  });
}

int host_seq_release(SpeclabHost* h, int64_t seq, char* error, size_t error_len) {
  return kv_call(h, "seq_release", error, error_len, [&](HostServices& host, KvCacheManager& kv) {
    check_own(host, seq, "seq_release");
    host.own().erase(seq);
    check_status(kv.release(seq), "seq_release");
  });
}

// final_norm / lm_head: one call of the target's output head on [n, hidden] host rows.
template <typename F>
int head_call(SpeclabHost* h, const char* function, const float* rows, int64_t n, float* out, char* error,
              size_t error_len, F&& apply) {
  return answer(error, error_len, [&] {
    HostServices& host = host_of(h, function);
    const Model& model = target_of(host, function);
    require(rows != nullptr, function, "rows", "[n, hidden_size] rows");
    require(out != nullptr, function, "out", "an output buffer");
    if (n < 1) bad(function, "n", "expected at least 1 row, found " + std::to_string(n));
    const int64_t d = model.config().hidden_size;
    const at::Tensor x = at::from_blob(const_cast<float*>(rows), {n, d}, at::kFloat);
    const at::Tensor y = apply(model, x);
    if (!y.defined())
      throw Error(ErrorKind::kConfig, "the target model has no output head to call", function);
    const at::Tensor c = y.to(at::kCPU, at::kFloat).contiguous();
    std::memcpy(out, c.data_ptr<float>(), sizeof(float) * static_cast<size_t>(c.numel()));
  });
}

int host_final_norm(SpeclabHost* h, const float* rows, int64_t n, float* out, char* error, size_t error_len) {
  return head_call(h, "final_norm", rows, n, out, error, error_len,
                   [](const Model& m, const at::Tensor& x) { return m.final_norm(x); });
}

int host_lm_head(SpeclabHost* h, const float* features, int64_t n, float* logits, char* error, size_t error_len) {
  return head_call(h, "lm_head", features, n, logits, error, error_len,
                   [](const Model& m, const at::Tensor& x) { return m.lm_head(x); });
}

}  // namespace

HostServices::HostServices(const DrafterEnv& env) : env_(env) {
  api_.version = SPECLAB_HOST_API_VERSION;
  api_.size = sizeof(SpeclabHostApi);
  api_.host = reinterpret_cast<SpeclabHost*>(this);
  api_.model.vocab_size = env.vocab_size;
  if (env.target != nullptr) {
    const ModelConfig& c = env.target->config();
    if (api_.model.vocab_size == 0) api_.model.vocab_size = c.vocab_size;
    api_.model.n_layers = c.num_hidden_layers;
    api_.model.hidden_size = c.hidden_size;
    api_.model.max_positions = c.max_position_embeddings;
  }
  api_.uniform = &host_uniform;
  api_.is_greedy = &host_is_greedy;
  api_.probs = &host_probs;
  api_.argmax = &host_argmax;
  api_.forward = &host_forward;
  api_.kv_length = &host_kv_length;
  api_.kv_reserve = &host_kv_reserve;
  api_.kv_commit = &host_kv_commit;
  api_.kv_truncate = &host_kv_truncate;
  api_.seq_create = &host_seq_create;
  api_.seq_release = &host_seq_release;
  api_.final_norm = &host_final_norm;
  api_.lm_head = &host_lm_head;
}

HostServices::~HostServices() {
  if (env_.kv == nullptr) return;
  for (const auto& entry : own_) {
    try {
      (void)env_.kv->release(entry.first);
    } catch (...) {  // a destructor must not throw; the sequence may be gone with its manager's state
    }
  }
}

}  // namespace speclab
