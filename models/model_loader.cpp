#include "models/model_loader.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "framework/core/error.h"
#include "models/loaders/gguf_model.h"
#include "models/loaders/hf_model.h"
#include "models/loaders/llama2c.h"
#include "models/loaders/synthetic.h"

#ifndef SPECLAB_SOURCE_DIR
#define SPECLAB_SOURCE_DIR "."
#endif
#ifndef SPECLAB_SHARED_DIR
#define SPECLAB_SHARED_DIR SPECLAB_SOURCE_DIR "/../shared"
#endif

namespace speclab {

bool use_chat_template(const LoadedModel& m, const std::string& chat) {
  return chat == "on" || (chat == "auto" && m.chat_template.available());
}

void check_chat_renders(const LoadedModel& m, const std::string& chat, const std::string& file,
                        const std::string& field, const std::string& off) {
  if (chat == "off" || m.chat_template.unrenderable().empty()) return;
  throw Error(ErrorKind::kConfig,
              "the model ships a chat template SpecLab cannot render (" + m.chat_template.unrenderable() +
                  "); use " + off + " to run on the bare prompt text",
              file, field);
}

TokenList encode_prompt(const LoadedModel& m, const std::string& text, bool use_chat, const std::string& system) {
  if (!use_chat) return m.tokenizer->encode(text, m.add_bos);
  return encode_conversation(m, {{"user", text}}, system);
}

TokenList encode_conversation(const LoadedModel& m, const std::vector<ChatMessage>& messages, const std::string& system) {
  if (!m.chat_template.available())
    throw Error(ErrorKind::kConfig, "expected a model with a chat template, found none", m.source, "chat_template");
  std::vector<ChatMessage> msgs;
  if (!system.empty()) msgs.push_back({"system", system});
  msgs.insert(msgs.end(), messages.begin(), messages.end());
  return m.tokenizer->encode(m.chat_template.render(msgs, true), m.add_bos);
}

namespace {

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}
bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
std::string dirname_of(const std::string& p) {
  auto slash = p.find_last_of('/');
  return slash == std::string::npos ? std::string(".") : p.substr(0, slash);
}
std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

std::string detect_format(const std::string& path) {
  if (is_dir(path)) return "safetensors";
  // model.safetensors (or a shard) of an HF checkpoint: the loader names the directory to pass.
  if (ends_with(path, ".safetensors")) return "safetensors";
  // Its config.json (or tokenizer.json, ...) beside safetensors files: the same hint, from the
  // loader (it said "cannot tell the model format ... set the format explicitly" until 2026-12-06).
  if (ends_with(path, ".json") && exists(path) && exists(dirname_of(path) + "/config.json"))
    return "safetensors";
  if (ends_with(path, ".gguf")) return "gguf";
  if (ends_with(path, ".bin")) return "llama2c";
  // Fall back to the magic bytes.
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorKind::kIo, "cannot open model file (does it exist?)", path);
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  if (std::string(magic, 4) == "GGUF") return "gguf";
  throw Error(ErrorKind::kBadInput,
              "cannot tell the model format: expected a .gguf file, a llama2.c .bin or an HF directory "
              "with config.json (set the format explicitly)",
              path, "format");
}

}  // namespace

std::string shared_data_dir() { return env_or("SPECLAB_SHARED_DIR", SPECLAB_SHARED_DIR); }
std::string models_data_dir() { return env_or("SPECLAB_MODELS_DIR", std::string(SPECLAB_SOURCE_DIR) + "/.cache/models"); }

ModelSource resolve_model_source(const ModelSource& in) {
  ModelSource s = in;
  const std::string models_dir = models_data_dir();
  const std::string shared_dir = shared_data_dir();
  // A named entry fixes its format; a different explicit format is an error, not ignored.
  auto named = [&](const std::string& format) {
    if (in.format != "auto" && in.format != format)
      throw Error(ErrorKind::kConfig,
                  "the named model '" + in.path + "' is a " + format + " model; expected format auto or " + format +
                      ", found '" + in.format + "'",
                  "model", "format");
    s.format = format;
  };
  if (is_synthetic_path(in.path)) {
    if (in.format != "auto" && in.format != "random")
      throw Error(ErrorKind::kConfig, "a random:<shape> model has format random; found '" + in.format + "'", "model",
                  "format");
    s.format = "random";
    return s;
  }
  if (const NamedModel* entry = find_named_model(in.path)) {
    named(entry->format);
    const std::string root = std::string(entry->root) == "shared" ? shared_dir : models_dir;
    s.path = root + "/" + entry->file;
    if (*entry->tokenizer && in.tokenizer.empty()) s.tokenizer = root + "/" + entry->tokenizer;
    if (std::string(entry->root) == "models" && !exists(s.path))
      throw Error(ErrorKind::kIo,
                  "the named model '" + in.path + "' is not installed: expected " + s.path + " (" + entry->install + ")",
                  in.path);
  }
  if (s.format == "auto") s.format = detect_format(s.path);
  // A directory is an HF checkpoint: one without config.json was reported by the loader as the
  // missing file alone, with neither the config key nor the flag that named the directory.
  if (s.format == "safetensors" && is_dir(s.path) && !exists(s.path + "/config.json"))
    throw Error(ErrorKind::kIo,
                "expected an HF checkpoint directory (with config.json), found a directory without one: " + s.path,
                "model", "path");
  // Only a llama2.c checkpoint reads a tokenizer file; GGUF and HF checkpoints carry their own.
  // A tokenizer given for them would be silently unused (and a typo in it never noticed).
  if (s.format != "llama2c" && !in.tokenizer.empty())
    throw Error(ErrorKind::kConfig,
                "expected no tokenizer file with a " + s.format +
                    " model, which carries its own (a tokenizer.bin is read for llama2.c models only), found '" +
                    in.tokenizer + "'",
                "model", "tokenizer");
  if (s.format == "llama2c" && s.tokenizer.empty()) s.tokenizer = dirname_of(s.path) + "/tokenizer.bin";
  return s;
}

LoadedModel load_model(const ModelSource& source) {
  source.validate();
  const ModelSource s = resolve_model_source(source);
  if (s.format == "random") {
    LoadedModel m = load_synthetic(s.path);
    m.origin = s;
    return m;
  }
  if (!exists(s.path)) throw Error(ErrorKind::kIo, "no such file or directory", s.path);
  LoadedModel m;
  if (s.format == "gguf") {
    GgufLoadOptions options;
    options.keep_packed = s.weights == "native";
    m = load_gguf(s.path, options);
  } else if (s.format == "safetensors") {
    m = load_hf_dir(s.path);
  } else {
    m = load_llama2c(s.path, s.tokenizer);
  }
  m.origin = s;
  return m;
}

}  // namespace speclab
