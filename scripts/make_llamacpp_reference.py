#!/usr/bin/env python3
"""Writes tests/fixtures/smollm2/llamacpp_greedy.json: llama.cpp's greedy reference for SmolLM2.

For each of six chat prompts:
  1. render the conversation with the GGUF's own Jinja chat template (tokenizer.chat_template,
     rendered by jinja2) and check it equals the hand-written ChatML form with SmolLM2's default
     system prompt (the script fails if they differ);
  2. tokenize the rendered text with llama.cpp (add_bos=False as the GGUF asks, special=True so
     <|im_start|>/<|im_end|> become their ids), and independently with the PyPI `tokenizers`
     package built from the GGUF vocab + merges (recorded as tokenizers_prompt_ids);
  3. greedy-decode 48 new tokens with llama.cpp (one thread, argmax computed here over the full
     logits row, stop after EOS id 2 <|im_end|>), recording per step the chosen id, its logit,
     and the top-1 minus top-2 logit margin.

  4. greedy-decode the same prompt with DequantLlama, an independent float64 NumPy forward on
     the weights dequantized by the `gguf` package (the arithmetic SpecLab does), recording its
     tokens and margins as f64_dequant_tokens / f64_dequant_margins.

Precision: llama.cpp computes with the quantized Q4_1/Q8_0 weights and its own kernels
(activations quantized to 8 bits for the dot products); SpecLab dequantizes to float32. Logit
differences of order 0.1 (top-2 margin differences up to ~0.7) are expected, so greedy paths
may diverge at steps with a small top-2 margin. The test (tests/integration/test_smollm2.cpp)
uses the margins to judge that.

Usage: python3 scripts/make_llamacpp_reference.py [--model PATH] [--out PATH]
"""
import argparse
import ctypes
import importlib.metadata
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_MODEL = os.path.join(ROOT, ".cache", "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(ROOT, "tests", "fixtures", "smollm2", "llamacpp_greedy.json")

DEFAULT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
MAX_NEW_TOKENS = 48
EOS_ID = 2  # <|im_end|>

PROMPTS = [
    {"name": "fact", "user": "What is the capital of Japan?"},
    {"name": "poem", "user": "Write a four-line poem about the sun."},
    {"name": "code", "user": "Write a Python function that reverses a string."},
    {"name": "summary", "user": (
        "Summarize this paragraph in one sentence: The honeybee is a social insect that lives in "
        "large colonies. Each colony has a single queen, thousands of female workers and a few "
        "hundred male drones. Workers gather nectar and pollen from flowers, build the wax comb, "
        "and care for the young, while the queen lays up to two thousand eggs a day.")},
    {"name": "arithmetic", "user": (
        "Tom has 3 boxes with 12 apples in each box. He gives away 7 apples. "
        "How many apples does he have left?")},
    {"name": "colors", "user": "List three colors."},
]


def chatml(user):
    return (f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"
            f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n")


def gguf_metadata(path):
    import gguf
    r = gguf.GGUFReader(path)
    f = r.fields
    return {
        "chat_template": f["tokenizer.chat_template"].contents(),
        "tokens": f["tokenizer.ggml.tokens"].contents(),
        "token_type": f["tokenizer.ggml.token_type"].contents(),
        "merges": f["tokenizer.ggml.merges"].contents(),
        "add_bos": bool(f["tokenizer.ggml.add_bos_token"].contents()),
        "eos": int(f["tokenizer.ggml.eos_token_id"].contents()),
    }


def render_jinja(template, user):
    import jinja2
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template).render(messages=[{"role": "user", "content": user}],
                                            add_generation_prompt=True)


def hf_tokenizer(meta):
    """tokenizers.Tokenizer equivalent to the GGUF 'gpt2'/'smollm' vocabulary."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    vocab = {t: i for i, t in enumerate(meta["tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in meta["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    # GGUF token_type 3 = CONTROL (the <|...|> and <...> specials of SmolLM2).
    specials = [meta["tokens"][i] for i, ty in enumerate(meta["token_type"]) if int(ty) == 3]
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    return tok


class DequantLlama:
    """Independent float64 NumPy forward of the GGUF llama graph on the dequantized weights.

    This is the arithmetic SpecLab performs (dequantize once, then dense float math), written
    separately from both SpecLab and llama.cpp. RoPE is applied in GGUF's adjacent-pair layout
    directly on the GGUF (permuted) q/k rows, so it also cross-checks SpecLab's un-permuting.
    """

    def __init__(self, path):
        import gguf
        import numpy as np
        from gguf.quants import dequantize
        r = gguf.GGUFReader(path)
        f = r.fields
        get = lambda k: f[k].contents()
        self.n_layer = int(get("llama.block_count"))
        self.n_head = int(get("llama.attention.head_count"))
        self.n_kv = int(get("llama.attention.head_count_kv"))
        self.eps = float(get("llama.attention.layer_norm_rms_epsilon"))
        self.theta = float(get("llama.rope.freq_base"))
        self.w = {t.name: np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float64) for t in r.tensors}
        self.hidden = self.w["token_embd.weight"].shape[1]
        self.hd = self.hidden // self.n_head
        self.lm_head = self.w.get("output.weight", self.w["token_embd.weight"])  # tied when absent

    def rms(self, x, g):
        import numpy as np
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.eps) * g

    def rope(self, x, pos):  # x: [n, heads, hd], adjacent pairs (x[2i], x[2i+1])
        import numpy as np
        inv = self.theta ** (-np.arange(0, self.hd, 2, dtype=np.float64) / self.hd)
        ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]  # [n, hd/2]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = a * c - b * s
        out[..., 1::2] = a * s + b * c
        return out

    def reset(self):
        self.k = [None] * self.n_layer
        self.v = [None] * self.n_layer

    def forward(self, ids):
        """Appends ids to the cached sequence; returns the logits of the last one, [vocab]."""
        import numpy as np
        past = 0 if self.k[0] is None else self.k[0].shape[0]
        n = len(ids)
        pos = np.arange(past, past + n)
        x = self.w["token_embd.weight"][np.asarray(ids)]
        rep = self.n_head // self.n_kv
        for l in range(self.n_layer):
            W = lambda name: self.w[f"blk.{l}.{name}.weight"]
            h = self.rms(x, W("attn_norm"))
            q = self.rope((h @ W("attn_q").T).reshape(n, self.n_head, self.hd), pos)
            k = self.rope((h @ W("attn_k").T).reshape(n, self.n_kv, self.hd), pos)
            v = (h @ W("attn_v").T).reshape(n, self.n_kv, self.hd)
            self.k[l] = k if self.k[l] is None else np.concatenate([self.k[l], k])
            self.v[l] = v if self.v[l] is None else np.concatenate([self.v[l], v])
            K = np.repeat(self.k[l], rep, axis=1)  # [T, heads, hd]; q head j uses kv head j // rep
            V = np.repeat(self.v[l], rep, axis=1)
            T = K.shape[0]
            sc = np.einsum("nhd,thd->hnt", q, K) / np.sqrt(self.hd)
            mask = np.arange(T)[None, :] > pos[:, None]  # [n, T]
            sc = np.where(mask[None], -np.inf, sc)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            att = np.einsum("hnt,thd->nhd", sc, V).reshape(n, self.hidden)
            x = x + att @ W("attn_output").T
            h = self.rms(x, W("ffn_norm"))
            g = h @ W("ffn_gate").T
            x = x + ((g / (1.0 + np.exp(-g))) * (h @ W("ffn_up").T)) @ W("ffn_down").T
        return self.rms(x[-1], self.w["output_norm.weight"]) @ self.lm_head.T


def dequant_greedy(model, prompt_ids, n_steps):
    import numpy as np
    model.reset()
    z = model.forward(prompt_ids)
    steps = []
    for _ in range(n_steps):
        order = np.argsort(-z, kind="stable")
        top1, top2 = int(order[0]), int(order[1])
        steps.append({"token": top1, "margin": round(float(z[top1] - z[top2]), 5)})
        if top1 == EOS_ID:
            break
        z = model.forward([top1])
    return steps


def last_logits(llm):
    import numpy as np
    ptr = llm._ctx.get_logits_ith(-1)
    row = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(llm.n_vocab(),))
    return row.astype(np.float64)  # copy: the buffer is overwritten by the next decode


def greedy(llm, prompt_ids):
    import numpy as np
    llm.reset()
    llm.eval(prompt_ids)
    steps = []
    for _ in range(MAX_NEW_TOKENS):
        z = last_logits(llm)
        order = np.argsort(-z, kind="stable")  # ties: lowest id first, as SpecLab's argmax
        top1, top2 = int(order[0]), int(order[1])
        steps.append({"token": top1, "logit": round(float(z[top1]), 5),
                      "second": top2, "margin": round(float(z[top1] - z[top2]), 5)})
        if top1 == EOS_ID:
            break
        llm.eval([top1])
    return steps


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()

    from peer import import_llama_cpp
    llama_cpp = import_llama_cpp()
    meta = gguf_metadata(args.model)
    if meta["add_bos"]:
        sys.exit("expected tokenizer.ggml.add_bos_token = false for SmolLM2")
    if meta["eos"] != EOS_ID:
        sys.exit(f"expected eos id {EOS_ID}, found {meta['eos']}")
    hf = hf_tokenizer(meta)

    llm = llama_cpp.Llama(model_path=args.model, n_ctx=512, n_batch=512, n_threads=1, n_threads_batch=1,
                          seed=1234, verbose=False, logits_all=False)

    ref64 = DequantLlama(args.model)
    records = []
    agree_all = True
    for p in PROMPTS:
        text = chatml(p["user"])
        rendered = render_jinja(meta["chat_template"], p["user"])
        if rendered != text:
            sys.exit(f"chat template mismatch for {p['name']}:\n{rendered!r}\n!=\n{text!r}")
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        hf_ids = hf.encode(text, add_special_tokens=False).ids
        agree = list(ids) == list(hf_ids)
        agree_all &= agree
        steps = greedy(llm, ids)
        gen = [s["token"] for s in steps]
        ref_steps = dequant_greedy(ref64, ids, MAX_NEW_TOKENS)
        ref_gen = [s["token"] for s in ref_steps]
        ref_match = next((i for i, (a, b) in enumerate(zip(gen, ref_gen)) if a != b), min(len(gen), len(ref_gen)))
        text_ids = gen[:-1] if gen and gen[-1] == EOS_ID else gen
        out_text = llm.detokenize(text_ids).decode("utf-8", errors="replace")
        records.append({
            "name": p["name"],
            "user": p["user"],
            "rendered": text,
            "prompt_ids": list(ids),
            "tokenizers_prompt_ids": list(hf_ids),
            "tokenizers_agree": agree,
            "tokens": gen,
            "steps": steps,
            "stopped_at_eos": bool(gen and gen[-1] == EOS_ID),
            "text": out_text,
            "f64_dequant_tokens": ref_gen,
            "f64_dequant_margins": [s["margin"] for s in ref_steps],
            "f64_dequant_matches_llamacpp_for": ref_match,
        })
        print(f"{p['name']}: {len(ids)} prompt ids (tokenizers agree: {agree}), {len(gen)} generated, "
              f"min margin {min(s['margin'] for s in steps):.3f}, dequantized-f64 agrees for {ref_match}: "
              f"{out_text[:70]!r}", file=sys.stderr)

    doc = {
        "description": "llama.cpp greedy decoding of SmolLM2-135M-Instruct (GGUF Q4_1) on ChatML prompts; "
                       "written by scripts/make_llamacpp_reference.py",
        "model_file": os.path.basename(os.path.realpath(args.model)),
        "versions": {
            "llama_cpp_python": llama_cpp.__version__,
            "gguf": importlib.metadata.version("gguf"),
            "tokenizers": importlib.metadata.version("tokenizers"),
            "jinja2": importlib.metadata.version("jinja2"),
            "numpy": importlib.metadata.version("numpy"),
            "python": sys.version.split()[0],
        },
        "settings": {
            "max_new_tokens": MAX_NEW_TOKENS, "eos_id": EOS_ID, "n_threads": 1, "seed": 1234,
            "selection": "argmax over the full logits row (ties: lowest id), computed in numpy",
            "add_bos": False, "default_system": DEFAULT_SYSTEM,
        },
        "precision_note": (
            "llama.cpp computes with the quantized Q4_1/Q8_0 weights and its own kernels (activations "
            "quantized to 8 bits for the dot products); SpecLab dequantizes the weights to float32. Logit "
            "differences of order 0.1 (top-2 margin differences up to ~0.7) are expected, so a greedy path may diverge at a step whose "
            "top-1 minus top-2 margin ('margin') is small."),
        "f64_dequant_note": (
            "f64_dequant_tokens/margins: greedy decoding by an independent float64 NumPy forward on the "
            "weights dequantized by the gguf package (DequantLlama in the script)."),
        "tokenizers_agree_all": agree_all,
        "prompts": records,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
