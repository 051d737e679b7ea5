// load_gguf() — a llama.cpp GGUF model file -> LoadedModel (config, canonical float32 weights,
// tokenizer, chat template).
//
// Architectures: general.architecture "llama", "mistral" or "qwen2"; hyper-parameters come from
// `<arch>.block_count`, `.embedding_length`, `.feed_forward_length`, `.attention.head_count`,
// `.attention.head_count_kv` (default: head_count), `.attention.key_length` (default:
// embedding_length / head_count), `.context_length`, `.attention.layer_norm_rms_epsilon`
// (default 1e-5) and `.rope.freq_base` (default 10000). vocab_size is the row count of
// token_embd.weight; tie_word_embeddings is true when there is no output.weight; attention_bias
// is true when blk.0.attn_q.bias exists.
//
// Tensors are renamed to canonical HF names (token_embd -> model.embed_tokens, blk.N.attn_q ->
// model.layers.N.self_attn.q_proj, attn_k/attn_v -> k_proj/v_proj, attn_output -> o_proj,
// ffn_gate/up/down -> mlp.gate_proj/up_proj/down_proj, attn_norm -> input_layernorm, ffn_norm
// -> post_attention_layernorm, output_norm -> model.norm, output -> lm_head), dequantized to
// float32 and given PyTorch shape order (GGUF dims reversed). For "llama" and "mistral" the q/k
// rows (and biases) are converted from the interleaved GGUF RoPE layout to HF's rotate_half
// layout with unpermute_rope_rows(); "qwen2" files already use the NeoX/HF layout.
//
// Tokenizer: tokenizer.ggml.model "gpt2" -> ByteLevelBpe(tokens, merges, token_type, pre
// (default "default")); "llama" -> SentencePieceBpe(tokens, scores, token_type,
// tokenizer.ggml.add_space_prefix (default true)). BOS = tokenizer.ggml.bos_token_id (-1 when
// absent); EOS = {eos_token_id, eot_token_id, eom_token_id} (each when present), then every
// control token among <|endoftext|>, <|im_end|>, <|eot_id|>, <|eom_id|>, <|end_of_text|>, <|end|>
// and <end_of_turn>, without duplicates (a GGUF names one EOS; Qwen2.5-Instruct's
// generation_config ends on <|im_end|> and <|endoftext|>, as llama.cpp does). The chat
// template is tokenizer.chat_template when present.
//
// Throws Error(kIo) if the file cannot be read; Error(kUnsupported) for another architecture or
// tokenizer model, a tensor type SpecLab cannot decode, or a tensor it does not know (e.g.
// rope_freqs.weight, Llama 3.1 RoPE scaling, which SpecLab does not implement);
// Error(kBadInput) naming the file and key/tensor for missing or inconsistent data.
#pragma once

#include <string>

#include "models/loaded_model.h"

namespace speclab {

struct GgufLoadOptions {
  // Keep 2-D Q4_0 / Q4_1 / Q8_0 tensors in their on-disk blocks (HostTensor::is_packed) instead
  // of dequantizing them to float32: the model then computes with them directly (about 6.4x less
  // memory traffic per decode step for Q4_1). Other types are always dequantized.
  bool keep_packed = false;
};

LoadedModel load_gguf(const std::string& path, const GgufLoadOptions& options = {});

// GGUF tensor name -> canonical HF name ("blk.3.attn_q.weight" ->
// "model.layers.3.self_attn.q_proj.weight"); empty when the name is not a known tensor.
std::string gguf_to_hf_name(const std::string& gguf_name);

}  // namespace speclab
