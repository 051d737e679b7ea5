/* The host services a drafter plugin can use: a versioned table of plain C function pointers
   that the plugin's `create` receives (framework/draft/plugin_abi.h) and may keep until its
   `destroy` runs. This header is C (it compiles as C99 and as C++): only C types and opaque
   handles cross it, and errors come back as return codes + message buffers, never exceptions.
   Compare llama.cpp's llama_sampler_i, the Linux kernel's ops structs.

   Why a table: the host loads a plugin with RTLD_LOCAL and exports none of its own symbols, so a
   plugin cannot call SpecLab functions directly (Rng::uniform, logits_to_probs, Model::forward).
   Through the table it draws from the run's drafter stream, applies the very transform the
   target's p gets, and runs the target model on the shared KV cache.

   Handles
     SpeclabHost*      the host side of one drafter (the target model and the shared KV
                       manager); api->host, valid until the drafter is destroyed.
     SpeclabRng*       the drafter's random stream: speclab_rng(ctx) (plugin_abi.h) in propose().
                       It is the Session's Rng::stream(seed, 1), never the verifier's stream.
     SpeclabSampling*  the run's sampling options: speclab_sampling(ctx) in propose().
   Both per-call handles are valid during that propose() call only.

   Errors: every function that can fail returns SPECLAB_OK (0) or one of the SPECLAB_E_* codes
   (they follow speclab::ErrorKind) and writes a NUL-terminated message of at most error_len bytes
   to `error` (error may be NULL when error_len is 0). A failed call changes nothing.

   Versions: `version` is SPECLAB_HOST_API_VERSION and `size` is sizeof(SpeclabHostApi) as the
   host was built. Functions are only ever appended (version + 1, size grows), so a plugin built
   against an older table keeps working; a plugin that needs a newer function checks version
   (or size) first. Changing an existing entry bumps SPECLAB_DRAFTER_ABI_VERSION instead. */
#ifndef SPECLAB_DRAFT_HOST_API_H
#define SPECLAB_DRAFT_HOST_API_H

#include <stddef.h>
#include <stdint.h>

#define SPECLAB_HOST_API_VERSION 2

#ifdef __cplusplus
extern "C" {
#endif

typedef struct SpeclabHost SpeclabHost;
typedef struct SpeclabRng SpeclabRng;
typedef struct SpeclabSampling SpeclabSampling;

/* Return codes. */
enum {
  SPECLAB_OK = 0,
  SPECLAB_E_BAD_INPUT = 1,   /* bad arguments: an id out of range, a null buffer, ... */
  SPECLAB_E_UNSUPPORTED = 2,
  SPECLAB_E_CONFIG = 3,      /* the host cannot do it: e.g. no target model in this host */
  SPECLAB_E_IO = 4,
  SPECLAB_E_RESOURCE = 5,    /* the KV budget ran out */
  SPECLAB_E_INTERNAL = 6     /* a bug in SpecLab */
};

/* The target model's shape. All 0 when the host has no target model (a bare DrafterEnv, in tests)
   except vocab_size, which may still be known. */
typedef struct SpeclabModelInfo {
  int64_t vocab_size;
  int64_t n_layers;
  int64_t hidden_size;
  int64_t max_positions; /* the context length */
} SpeclabModelInfo;

/* One target forward pass over n tokens of KV sequence `seq`: their K/V are written at positions
   [start, start + n) of the sequence (in the layers that run) and attention reads positions
   [0, start + n). Those positions must be reserved (kv_reserve). On the target's own sequence
   (DraftContext::seq, or any sequence this drafter did not create) start must be >= its committed
   length: a drafter writes only the positions past the accepted prefix, which the verification
   pass overwrites in every layer (this is how layer_skip shares the target's cache). */
typedef struct SpeclabForward {
  int64_t seq;
  const int32_t* tokens;         /* [n] token ids in [0, vocab) */
  const int64_t* positions;      /* [n] RoPE positions, or NULL for start, start + 1, ... */
  int64_t n;                     /* >= 1 */
  int64_t start;                 /* >= 0 */
  const int64_t* layers;         /* [n_layers] ascending layer indices to run; NULL / 0 = all */
  int64_t n_layers;
  int64_t n_logits;              /* logits of the last n_logits tokens, 1 <= n_logits <= n */
  float* logits;                 /* out: [n_logits, vocab] row-major, or NULL (not copied) */
  const int64_t* hidden_layers;  /* [n_hidden] layers (each one that runs), or NULL / 0 */
  int64_t n_hidden;
  float* hidden;                 /* out: [n_hidden, n, hidden_size]: the residual stream after
                                    each of hidden_layers, for every token; NULL iff n_hidden 0 */
} SpeclabForward;

typedef struct SpeclabHostApi {
  uint32_t version;        /* SPECLAB_HOST_API_VERSION */
  uint32_t size;           /* sizeof(SpeclabHostApi) */
  SpeclabHost* host;       /* first argument of the model and KV functions */
  SpeclabModelInfo model;  /* the target model */

  /* ---- the drafter's random stream ---- */
  /* One draw in [0, 1) (one Rng::uniform()). NaN for a null handle. */
  double (*uniform)(SpeclabRng* rng);

  /* ---- the sampling transform (framework/sampling/sampling.h) ---- */
  /* 1 when the run decodes greedily (temperature 0), else 0 (and 1 for a null handle). */
  int (*is_greedy)(const SpeclabSampling* sampling);
  /* probs[vocab] = logits_to_probs(logits[vocab], the run's options): exactly the transform
     that produces the target's p (temperature, top-k, top-p; one-hot at argmax when greedy). */
  int (*probs)(const SpeclabSampling* sampling, const float* logits, int64_t vocab, float* probs, char* error,
               size_t error_len);
  /* *token = the index of the largest logit, the lowest index on ties (the greedy choice). */
  int (*argmax)(const float* logits, int64_t vocab, int32_t* token, char* error, size_t error_len);

  /* ---- the target model on the shared KV cache ---- */
  int (*forward)(SpeclabHost* host, const SpeclabForward* args, char* error, size_t error_len);

  /* ---- KV sequences (framework/kv/kv_cache_manager.h) ---- */
  /* *length = the committed length of seq (any live sequence). */
  int (*kv_length)(SpeclabHost* host, int64_t seq, int64_t* length, char* error, size_t error_len);
  /* Capacity for n more tokens past the committed length (any live sequence of the target's pool). */
  int (*kv_reserve)(SpeclabHost* host, int64_t seq, int64_t n, char* error, size_t error_len);
  /* Make n more written positions part of seq. Only a sequence this drafter created. */
  int (*kv_commit)(SpeclabHost* host, int64_t seq, int64_t n, char* error, size_t error_len);
  /* Drop positions [new_len, length). Only a sequence this drafter created. */
  int (*kv_truncate)(SpeclabHost* host, int64_t seq, int64_t new_len, char* error, size_t error_len);
  /* A new, empty sequence in the target's pool (same budget as the target), owned by this
     drafter: e.g. a private cache of the target's first layers. Released with seq_release, or
     when the drafter is destroyed. */
  int (*seq_create)(SpeclabHost* host, int64_t* seq, char* error, size_t error_len);
  int (*seq_release)(SpeclabHost* host, int64_t seq, char* error, size_t error_len);

  /* ---- version 2: the target's output head (Model::final_norm, Model::lm_head) ----
     For drafters that work on the target's hidden states (Medusa, EAGLE), which a drafter
     receives by overriding Drafter::target_hidden_layers() and observe_target_hidden(). Both
     return SPECLAB_E_CONFIG when the host has no target model or the model has no such head. */
  /* out[n, hidden_size] = the target's final RMSNorm of rows[n, hidden_size] of its last layer's
     residual stream: the features its LM head reads. */
  int (*final_norm)(SpeclabHost* host, const float* rows, int64_t n, float* out, char* error, size_t error_len);
  /* logits[n, vocab] = the target's LM head on features[n, hidden_size], with the target's own
     weights and kernels (-inf for tokens a reduced head leaves out). */
  int (*lm_head)(SpeclabHost* host, const float* features, int64_t n, float* logits, char* error,
                 size_t error_len);
} SpeclabHostApi;

#ifdef __cplusplus
}
#endif

#endif /* SPECLAB_DRAFT_HOST_API_H */
