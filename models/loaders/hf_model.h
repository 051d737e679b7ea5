// HF checkpoint directories (what `save_pretrained` writes) <-> LoadedModel. Torch-free.
//
// load_hf_dir(dir) reads:
//   config.json              architectures[0] in {LlamaForCausalLM, Qwen2ForCausalLM,
//                            MistralForCausalLM}; the ModelConfig fields (HF names). Defaults as
//                            in transformers: num_key_value_heads = num_attention_heads,
//                            head_dim = hidden_size / num_attention_heads, rope_theta 10000,
//                            rms_norm_eps 1e-6, tie_word_embeddings false, attention_bias false
//                            (Qwen2 always has q/k/v biases; Mistral never).
//                            Unsupported (Error kUnsupported naming the field): rope_scaling
//                            other than null/"default", hidden_act other than "silu",
//                            mlp_bias true, Llama's attention_bias true (transformers biases
//                            o_proj too; SpecLab has q/k/v biases only). Sliding-window attention (Mistral `sliding_window`,
//                            Qwen2 with `use_sliding_window`) is exact full attention for
//                            contexts up to the window, so max_position_embeddings is lowered to
//                            the window instead of failing.
//   model.safetensors, or model.safetensors.index.json + the shards its weight_map names.
//                            HF tensor names and q/k rotate_half layout are already canonical
//                            (models/weights.h). `*.rotary_emb.inv_freq` buffers and a tied
//                            lm_head.weight are dropped; any other tensor the config does not
//                            call for is Error(kUnsupported). Shapes are checked against the
//                            config from the headers before any data is read.
//   generation_config.json   bos_token_id, eos_token_id (int or list); config.json otherwise.
//   tokenizer.json           byte-level BPE (ByteLevelBpe::from_tokenizer_json).
//   chat_template.jinja or tokenizer_config.json "chat_template" -> ChatTemplate::from_jinja.
// Every failure is a speclab::Error naming the file and the field or tensor at fault.
//
// write_hf_dir() writes the files an HF checkpoint of that architecture has (config.json with
// the keys transformers writes, sorted and indented by 2 like `to_json_string`;
// generation_config.json; model.safetensors or model-0000i-of-0000n.safetensors shards plus
// model.safetensors.index.json). It writes no tokenizer: callers copy or write tokenizer.json.
#pragma once

#include <cstdint>
#include <string>

#include "framework/core/types.h"
#include "models/loaded_model.h"
#include "models/loaders/safetensors.h"

namespace speclab {

// What config.json (and generation_config.json, when given) say about a checkpoint.
struct HfConfig {
  ModelConfig config;          // validated
  std::string architecture;    // architectures[0], e.g. "Qwen2ForCausalLM"
  std::string torch_dtype;     // as written ("bfloat16"), empty when absent
  Token bos_token_id = -1;     // -1 when absent/null
  TokenList eos_token_ids;     // empty when absent/null
};

// Parses `config_path` (an HF config.json) and, when `generation_config_path` is non-empty and
// exists, takes bos/eos ids from it. Throws Error naming the file and field, e.g.
// "config.json: num_hidden_layers: expected integer, found string".
HfConfig read_hf_config(const std::string& config_path, const std::string& generation_config_path = {});

LoadedModel load_hf_dir(const std::string& dir);

struct HfWriteOptions {
  std::string architecture = "LlamaForCausalLM";  // or Qwen2ForCausalLM, MistralForCausalLM
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  uint64_t max_shard_bytes = 0;  // 0: one model.safetensors; otherwise shards of at most this
                                 // many tensor bytes (a larger tensor gets a shard of its own)
  Token bos_token_id = -1;       // written as null when < 0
  TokenList eos_token_ids;       // one id is written as an int, several as a list, none as null
};

// Creates `dir` if needed and writes the checkpoint. `weights` must hold exactly the tensors
// expected_weight_shapes(config) names (a tied lm_head.weight is dropped as HF does); the
// config must be expressible in the architecture (Qwen2: attention_bias and head_dim ==
// hidden/heads; Llama and Mistral: no attention_bias). Throws Error(kBadInput/kUnsupported/kIo).
void write_hf_dir(const std::string& dir, const ModelConfig& config, const WeightMap& weights,
                  const HfWriteOptions& options = {});

}  // namespace speclab
