// The bodies of the libFuzzer harnesses, shared by the fuzz binaries (fuzz_main.cpp, one per
// harness) and by tests/unit/test_fuzz_regressions.cpp, which replays every input kept in
// tests/fuzz/regressions/<harness>/ through the same code in the ordinary test build.
#include "tests/fuzz/harnesses.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "framework/core/error.h"
#include "framework/io/experiment_config.h"
#include "models/loaders/gguf.h"
#include "models/loaders/gguf_model.h"
#include "models/loaders/llama2c.h"
#include "models/loaders/safetensors.h"
#include "models/tokenizers/byte_level_bpe.h"
#include "models/tokenizers/sentencepiece_bpe.h"
#include "tests/fuzz/fuzz_util.h"

namespace speclab_fuzz {

// ---- fuzz_gguf ---------------------------------------------------------------
// The GGUF parser (read_gguf_buffer), the typed metadata accessors, tensor
// dequantization, and the whole GGUF model loader (load_gguf: config, tokenizer, weights).

namespace {

void exercise_gguf(const speclab::GgufFile& f) {
  for (const auto& [key, value] : f.metadata) {
    (void)value.type_description();
    try {
      switch (value.type) {
        case speclab::GgufValueType::STRING:
          (void)f.get_string(key);
          break;
        case speclab::GgufValueType::FLOAT32:
        case speclab::GgufValueType::FLOAT64:
          (void)f.get_float(key);
          break;
        case speclab::GgufValueType::ARRAY:
          (void)f.get_string_array(key);
          break;
        default:
          (void)f.get_int(key);
      }
    } catch (const speclab::Error& e) {
      rejected(e);
    }
    try {
      (void)f.get_int32_array(key);
    } catch (const speclab::Error& e) {
      rejected(e);
    }
    try {
      (void)f.get_float_array(key);
    } catch (const speclab::Error& e) {
      rejected(e);
    }
  }
  for (const speclab::GgufTensorInfo& t : f.tensors) {
    (void)t.type_name();
    if (t.n_elements > (1u << 20)) continue;  // keep each execution fast
    try {
      (void)f.load_tensor(t);
    } catch (const speclab::Error& e) {
      rejected(e);
    }
  }
}

}  // namespace

int fuzz_gguf(const uint8_t* data, size_t size) {
  try {
    speclab::GgufFile f = speclab::read_gguf_buffer(std::vector<uint8_t>(data, data + size), "fuzz.gguf");
    exercise_gguf(f);
  } catch (const speclab::Error& e) {
    rejected(e);
    return 0;  // clean rejection: nothing more to load
  }
  try {
    MemFile file(data, size);
    (void)speclab::load_gguf(file.path());
  } catch (const speclab::Error& e) {
    rejected(e);
  }
  return 0;
}

// ---- fuzz_safetensors --------------------------------------------------------
// SafetensorsFile::open (the header parser and its validation against the
// file size) and read() of every tensor.

int fuzz_safetensors(const uint8_t* data, size_t size) {
  MemFile file(data, size);
  try {
    speclab::SafetensorsFile f = speclab::SafetensorsFile::open(file.path());
    for (const auto& [name, info] : f.tensors()) {
      if (info.numel() > (1u << 20)) continue;
      try {
        (void)f.read(name);
      } catch (const speclab::Error& e) {
        rejected(e);
      }
    }
  } catch (const speclab::Error& e) {
    rejected(e);
  }
  return 0;
}

// ---- fuzz_llama2c ------------------------------------------------------------
// The llama2.c checkpoint loader (load_llama2c). The input is the checkpoint;
// the tokenizer is a small valid tokenizer.bin written once (see tokenizer_path()), so inputs
// that pass the checkpoint checks also run the tokenizer load with the header's vocab_size.
// The tokenizer.bin format itself is fuzzed by fuzz_tokenizer_bin.

namespace {

// A 64-token tokenizer.bin: <unk>, <s>, </s>, then 61 one-letter pieces.
const std::string& tokenizer_path() {
  static const std::string path = [] {
    std::string bytes;
    auto put = [&](const void* p, size_t n) { bytes.append(static_cast<const char*>(p), n); };
    const int32_t max_len = 5;
    put(&max_len, 4);
    for (int i = 0; i < 64; ++i) {
      std::string piece = i == 0 ? "<unk>" : i == 1 ? "<s>" : i == 2 ? "</s>" : std::string(1, char(' ' + i));
      const float score = -float(i);
      const int32_t len = int32_t(piece.size());
      put(&score, 4);
      put(&len, 4);
      put(piece.data(), piece.size());
    }
    static MemFile file(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    return file.path();
  }();
  return path;
}

}  // namespace

int fuzz_llama2c(const uint8_t* data, size_t size) {
  const std::string& tok = tokenizer_path();
  MemFile file(data, size);
  try {
    (void)speclab::load_llama2c(file.path(), tok);
  } catch (const speclab::Error& e) {
    rejected(e);
  }
  return 0;
}

// ---- tokenizer harnesses -----------------------------------------------------
// Both tokenizer inputs start with the text to encode: u32 length n (low byte), n bytes.

namespace {

std::string take_text(const uint8_t*& data, size_t& size) {
  size_t n = take_u32(data, size) & 0xFF;
  if (n > size) n = size;
  std::string text(reinterpret_cast<const char*>(data), n);
  data += n;
  size -= n;
  return text;
}

void exercise_tokenizer(const speclab::Tokenizer& tok, const std::string& text) {
  const speclab::TokenList ids = tok.encode(text, true);
  (void)tok.decode(ids);
  speclab::StreamDecoder stream(tok);
  for (speclab::Token id : ids) (void)stream.push(id);
  (void)stream.flush();
  for (speclab::Token id = 0; id < tok.vocab_size() && id < 512; ++id) {
    (void)tok.token_bytes(id);
    (void)tok.token_text(id);
  }
}

}  // namespace

// ---- fuzz_tokenizer_bin ------------------------------------------------------
// SentencePieceBpe::from_llama2c (llama2.c tokenizer.bin) and the tokenizer it builds.
// Input: u32 vocab_size, the text (see above), then the tokenizer.bin bytes.

int fuzz_tokenizer_bin(const uint8_t* data, size_t size) {
  const int64_t vocab = take_u32(data, size) & 0xFFFFF;
  const std::string text = take_text(data, size);
  MemFile file(data, size);
  try {
    exercise_tokenizer(*speclab::SentencePieceBpe::from_llama2c(file.path(), vocab), text);
  } catch (const speclab::Error& e) {
    rejected(e);
  }
  return 0;
}

// ---- fuzz_tokenizer_json -----------------------------------------------------
// ByteLevelBpe::from_tokenizer_json (HF tokenizer.json) and the tokenizer it builds.
// Input: the text (see above), then the JSON.

int fuzz_tokenizer_json(const uint8_t* data, size_t size) {
  const std::string text = take_text(data, size);
  MemFile file(data, size);
  try {
    exercise_tokenizer(*speclab::ByteLevelBpe::from_tokenizer_json(file.path()), text);
  } catch (const speclab::Error& e) {
    rejected(e);
  }
  return 0;
}

// ---- fuzz_yaml_config --------------------------------------------------------
// The YAML experiment config loader (parse_experiment_config: YAML parse,
// schema mapping, validate()) and the sweep expansion. Input: the YAML text.

int fuzz_yaml_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    speclab::ExperimentConfig c = speclab::parse_experiment_config(text, "/fuzz/config.yaml");
    size_t points = 1;
    for (const speclab::SweepAxis& axis : c.sweep) {
      points *= axis.values.size() + 1;
      if (points > 64) return 0;  // keep each execution fast
    }
    (void)speclab::expand_sweep(c);
  } catch (const speclab::Error& e) {
    rejected(e);
  }
  return 0;
}

}  // namespace speclab_fuzz
