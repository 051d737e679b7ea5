// load_llama2c() — a llama2.c checkpoint (`run.c` format, legacy version 0) plus its
// tokenizer.bin, as a LoadedModel.
//
// File layout: 7 int32 header (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
// seq_len; a negative vocab_size means an unshared classifier follows), then float32 weights:
// token_embedding [vocab, dim], rms_att [L, dim], wq [L, dim, dim], wk [L, kv_dim, dim],
// wv [L, kv_dim, dim], wo [L, dim, dim], rms_ffn [L, dim], w1 [L, hidden, dim],
// w2 [L, dim, hidden], w3 [L, hidden, dim], rms_final [dim], freq_cis_real/imag
// [seq_len, head_dim/2] (skipped), and wcls [vocab, dim] when unshared.
// q/k rows use the interleaved RoPE layout of run.c and are un-permuted to the canonical HF
// layout. run.c conventions: rope_theta 10000, rms eps 1e-5, BOS = 1; generation stops when the
// model emits BOS (id 1), so eos_ids = {1}.
#pragma once

#include <string>

#include "models/loaded_model.h"

namespace speclab {

LoadedModel load_llama2c(const std::string& checkpoint_path, const std::string& tokenizer_path);

}  // namespace speclab
