// write_byte_level_tokenizer_json() — a stand-in tokenizer.json for HF checkpoints that tests
// write themselves (load_hf_dir requires one; the tests feed token ids directly).
//
// Exactly `vocab_size` ids: the 256 byte tokens (ids 0..255, GPT-2 byte-to-unicode spelling) and
// two-letter tokens "aa", "ab", ... (ids 256..) with the merges that build them; no added tokens.
// Throws std::invalid_argument for a vocab_size outside [256, 256 + 26 * 26] and
// std::runtime_error when the file cannot be written.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

#include "models/tokenizers/byte_level_bpe.h"

namespace speclab::test {

inline void write_byte_level_tokenizer_json(const std::string& path, int64_t vocab_size) {
  using nlohmann::json;
  if (vocab_size < 256 || vocab_size - 256 > 26 * 26)
    throw std::invalid_argument("vocab_size " + std::to_string(vocab_size) + " outside [256, 932]");
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_to_unicode(static_cast<unsigned char>(b))] = b;
  json merges = json::array();
  for (int64_t id = 256; id < vocab_size; ++id) {
    const int64_t k = id - 256;
    const std::string a(1, static_cast<char>('a' + k / 26)), b(1, static_cast<char>('a' + k % 26));
    vocab[a + b] = id;
    merges.push_back(a + " " + b);
  }
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json tok = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", byte_level},
              {"post_processor", nullptr},
              {"decoder", byte_level},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", false},
                {"vocab", vocab},
                {"merges", merges}}}};
  std::ofstream out(path);
  out << tok.dump(2) << "\n";
  if (!out.good()) throw std::runtime_error("cannot write " + path);
}

}  // namespace speclab::test
