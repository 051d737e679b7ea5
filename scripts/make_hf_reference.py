#!/usr/bin/env python3
"""Reference logits from HF `transformers` for SpecLab's HF-checkpoint loader and forward pass.

tests/integration/test_hf_reference.cpp compares SpecLab with these files, so that the HF path
(models/loaders/hf_model.h + LlamaModel) is checked against an outside implementation rather
than only against SpecLab's own llama2.c loader.

For each case below (small LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM configs that
vary head_dim, GQA ratio, rope_theta, rms_norm_eps, tied embeddings, q/k/v biases and the
storage dtype) the script builds the model in transformers (float32, attn_implementation
"eager"), sets every parameter from a closed formula (weight_values: integer hashing only, so
that C++ reproduces the same float32 bits; the per-tensor FNV-1a hashes of the bits are stored
so the test can prove it), rounds the parameters to the storage dtype (BF16/F16 cases) and runs
a fixed token sequence. It writes tests/fixtures/hf_reference/<case>.json:

  case, architecture, storage_dtype, transformers/torch versions
  config_json      the config.json transformers writes for the model (to_dict())
  tensors          {name: [shape]} of the model's parameters (a tied lm_head is not one)
  weights_fnv1a32  {name: FNV-1a 32 of the little-endian float32 bits the model runs with}
  token_ids        the input sequence
  positions        positions whose full logits are stored
  logits           [len(positions)][vocab] float32 logits at those positions
  argmax, max, logsumexp, sum  per position (every position)

With --save-dir DIR it also writes DIR/<case>/ with save_pretrained (the BF16/F16 cases in
their storage dtype, one case sharded), a byte-level BPE tokenizer.json and reference.json (the
fixture), for these cases and for PROBE_CASES (configs that only probe SpecLab: an explicit Qwen2
head_dim, sliding windows shorter than the sequence, and configs SpecLab must refuse). The test's
hidden case [.hf-dirs] loads them: SPECLAB_HF_REFERENCE_DIRS=DIR test_hf_reference "[.hf-dirs]".

Usage:
  python3 -m venv /tmp/hfenv && /tmp/hfenv/bin/pip install torch transformers safetensors numpy
  /tmp/hfenv/bin/python scripts/make_hf_reference.py [--out tests/fixtures/hf_reference] [--save-dir DIR]
  SPECLAB_HF_WRITE_DIR=D build/tests/test_hf_reference "[.write-dirs]"    # SpecLab's write_hf_dir ...
  /tmp/hfenv/bin/python scripts/make_hf_reference.py --check-dirs D       # ... read by transformers
"""
import argparse
import json
import os

import numpy as np
import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(ROOT, "tests/fixtures/hf_reference")
M32 = 0xFFFFFFFF

# ---- the weight formula (reproduced by tests/integration/test_hf_reference.cpp) ----------------


def fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & M32
    return h


def mix32(x: np.ndarray) -> np.ndarray:
    """Chris Wellons' lowbias32 on uint64 arrays holding 32-bit values."""
    x = x ^ (x >> np.uint64(16))
    x = (x * np.uint64(0x7FEB352D)) & np.uint64(M32)
    x = x ^ (x >> np.uint64(15))
    x = (x * np.uint64(0x846CA68B)) & np.uint64(M32)
    x = x ^ (x >> np.uint64(16))
    return x


def center_scale(name: str):
    """(center, scale) of a tensor's values: center + scale * u, u in [-1, 1)."""
    if name.endswith("norm.weight"):
        return 1.0, 0.25
    if name.endswith(".bias"):
        return 0.0, 0.5
    if name in ("model.embed_tokens.weight", "lm_head.weight") or ".q_proj." in name or ".k_proj." in name:
        return 0.0, 0.25
    return 0.0, 0.125


def weight_values(name: str, n: int) -> np.ndarray:
    """Element i of tensor `name` (row-major): with s = FNV-1a 32 of the name,
    h = lowbias32((s + i * 0x9E3779B9) mod 2^32) and u = ((h >> 8) - 2^23) / 2^23 (exact),
    the value is float32(center + scale * u) computed in float64 (exact too: scale is a power
    of two), so only the final rounding to float32 (nearest-even) is inexact."""
    s = np.uint64(fnv1a32(name.encode()))
    i = np.arange(n, dtype=np.uint64)
    h = mix32((s + i * np.uint64(0x9E3779B9)) & np.uint64(M32))
    u = ((h >> np.uint64(8)).astype(np.int64) - (1 << 23)).astype(np.float64) * 2.0**-23
    center, scale = center_scale(name)
    return (center + scale * u).astype(np.float32)


# ---- cases ------------------------------------------------------------------------------------

TOKEN_IDS = [(7 + 37 * i + (i * i) % 11) % 300 for i in range(24)]  # < 300 = the smallest vocab
POSITIONS = [0, 5, 11, 23]

CASES = [
    # GQA 4:2, head_dim 16 != 48 / 4, Llama 3's rope_theta and eps, untied.
    dict(case="llama_gqa_head_dim", cls=(LlamaConfig, LlamaForCausalLM), dtype="float32",
         kw=dict(vocab_size=320, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=256, rope_theta=500000.0,
                 rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)),
    # Qwen2: q/k/v biases, tied embeddings, rope_theta 1e6, BF16 storage.
    dict(case="qwen2_tied_bf16", cls=(Qwen2Config, Qwen2ForCausalLM), dtype="bfloat16",
         kw=dict(vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=512, rope_theta=1000000.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=True, bos_token_id=None, eos_token_id=3)),
    # Mistral: GQA 8:2, head_dim 16 != 64 / 8, sliding_window larger than the sequence, F16 storage.
    dict(case="mistral_head_dim_f16", cls=(MistralConfig, MistralForCausalLM), dtype="float16",
         kw=dict(vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=8,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=8192, sliding_window=4096,
                 rope_theta=1000000.0, rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1,
                 eos_token_id=2)),
    # Llama, multi-head (kv = heads), tied embeddings, transformers' defaults for theta and eps.
    dict(case="llama_tied_defaults", cls=(LlamaConfig, LlamaForCausalLM), dtype="float32", shard=True,
         kw=dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 max_position_embeddings=128, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)),
    # Qwen2, one KV head (MQA 4:1), untied, vocab_size above the tokenizer's ids (padded vocab).
    dict(case="qwen2_mqa_untied", cls=(Qwen2Config, Qwen2ForCausalLM), dtype="float32",
         kw=dict(vocab_size=1000, hidden_size=32, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=1, max_position_embeddings=256, rope_theta=10000.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=False, bos_token_id=None, eos_token_id=3)),
]

# Probes: written only with --save-dir (no fixture). The first ones SpecLab should compute as
# transformers does; the `refuse` ones it should refuse, with an error naming the field or tensor.
PROBE_CASES = [
    # Qwen2 with an explicit head_dim != hidden / heads (transformers' Qwen2 honours it).
    dict(case="probe_qwen2_head_dim", cls=(Qwen2Config, Qwen2ForCausalLM), dtype="float32",
         kw=dict(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32, max_position_embeddings=256, tie_word_embeddings=False)),
    # Mistral whose sliding window (8) is shorter than the 24-token sequence.
    dict(case="probe_mistral_window_8", cls=(MistralConfig, MistralForCausalLM), dtype="float32",
         kw=dict(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, max_position_embeddings=256, sliding_window=8)),
    # Qwen2 with use_sliding_window, window 8, layer 1 sliding (max_window_layers 1).
    dict(case="probe_qwen2_window_8", cls=(Qwen2Config, Qwen2ForCausalLM), dtype="float32",
         kw=dict(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, max_position_embeddings=256, use_sliding_window=True, sliding_window=8,
                 max_window_layers=1)),
    dict(case="refuse_llama3_rope", cls=(LlamaConfig, LlamaForCausalLM), dtype="float32", refuse="rope_parameters",
         kw=dict(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 max_position_embeddings=256,
                 rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0, low_freq_factor=1.0,
                                      high_freq_factor=4.0, original_max_position_embeddings=64))),
    dict(case="refuse_gelu", cls=(LlamaConfig, LlamaForCausalLM), dtype="float32", refuse="hidden_act",
         kw=dict(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 max_position_embeddings=256, hidden_act="gelu")),
    dict(case="refuse_mlp_bias", cls=(LlamaConfig, LlamaForCausalLM), dtype="float32", refuse="mlp_bias",
         kw=dict(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 max_position_embeddings=256, mlp_bias=True)),
    # Llama's attention_bias also gives o_proj a bias (transformers LlamaAttention), which SpecLab lacks:
    # refused naming the flag (until 2026-12-06 it was refused as an "unexpected tensor" o_proj.bias).
    dict(case="refuse_llama_attention_bias", cls=(LlamaConfig, LlamaForCausalLM), dtype="float32",
         refuse="attention_bias: expected false, found true",
         kw=dict(vocab_size=320, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                 max_position_embeddings=256, attention_bias=True)),
]

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build(case):
    config_cls, model_cls = case["cls"]
    config = config_cls(**case["kw"])
    config._attn_implementation = "eager"
    torch.manual_seed(0)  # irrelevant (every parameter is overwritten) but keeps init quiet
    model = model_cls(config).to(torch.float32).eval()
    storage = TORCH_DTYPES[case["dtype"]]
    with torch.no_grad():
        for name, p in model.named_parameters():  # a tied lm_head is not listed separately
            v = torch.from_numpy(weight_values(name, p.numel()).reshape(tuple(p.shape)))
            p.copy_(v.to(storage).to(torch.float32))  # storage rounding: round-to-nearest-even
    return config, model


def fmt(x) -> float:
    """The float32 value, as the shortest decimal that reads back as it (keeps the JSON small)."""
    return float(str(np.float32(x)))


def reference(case):
    config, model = build(case)
    ids = torch.tensor([TOKEN_IDS], dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].to(torch.float32)  # [n, vocab]
    tensors, hashes = {}, {}
    for name, p in model.named_parameters():
        tensors[name] = list(p.shape)
        hashes[name] = fnv1a32(p.detach().numpy().astype("<f4").tobytes())
    cfg = config.to_dict()
    cfg.pop("_attn_implementation_autoset", None)
    out = {
        "case": case["case"],
        "architecture": cfg["architectures"][0] if cfg.get("architectures") else type(model).__name__,
        "storage_dtype": case["dtype"],
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "config_json": cfg,
        "tensors": tensors,
        "weights_fnv1a32": hashes,
        "token_ids": TOKEN_IDS,
        "positions": POSITIONS,
        "logits": [[fmt(v) for v in logits[p].tolist()] for p in POSITIONS],
        "argmax": logits.argmax(-1).tolist(),
        "max": [fmt(v) for v in logits.max(-1).values.tolist()],
        "logsumexp": [fmt(v) for v in torch.logsumexp(logits.double(), -1).tolist()],
        "sum": [fmt(v) for v in logits.double().sum(-1).tolist()],
    }
    out["config_json"]["architectures"] = [type(model).__name__]
    out["architecture"] = type(model).__name__
    return config, model, out


# ---- a byte-level BPE tokenizer.json (as tests/integration/test_cross_format.cpp writes) ------


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def tokenizer_json(vocab_size: int) -> dict:
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = []
    for tid in range(256, min(vocab_size, 256 + 26 * 26)):
        k = tid - 256
        a, b = chr(ord("a") + k // 26), chr(ord("a") + k % 26)
        vocab[a + b] = tid
        merges.append(a + " " + b)
    bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
            "pre_tokenizer": bl, "post_processor": None, "decoder": bl,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": merges}}


def save_dir(case, model, config, out, path):
    """save_pretrained + tokenizer.json + reference.json (the fixture, and `refuse`: a string the
    load error must contain)."""
    model = model.to(TORCH_DTYPES[case["dtype"]])
    model.config.torch_dtype = TORCH_DTYPES[case["dtype"]]
    kwargs = {"max_shard_size": "40KB"} if case.get("shard") else {}
    model.save_pretrained(path, **kwargs)
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(config.vocab_size), f, ensure_ascii=False, indent=2)
    with open(os.path.join(path, "reference.json"), "w") as f:
        json.dump(dict(out, refuse=case.get("refuse")), f, separators=(",", ":"))


def check_dirs(root: str, fixtures: str) -> int:
    """Loads every checkpoint directory under `root` (written by SpecLab's write_hf_dir: the test's
    [.write-dirs] case) in transformers and compares its logits with the fixture of that name.
    Reports tensors transformers found missing or unexpected. Returns the number of failures."""
    failures = 0
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        model, info = transformers.AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
        problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
        with torch.no_grad():
            logits = model.eval()(input_ids=torch.tensor([TOKEN_IDS])).logits[0]
        line = f"{name}: {type(model).__name__}"
        fixture = os.path.join(fixtures, name + ".json")
        if os.path.exists(fixture):
            ref = json.load(open(fixture))
            d = (logits[ref["positions"]] - torch.tensor(ref["logits"])).abs().max().item()
            line += f", max |logits - fixture| = {d:.3g}"
            failures += d > 1e-4
        failures += bool(problems)
        print(line + (f", {problems}" if problems else ""))
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--save-dir", default=None,
                    help="also save_pretrained every case, and the probe cases, under this directory")
    ap.add_argument("--check-dirs", default=None,
                    help="load the directories the test's [.write-dirs] case wrote and compare; writes nothing")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.check_dirs:
        raise SystemExit(1 if check_dirs(args.check_dirs, args.out) else 0)
    os.makedirs(args.out, exist_ok=True)
    for case in CASES:
        config, model, out = reference(case)
        path = os.path.join(args.out, case["case"] + ".json")
        with open(path, "w") as f:
            json.dump(out, f, separators=(",", ":"))
            f.write("\n")
        print(f"{path}: {os.path.getsize(path)} bytes, argmax {out['argmax'][:8]}...")
        if args.save_dir:
            save_dir(case, model, config, out, os.path.join(args.save_dir, case["case"]))
    for case in PROBE_CASES if args.save_dir else []:
        config, model, out = reference(case)
        save_dir(case, model, config, out, os.path.join(args.save_dir, case["case"]))
        print(f"{args.save_dir}/{case['case']}: probe" + (f", must be refused naming {case['refuse']}" if case.get("refuse") else ""))


if __name__ == "__main__":
    main()
