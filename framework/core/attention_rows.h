// AttentionRows — one call of causal attention, softmax(q k^T * scale) v, for n query rows over
// one layer of a float32 K/V cache in a KV manager's slot layout: what a drafter that keeps its
// own K/V (the EAGLE head, framework/draft/builtin/eagle_packed.h) hands to the target's CPU
// attention kernel through Model::attend_rows. Framework vocabulary only: the kernel lives with
// the model (models/llama/attention_cpu.h), so framework/ never includes models/.
#pragma once

#include <cstdint>

namespace speclab {

struct AttentionRows {
  // q: [n, q_stride] float32, RoPE already applied; head h of row i is
  // q + i * q_stride + h * head_dim (q_stride >= n_heads * head_dim).
  const float* q = nullptr;
  int64_t q_stride = 0;
  int64_t n = 0;           // query rows, >= 1
  int64_t n_heads = 0;     // H, a multiple of n_kv_heads (grouped-query attention)
  int64_t n_kv_heads = 0;  // KVH
  int64_t head_dim = 0;    // D
  // k, v: [n_slots, n_kv_heads, head_dim] float32; key j of kv head g is at
  // k + (slot_of(j) * n_kv_heads + g) * head_dim, slot_of(j) = slots ? slots[j] : slot_base + j
  // (a KvView's read_slots or read_base). slots: [max(limits)] or nullptr.
  const float* k = nullptr;
  const float* v = nullptr;
  const int64_t* slots = nullptr;
  int64_t slot_base = 0;
  const int64_t* limits = nullptr;  // [n]: row i attends keys j < limits[i]; each >= 1
  float scale = 1.0f;               // usually 1 / sqrt(head_dim)
  float* out = nullptr;             // [n, n_heads * head_dim]; head h of row i at i * H * D + h * D
};

}  // namespace speclab
