// Unicode Normalization Form C (UAX #15, "Unicode Normalization Forms"): canonical decomposition,
// canonical ordering of combining marks, then canonical composition. A tokenizer.json whose
// normalizer is {"type": "NFC"} (Qwen2's) has HF `tokenizers` apply it to the text between
// added tokens before pre-tokenizing; ByteLevelBpe does the same.
//
// The tables (nfc_tables.inc) come from scripts/gen_nfc_tables.py, Python's unicodedata; see the
// file for the Unicode version. A code point assigned in a later version passes through as a
// starter that composes with nothing (NFC-stable in practice: new characters are rarely
// decomposable).
#pragma once

#include <string>
#include <string_view>

namespace speclab::unicode {

// `text` in NFC. Invalid UTF-8 bytes are kept in place, each as a starter that composes with
// nothing (so a byte-level tokenizer still sees every input byte). Text that is all ASCII is
// returned unchanged without decoding.
std::string to_nfc(std::string_view text);

}  // namespace speclab::unicode
