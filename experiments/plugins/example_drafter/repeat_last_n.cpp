// repeat_last_n — an example out-of-tree SpecLab drafter plugin (docs/plugins.md walks through it).
//
// It bets that the text repeats with period n: with w = the last min(n, len) tokens of
// ctx.tokens (the pending token included), it proposes w[0], w[1], ..., w[|w|-1], w[0], ...
// up to max_k tokens. For tokens [.., 3, 7] and n = 2 that is 3 7 3 7 ..., which is exactly
// what a sequence of period 2 would continue with. It is deterministic, so it returns no probs
// (the verifier then treats q as one-hot at each draft token, which is still lossless) and no
// confidence.
//
// Options: params.n (an integer in [1, 65536], default 2); any other params key is refused.
//
// The plugin uses only SpecLab's headers, never a non-inline SpecLab function, so it links
// against nothing but the C++ standard library (speclab_add_drafter_plugin enforces that with
// -Wl,--no-undefined). Only the entry point is exported. It needs none of the host services
// (framework/draft/host_api.h); experiments/plugins/sampling_drafter/ shows a plugin that does.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "framework/draft/drafter.h"
#include "framework/draft/drafter_options.h"
#include "framework/draft/plugin_abi.h"

namespace {

using speclab::DraftBlock;
using speclab::DraftContext;
using speclab::SeqId;
using speclab::TokenList;

constexpr long kDefaultN = 2;
constexpr long kMaxN = 65536;

class RepeatLastN final : public speclab::Drafter {
 public:
  explicit RepeatLastN(size_t n) : n_(n) {}

  std::string name() const override { return "repeat_last_n"; }

  void begin(SeqId seq, const TokenList& /*prompt*/) override {
    if (!pending_.emplace(seq, 0).second) {
      throw std::logic_error("repeat_last_n: begin() called twice for sequence " + std::to_string(seq));
    }
  }

  DraftBlock propose(const DraftContext& ctx, int max_k) override {
    auto it = pending_.find(ctx.seq);
    if (it == pending_.end()) {
      throw std::logic_error("repeat_last_n: propose() for sequence " + std::to_string(ctx.seq) +
                             " before begin()");
    }
    if (ctx.tokens == nullptr) throw std::invalid_argument("repeat_last_n: propose() got ctx.tokens == null");
    const TokenList& tokens = *ctx.tokens;
    DraftBlock block;
    const size_t window = std::min(n_, tokens.size());
    if (window > 0 && max_k > 0) {
      const size_t start = tokens.size() - window;
      block.tokens.reserve(static_cast<size_t>(max_k));
      for (size_t i = 0; i < static_cast<size_t>(max_k); ++i) block.tokens.push_back(tokens[start + i % window]);
    }
    it->second = static_cast<int>(block.tokens.size());
    return block;
  }

  void accept(SeqId seq, int n_accepted) override {
    auto it = pending_.find(seq);
    if (it == pending_.end()) {
      throw std::logic_error("repeat_last_n: accept() for sequence " + std::to_string(seq) + " before begin()");
    }
    if (n_accepted < 0 || n_accepted > it->second) {
      throw std::invalid_argument("repeat_last_n: accept(): expected n_accepted in [0, " +
                                  std::to_string(it->second) + "] (the tokens last proposed), found " +
                                  std::to_string(n_accepted));
    }
    it->second = 0;
  }

  void end(SeqId seq) override { pending_.erase(seq); }

 private:
  size_t n_;
  std::map<SeqId, int> pending_;  // seq -> tokens proposed and not yet accepted/rejected
};

void write_error(char* error, size_t error_len, const std::string& message) {
  if (error != nullptr && error_len > 0) std::snprintf(error, error_len, "%s", message.c_str());
}

// Returns nullptr and fills `error` on bad options; never lets an exception out.
speclab::Drafter* create(const speclab::DrafterOptions* options, const SpeclabHostApi* /*host*/, char* error,
                         size_t error_len) {
  try {
    long n = kDefaultN;
    for (const auto& [key, value] : options->params) {
      if (key != "n") {
        write_error(error, error_len, "params." + key + ": unknown parameter, expected only 'n'");
        return nullptr;
      }
      const char* first = value.data();
      const char* last = value.data() + value.size();
      auto [end, ec] = std::from_chars(first, last, n);
      if (ec != std::errc() || end != last || value.empty() || n < 1 || n > kMaxN) {
        write_error(error, error_len,
                    "params.n: expected an integer in [1, " + std::to_string(kMaxN) + "], found '" + value + "'");
        return nullptr;
      }
    }
    return new RepeatLastN(static_cast<size_t>(n));
  } catch (const std::exception& e) {
    write_error(error, error_len, std::string("repeat_last_n: ") + e.what());
    return nullptr;
  }
}

void destroy(speclab::Drafter* drafter) { delete drafter; }

const SpeclabDrafterPlugin kPlugin = {
    SPECLAB_DRAFTER_ABI_VERSION,
    "repeat_last_n",
    "proposes the last n tokens again, cycled (bets on text of period n); params: n (default 2)",
    &create,
    &destroy,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const SpeclabDrafterPlugin* speclab_drafter_plugin(void) {
  return &kPlugin;
}
