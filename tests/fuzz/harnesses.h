// The libFuzzer harnesses of SpecLab's file parsers (bodies in harnesses.cpp).
//
// Each takes one fuzz input, feeds it to one parser and exercises what the parser returns.
// speclab::Error is a clean rejection and is caught; anything else that escapes (another
// exception type) or that a sanitizer reports is a bug.
//   fuzz_gguf            read_gguf_buffer, metadata accessors, load_tensor, load_gguf
//   fuzz_safetensors     SafetensorsFile::open, read() of every tensor
//   fuzz_llama2c         load_llama2c (the checkpoint; a fixed small tokenizer.bin)
//   fuzz_tokenizer_bin   SentencePieceBpe::from_llama2c, encode/decode
//                        input: u32 vocab_size, u32 text length n, n bytes of text, the file
//   fuzz_tokenizer_json  ByteLevelBpe::from_tokenizer_json, encode/decode
//                        input: u32 text length n, n bytes of text, the JSON
//   fuzz_yaml_config     parse_experiment_config, expand_sweep (up to 64 points)
#pragma once

#include <cstddef>
#include <cstdint>

namespace speclab_fuzz {

using HarnessFn = int (*)(const uint8_t* data, size_t size);

int fuzz_gguf(const uint8_t* data, size_t size);
int fuzz_safetensors(const uint8_t* data, size_t size);
int fuzz_llama2c(const uint8_t* data, size_t size);
int fuzz_tokenizer_bin(const uint8_t* data, size_t size);
int fuzz_tokenizer_json(const uint8_t* data, size_t size);
int fuzz_yaml_config(const uint8_t* data, size_t size);

struct Harness {
  const char* name;  // also the folder name under tests/fuzz/regressions/
  HarnessFn fn;
};
inline constexpr Harness kHarnesses[] = {
    {"fuzz_gguf", fuzz_gguf},
    {"fuzz_safetensors", fuzz_safetensors},
    {"fuzz_llama2c", fuzz_llama2c},
    {"fuzz_tokenizer_bin", fuzz_tokenizer_bin},
    {"fuzz_tokenizer_json", fuzz_tokenizer_json},
    {"fuzz_yaml_config", fuzz_yaml_config},
};

}  // namespace speclab_fuzz
