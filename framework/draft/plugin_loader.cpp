#include "framework/draft/plugin_loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <new>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "framework/core/error.h"
#include "framework/io/config_util.h"
#include "framework/draft/draft_block_check.h"
#include "framework/draft/host_services.h"

namespace speclab {
namespace {

constexpr size_t kCreateErrorLen = 1024;  // bytes of the buffer handed to create()

// What an abi_version's library flag stands for (plugin_abi.h).
std::string std_library_name(uint32_t flag) {
  if (flag == SPECLAB_DRAFTER_ABI_FLAG_OLD_STRING) return "libstdc++'s pre-C++11 std::string (_GLIBCXX_USE_CXX11_ABI=0)";
  if (flag == SPECLAB_DRAFTER_ABI_FLAG_LIBCXX) return "libc++";
  if (flag == 0) return "libstdc++'s C++11 std::string (_GLIBCXX_USE_CXX11_ABI=1)";
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%X", flag);
  return std::string("an unknown C++ library (flags ") + hex + ")";
}

// The plugin call in progress, for plugin_call_in_progress(): a message a crash handler can
// print without allocating ("<path>: <method>: the plugin crashed in <name>.<method>()").
std::atomic<const char*> g_call_in_progress{nullptr};

// Marks a call into a plugin for its duration (calls do not nest: a plugin's call into the host's
// services table is not a plugin call).
class CallInProgress {
 public:
  explicit CallInProgress(const char* message) : previous_(g_call_in_progress.exchange(message)) {}
  ~CallInProgress() { g_call_in_progress.store(previous_); }
  CallInProgress(const CallInProgress&) = delete;
  CallInProgress& operator=(const CallInProgress&) = delete;

 private:
  const char* previous_;
};

Error plugin_error(const std::string& path, const std::string& message) {
  return Error(ErrorKind::kConfig, message, path, "plugin");
}

void close_library(void* handle) {
  if (handle != nullptr) dlclose(handle);
}

std::string dlerror_text() {
  const char* text = dlerror();
  return text != nullptr ? std::string(text) : std::string("unknown dynamic loader error");
}

// The drafter a plugin created, seen by the engine as an ordinary Drafter. It owns the plugin's
// object (freed with the plugin's own destroy), the host services table the object may call, and
// a reference to the library, so the plugin's code stays mapped for as long as the object can be
// called. Members are destroyed after the destructor body, so the table and the library are
// released only after destroy() has returned.
class PluginDrafter final : public Drafter {
 public:
  PluginDrafter(Drafter* inner, std::unique_ptr<HostServices> host, const LoadedPlugin& plugin, int64_t vocab_size)
      : inner_(inner),
        destroy_(plugin.descriptor->destroy),
        host_(std::move(host)),
        library_(plugin.library),
        path_(plugin.path),
        plugin_name_(plugin.name),
        vocab_size_(vocab_size) {}

  // destroy() may not throw out of a destructor: an exception from it ended the process with
  // std::terminate, naming no plugin, after the output was written (until 2026-12-06). It is
  // reported on stderr, and the drafter is gone either way.
  ~PluginDrafter() override {
    const CallInProgress in_call(crash_message("destroy"));
    try {
      destroy_(inner_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "warning: %s: destroy: %s.destroy() threw: %s\n", path_.c_str(), plugin_name_.c_str(),
                   e.what());
    } catch (...) {
      std::fprintf(stderr, "warning: %s: destroy: %s.destroy() threw an exception that is not a std::exception\n",
                   path_.c_str(), plugin_name_.c_str());
    }
  }

  PluginDrafter(const PluginDrafter&) = delete;
  PluginDrafter& operator=(const PluginDrafter&) = delete;

  std::string name() const override {
    return guarded("name", [&] { return inner_->name(); });
  }

  void begin(SeqId seq, const TokenList& prompt) override {
    guarded("begin", [&] { inner_->begin(seq, prompt); });
  }

  DraftBlock propose(const DraftContext& ctx, int max_k) override {
    DraftBlock block = guarded("propose", [&] { return inner_->propose(ctx, max_k); });
    check_block(block, max_k);
    apply_confidence_threshold(ctx, block);
    return block;
  }

  void accept(SeqId seq, int n_accepted) override {
    guarded("accept", [&] { inner_->accept(seq, n_accepted); });
  }

  void end(SeqId seq) override {
    guarded("end", [&] { inner_->end(seq); });
  }

  void reuse_prompt_state(bool on) override {
    guarded("reuse_prompt_state", [&] { inner_->reuse_prompt_state(on); });
  }

  // A plugin that reads the target's hidden states (an out-of-tree Medusa or EAGLE) gets them as
  // a built-in does.
  // Any order, repeats allowed: the engine returns hidden[i] for entry i. A layer the target lacks
  // is refused naming this file (the engine's own check named the drafter only).
  std::vector<int64_t> target_hidden_layers() const override {
    std::vector<int64_t> layers = guarded("target_hidden_layers", [&] { return inner_->target_hidden_layers(); });
    if (const int64_t n = host_->api()->model.n_layers; n > 0) {  // 0: a host without a target
      for (const int64_t l : layers)
        if (l < 0 || l >= n)
          throw Error(ErrorKind::kBadInput,
                      plugin_name_ + ".target_hidden_layers() returned layer " + std::to_string(l) +
                          ": expected layers of the target in 0.." + std::to_string(n - 1),
                      path_, "target_hidden_layers");
    }
    return layers;
  }

  void observe_target_hidden(SeqId seq, const std::vector<const float*>& hidden, int64_t n, int64_t d,
                             int64_t first_pos) override {
    guarded("observe_target_hidden", [&] { inner_->observe_target_hidden(seq, hidden, n, d, first_pos); });
  }

 private:
  // Runs a call into the plugin; an exception that is not a speclab::Error (the plugin cannot
  // normally build one without linking SpecLab) becomes one naming the plugin and the method.
  template <typename F>
  auto guarded(const char* method, F&& call) const -> decltype(call()) {
    const CallInProgress in_call(crash_message(method));
    try {
      return call();
    } catch (const Error&) {
      throw;
    } catch (const std::bad_alloc&) {
      // Named (it printed "error: out of memory" alone). The memory the failed request wanted is
      // free again; a few bytes for the message are not what ran out.
      throw Error(ErrorKind::kResource, plugin_name_ + "." + method + "() ran out of memory (std::bad_alloc)", path_,
                  method);
    } catch (const std::exception& e) {
      throw Error(ErrorKind::kBadInput, plugin_name_ + "." + method + "() threw: " + e.what(), path_, method);
    } catch (...) {
      throw Error(ErrorKind::kBadInput,
                  plugin_name_ + "." + method + "() threw an exception that is not a std::exception", path_,
                  method);
    }
  }

  // The DraftBlock contract of drafter.h, checked where the plugin's data enters SpecLab.
  void check_block(const DraftBlock& block, int max_k) const {
    const size_t k = block.tokens.size();
    const size_t limit = max_k > 0 ? static_cast<size_t>(max_k) : 0;
    auto fail = [&](const std::string& what) {
      return Error(ErrorKind::kBadInput, plugin_name_ + ".propose() returned " + what, path_, "propose");
    };
    if (k > limit) {
      throw fail(std::to_string(k) + " tokens for max_k " + std::to_string(max_k) + ": expected at most " +
                 std::to_string(limit) + ", found " + std::to_string(k));
    }
    for (size_t i = 0; i < k; ++i) {
      const Token t = block.tokens[i];
      if (t < 0 || (vocab_size_ > 0 && t >= vocab_size_)) {
        throw fail("token " + std::to_string(t) + " at draft position " + std::to_string(i) +
                   ": expected a token id in [0, " +
                   (vocab_size_ > 0 ? std::to_string(vocab_size_) : std::string("vocab")) + ")");
      }
    }
    if (!block.probs.empty()) {
      if (block.probs.size() != k) {
        throw fail("probs for " + std::to_string(block.probs.size()) + " positions: expected 0 or " +
                   std::to_string(k) + " (one per draft token), found " + std::to_string(block.probs.size()));
      }
      const size_t width = vocab_size_ > 0 ? static_cast<size_t>(vocab_size_) : block.probs[0].size();
      for (size_t i = 0; i < k; ++i) {
        if (block.probs[i].size() != width) {
          throw fail("a probs row of size " + std::to_string(block.probs[i].size()) + " at draft position " +
                     std::to_string(i) + ": expected the vocabulary size " + std::to_string(width) +
                     ", found " + std::to_string(block.probs[i].size()));
        }
        if (static_cast<size_t>(block.tokens[i]) >= width) {
          throw fail("token " + std::to_string(block.tokens[i]) + " at draft position " + std::to_string(i) +
                     " outside its probs row: expected a token id in [0, " + std::to_string(width) + ")");
        }
      }
    }
    if (!block.confidence.empty() && block.confidence.size() != k) {
      throw fail("confidence for " + std::to_string(block.confidence.size()) + " positions: expected 0 or " +
                 std::to_string(k) + ", found " + std::to_string(block.confidence.size()));
    }
    // A confidence is a top probability: a NaN one was never "below" a threshold, so its drafts
    // always went (until 2026-12-06).
    for (size_t i = 0; i < block.confidence.size(); ++i)
      if (!(block.confidence[i] >= 0.0f && block.confidence[i] <= 1.0f))
        throw fail("confidence " + std::to_string(block.confidence[i]) + " at draft position " + std::to_string(i) +
                   ": expected a probability in [0, 1]");
    // The logits rows behind q (read by `speclab check`'s controls that recompute q from them):
    // none, or one per token of the vocabulary's width, finite. Unchecked, a short row was read
    // past its end and a NaN one was blamed on the target model (until 2026-12-06).
    if (!block.logits.empty()) {
      if (block.logits.size() != k)
        throw fail("logits for " + std::to_string(block.logits.size()) + " positions: expected 0 or " +
                   std::to_string(k) + " (one per draft token), found " + std::to_string(block.logits.size()));
      const size_t width = vocab_size_ > 0 ? static_cast<size_t>(vocab_size_) : block.logits[0].size();
      for (size_t i = 0; i < k; ++i) {
        if (block.logits[i].size() != width)
          throw fail("a logits row of size " + std::to_string(block.logits[i].size()) + " at draft position " +
                     std::to_string(i) + ": expected the vocabulary size " + std::to_string(width));
        for (size_t j = 0; j < width; ++j)
          if (!std::isfinite(block.logits[i][j]))
            throw fail("a logit that is not finite at draft position " + std::to_string(i) + ", token " +
                       std::to_string(j) + ": expected finite logits");
      }
    }
    // The q rows (sums, NaN, q = 0 at the drafted token) as the engine checks every drafter's
    // (draft_block_check.h), here so that the error names the plugin's file: it named only the
    // drafter, and by the plugin's name(), which need not be its descriptor's (until 2026-12-06).
    if (vocab_size_ > 0) {
      try {
        check_draft_block(block, max_k, vocab_size_, plugin_name_);
      } catch (const Error& e) {
        throw fail(e.field() + " the host refuses: " + e.message());
      }
    }
  }

  // confidence_threshold (DrafterOptions) for a plugin: the drafts from the first position it
  // applies to whose reported confidence is below it are dropped, as the built-in model drafters
  // stop there; a plugin that reports no confidences cannot be gated and is refused. Until
  // 2026-12-06 the threshold was left to the plugin, and one that ignored it ran as if unset.
  void apply_confidence_threshold(const DraftContext& ctx, DraftBlock& block) const {
    if (ctx.min_confidence <= 0.0 || block.tokens.empty()) return;
    // Confidences are needed only where the threshold gates a position of this block: a block
    // that ends before confidence_from_token was refused without them (until 2026-12-07).
    bool gated = false;
    for (size_t i = 0; i < block.tokens.size() && !gated; ++i) gated = ctx.confidence_applies(i);
    if (!gated) return;
    if (block.confidence.empty())
      throw Error(ErrorKind::kBadInput,
                  plugin_name_ + ".propose() returned no confidences, and confidence_threshold " +
                      config::to_text(ctx.min_confidence) + " needs one per draft token to stop drafting",
                  path_, "propose");
    size_t keep = 0;
    while (keep < block.tokens.size() &&
           !(ctx.confidence_applies(keep) && block.confidence[keep] < ctx.min_confidence))
      ++keep;
    block.tokens.resize(keep);
    block.confidence.resize(keep);
    if (!block.probs.empty()) block.probs.resize(keep);
    if (!block.logits.empty()) block.logits.resize(std::min(keep, block.logits.size()));
  }

  // What the crash handler prints for a call of `method` (CallInProgress), made once per method.
  const char* crash_message(const char* method) const {
    std::string& m = crash_messages_[method];
    if (m.empty()) m = path_ + ": " + method + ": the plugin crashed in " + plugin_name_ + "." + method + "()";
    return m.c_str();
  }

  Drafter* inner_;
  void (*destroy_)(Drafter*);
  std::unique_ptr<HostServices> host_;
  std::shared_ptr<void> library_;
  std::string path_;
  std::string plugin_name_;
  int64_t vocab_size_;
  mutable std::map<std::string, std::string> crash_messages_;  // method -> crash_message()
};

}  // namespace

LoadedPlugin load_drafter_plugin(const std::string& path) {
  if (path.empty()) {
    throw plugin_error(path, "expected the path of a drafter plugin (a .so file), found an empty path");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) {
      throw plugin_error(path, "no such file: expected a drafter plugin (a .so file) at this path");
    }
    throw plugin_error(path, std::string("cannot access the drafter plugin: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    throw plugin_error(path, std::string("expected a shared library file, found ") +
                                 (S_ISDIR(st.st_mode) ? "a directory" : "something that is not a regular file"));
  }

  // dlopen searches the library path for a name without a '/'; the user meant this file.
  const std::string open_path = path.find('/') == std::string::npos ? "./" + path : path;
  dlerror();  // clear any stale error
  void* handle = dlopen(open_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw plugin_error(path, "cannot load it as a shared library: " + dlerror_text());
  }
  LoadedPlugin plugin;
  plugin.path = path;
  plugin.library = std::shared_ptr<void>(handle, close_library);

  dlerror();
  void* symbol = dlsym(handle, SPECLAB_DRAFTER_PLUGIN_SYMBOL);
  if (symbol == nullptr) {
    throw plugin_error(path, std::string("does not export ") + SPECLAB_DRAFTER_PLUGIN_SYMBOL +
                                 " \xE2\x80\x94 is it a SpecLab drafter plugin?");
  }
  auto entry = reinterpret_cast<SpeclabDrafterPluginEntry>(symbol);

  const SpeclabDrafterPlugin* descriptor = nullptr;
  // A crash here, or in create() and destroy(), is reported as one in a method is (it printed
  // nothing until 2026-12-06).
  const std::string entry_crash = path + ": " + SPECLAB_DRAFTER_PLUGIN_SYMBOL + ": the plugin crashed in its entry point";
  try {
    const CallInProgress in_call(entry_crash.c_str());
    descriptor = entry();
  } catch (...) {
    throw plugin_error(path, std::string(SPECLAB_DRAFTER_PLUGIN_SYMBOL) +
                                 "() threw: expected it to return its descriptor (exceptions must not cross "
                                 "the plugin boundary)");
  }
  if (descriptor == nullptr) {
    throw plugin_error(path, std::string(SPECLAB_DRAFTER_PLUGIN_SYMBOL) +
                                 "() returned null: expected a pointer to the plugin's static descriptor");
  }
  // abi_version first: with any other version the rest of the struct may be laid out differently.
  if (descriptor->abi_version != SPECLAB_DRAFTER_ABI_VERSION) {
    // The version number in the low 16 bits, library flags (two of them known) in the high ones.
    const uint32_t number = descriptor->abi_version & 0xFFFFu, library = descriptor->abi_version & 0xFFFF0000u;
    if (number == SPECLAB_DRAFTER_ABI_NUMBER) {
      throw plugin_error(path, "built for drafter ABI version " + std::to_string(number) + " with " +
                                   std_library_name(library) + ", this SpecLab uses " +
                                   std_library_name(SPECLAB_DRAFTER_ABI_LIBRARY) +
                                   ": rebuild the plugin with this SpecLab's compiler flags "
                                   "(speclab_add_drafter_plugin sets them; docs/plugins.md)");
    }
    throw plugin_error(path, "built for drafter ABI version " + std::to_string(number) +
                                 (library != SPECLAB_DRAFTER_ABI_LIBRARY ? " with " + std_library_name(library) : "") +
                                 ", this SpecLab expects " + std::to_string(SPECLAB_DRAFTER_ABI_NUMBER) +
                                 ": rebuild the plugin against this SpecLab");
  }
  if (descriptor->name == nullptr || descriptor->name[0] == '\0') {
    throw plugin_error(path, std::string("expected a non-empty drafter name in the descriptor, found ") +
                                 (descriptor->name == nullptr ? "null" : "an empty string"));
  }
  if (descriptor->create == nullptr) {
    throw plugin_error(path, "drafter '" + std::string(descriptor->name) +
                                 "': expected a create function in the descriptor, found null");
  }
  if (descriptor->destroy == nullptr) {
    throw plugin_error(path, "drafter '" + std::string(descriptor->name) +
                                 "': expected a destroy function in the descriptor, found null");
  }
  plugin.name = descriptor->name;
  plugin.description = descriptor->description != nullptr ? descriptor->description : "";
  plugin.descriptor = descriptor;
  return plugin;
}

std::unique_ptr<Drafter> make_plugin_drafter(const LoadedPlugin& plugin, const DrafterOptions& options,
                                             const DrafterEnv& env) {
  if (plugin.descriptor == nullptr || !plugin.library) {
    throw Error(ErrorKind::kInternal,
                "make_plugin_drafter: expected a plugin returned by load_drafter_plugin, found an empty one",
                plugin.path, "plugin");
  }
  const SpeclabDrafterPlugin& d = *plugin.descriptor;
  auto host = std::make_unique<HostServices>(env);
  std::vector<char> error(kCreateErrorLen, '\0');
  Drafter* raw = nullptr;
  const std::string create_crash = plugin.path + ": create: the plugin crashed in " + plugin.name + "'s create()";
  try {
    const CallInProgress in_call(create_crash.c_str());
    raw = d.create(&options, host->api(), error.data(), error.size());
  } catch (const std::exception& e) {
    throw plugin_error(plugin.path, plugin.name + ": create threw (exceptions must not cross the plugin boundary; "
                                                  "report errors through the error buffer): " + e.what());
  } catch (...) {
    throw plugin_error(plugin.path, plugin.name + ": create threw (exceptions must not cross the plugin boundary; "
                                                  "report errors through the error buffer)");
  }
  if (raw == nullptr) {
    error.back() = '\0';  // a plugin that ignored error_len still yields a terminated string
    std::string text(error.data());
    if (text.empty()) text = "create returned null without an error message";
    throw plugin_error(plugin.path, plugin.name + ": " + text);
  }
  std::unique_ptr<PluginDrafter> drafter;
  try {
    drafter = std::make_unique<PluginDrafter>(raw, std::move(host), plugin, env.vocab_size);
  } catch (...) {
    d.destroy(raw);
    throw;
  }
  // The engine's messages and checks name a drafter by name(): a copy-paste mismatch with the
  // descriptor's name made errors name another drafter (found by a probe on 2026-12-06).
  const std::string reported = drafter->name();
  if (reported != plugin.name)
    throw plugin_error(plugin.path, plugin.name + ": the drafter's name() returns '" + reported +
                                        "', expected the descriptor's name '" + plugin.name +
                                        "' (the host names the drafter by both)");
  return drafter;
}

const char* plugin_call_in_progress() { return g_call_in_progress.load(); }

}  // namespace speclab
