#!/usr/bin/env python3
"""Writes the Qwen2.5-Coder pair's reference fixtures in tests/fixtures/qwen/ (tracker issue 17).

The references come from code nobody on this project wrote:
  * tokenizer.json      texts -> token ids from llama.cpp (llama-cpp-python, vocab_only=True,
                        special=True, add_bos as the GGUF says) and from PyPI `tokenizers` (a BPE
                        built from the GGUF's vocab + merges with the qwen2 pre-tokenizer regex
                        and the control/user-defined tokens as added tokens); prose, code with
                        indentation/tabs/digits, CJK, emoji, and chat-template-rendered prompts.
                        Both models' vocabularies are checked to be identical (one fixture).
  * chat_template.json  the GGUF's tokenizer.chat_template string and its renderings for the
                        no-tools case by jinja2 (ImmutableSandboxedEnvironment, trim_blocks and
                        lstrip_blocks, as llama-cpp-python's Jinja2ChatFormatter and HF
                        transformers render it); the script checks llama-cpp-python's formatter
                        gives the same text.
  * dequant.json        for one tensor of each type in the pair (Q4_K, Q5_0, Q6_K, Q8_0) the first
                        two rows dequantized by gguf.quants.dequantize (float32 bit patterns) and
                        two checksums over the whole tensor's float32 bits.
  * llamacpp_greedy.json  llama.cpp's greedy tokens (argmax of the full logits row, ties to the
                        lowest id; n_threads 2) for 5 chat prompts x 32 new tokens, for the 1.5B
                        and the 0.5B, with the top-1 minus top-2 logit margin per step.

Usage: python3 scripts/make_qwen_fixtures.py [--models-dir .cache/models] [--out tests/fixtures/qwen]
                                             [--only tokenizer,chat,dequant,greedy]
Needs: pip install gguf tokenizers jinja2 llama-cpp-python (versions are recorded in each file),
and the pair (`make qwen-pair`).
"""
import argparse
import ctypes
import hashlib
import importlib.metadata
import json
import os
import sys

import gguf
import jinja2
import jinja2.sandbox
import numpy as np
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import make_tokenizer_reference as tokref  # noqa: E402  (texts, conversations, BPE builder)
from peer import import_llama_cpp  # noqa: E402

MODELS = {
    "1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "0.5b": "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
}
GREEDY_NEW_TOKENS = 32
N_THREADS = 2

# Reference prompts for the greedy fixture: two HumanEval-style completions, a coding request,
# a writing prompt and a reasoning prompt (the test runs the first two on the 0.5B).
GREEDY_PROMPTS = [
    {"name": "has_close_elements", "user": (
        "Complete the following Python function.\n\n```python\nfrom typing import List\n\n\n"
        "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
        "    \"\"\" Check if in given list of numbers, are any two numbers closer to each other than\n"
        "    given threshold.\n    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n    False\n"
        "    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n    True\n"
        "    \"\"\"\n```")},
    {"name": "is_prime", "user": "Write a Python function is_prime(n) that checks whether n is a prime number."},
    {"name": "merge_intervals", "user": (
        "Write a Python function that merges overlapping intervals given as a list of [start, end] pairs.")},
    {"name": "writing", "user": "Write a short, vivid paragraph about a lighthouse keeper's last night on the job."},
    {"name": "reasoning", "user": (
        "A train travels 60 km in 45 minutes. At the same speed, how long does it take to travel "
        "100 km? Explain step by step.")},
]

QWEN_TEXTS = [
    "def add(a, b):\n\treturn a + b\n\n\nclass Foo:\n    def bar(self):\n        return 42\n",
    "if x:\n\t\tprint('tab tab')\n  \t mixed\n",
    "numbers 0 7 42 123 2024 3.14159 1e10 -17 0xff 1,000,000",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002\u6211\u4eec\u6709123\u4e2a\u82f9\u679c\u3002",
    "\u6df7\u5408 mixed \u4e2d\u6587 and English \u0646\u0635 \ud14c\uc2a4\ud2b8 \u30c6\u30b9\u30c8",
    "emoji \U0001f680\U0001f525 \U0001f44d\U0001f3fd \U0001f1ef\U0001f1f5 \u2728 done",
    "<|fim_prefix|>def quicksort(arr):\n<|fim_suffix|>\n    return result<|fim_middle|>",
    "<|endoftext|><|im_start|>user\n\u4f60\u597d<|im_end|>",
    "It's 5 o'clock; we'll see. They've gone. I'd've. DON'T SHOUT",
    "   leading and trailing   \n\n\n   ",
    "\r\n\r\nCRLF\r\nlines\r\n",
    "    for i in range(10):\n        if i % 2 == 0:\n            yield i ** 2\n",
    "{\"key\": [1, 2, 3], \"nested\": {\"a\": null}}\n",
]


def versions():
    out = {"python": sys.version.split()[0]}
    for pkg in ("gguf", "tokenizers", "jinja2", "numpy"):
        out[pkg] = importlib.metadata.version(pkg)
    try:
        llama_cpp = import_llama_cpp()
        out["llama_cpp_python"] = llama_cpp.__version__
    except ImportError:
        pass
    return out


def write_json(out_dir, name, doc):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


class Vocab:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        f = r.fields
        self.path = path
        self.tokens = f["tokenizer.ggml.tokens"].contents()
        self.types = [int(t) for t in f["tokenizer.ggml.token_type"].contents()]
        self.merges = f["tokenizer.ggml.merges"].contents()
        self.pre = f["tokenizer.ggml.pre"].contents()
        self.add_bos = bool(f["tokenizer.ggml.add_bos_token"].contents()) if "tokenizer.ggml.add_bos_token" in f else False
        self.eos = int(f["tokenizer.ggml.eos_token_id"].contents())
        self.template = f["tokenizer.chat_template"].contents()
        h = hashlib.sha256()
        for t in self.tokens:
            h.update(t.encode("utf-8") + b"\0")
        for m in self.merges:
            h.update(m.encode("utf-8") + b"\0")
        self.digest = h.hexdigest()

    def hf(self):
        vocab = {t: i for i, t in enumerate(self.tokens)}
        merges = [tuple(m.split(" ", 1)) for m in self.merges]
        # GGUF token_type 3 = CONTROL, 4 = USER_DEFINED: llama.cpp splits both out of the text
        # before BPE when parse_special is on.
        specials = [t for t, ty in zip(self.tokens, self.types) if ty in (3, 4)]
        return tokref.build_tokenizer(vocab, merges, specials, "qwen2")


def jinja_env():
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    return env


def render(template, messages, add_generation_prompt=True):
    return jinja_env().from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt)


def chat_fixture(vocabs, out_dir):
    """Both models' templates (they differ only inside the tools branch)."""
    conversations = [c for c in tokref.CONVERSATIONS if c] + [
        [{"role": "user", "content": p["user"]}] for p in GREEDY_PROMPTS[:2]]
    cases = []
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    for key, vocab in vocabs.items():
        formatter = Jinja2ChatFormatter(template=vocab.template, eos_token="<|im_end|>", bos_token="")
        for messages in conversations:
            for gen in (True, False):
                text = render(vocab.template, messages, gen)
                if gen:
                    got = formatter(messages=messages).prompt
                    if got != text:
                        sys.exit(f"llama-cpp-python's Jinja2ChatFormatter differs from jinja2:\n{got!r}\n{text!r}")
                cases.append({"model": key, "messages": messages, "add_generation_prompt": gen, "expected": text})
    write_json(out_dir, "chat_template.json", {
        "generator": "scripts/make_qwen_fixtures.py",
        "versions": versions(),
        "note": "expected = jinja2 ImmutableSandboxedEnvironment(trim_blocks, lstrip_blocks) rendering of "
                "each model's tokenizer.chat_template with no tools; llama-cpp-python's Jinja2ChatFormatter "
                "gives the same text for every add_generation_prompt case",
        "templates": {key: v.template for key, v in vocabs.items()},
        "cases": cases,
    })
    return [c for c in cases if c["model"] == "1.5b"]


def tokenizer_fixture(vocabs, out_dir, chat_cases):
    llama_cpp = import_llama_cpp()
    v = vocabs["1.5b"]
    if vocabs["0.5b"].digest != v.digest:
        sys.exit("the two models' vocabularies differ; expected one shared vocabulary")
    if v.pre != "qwen2":
        sys.exit(f"expected tokenizer.ggml.pre qwen2, found {v.pre}")
    llm = llama_cpp.Llama(model_path=v.path, vocab_only=True, verbose=False)
    hf = v.hf()
    # SpecLab's encode() always splits out control/user-defined tokens written in the text, so
    # every reference is taken with special parsing on (llama.cpp special=True; the added tokens
    # in `tokenizers`).
    texts = tokref.PLAIN_TEXTS + QWEN_TEXTS + tokref.SPECIAL_TEXTS
    texts += [c["expected"] for c in chat_cases if c["add_generation_prompt"]]
    records, disagree = [], 0
    for text in texts:
        ids_llama = list(llm.tokenize(text.encode("utf-8"), add_bos=v.add_bos, special=True))
        ids_hf = hf.encode(text, add_special_tokens=False).ids
        disagree += ids_llama != ids_hf
        records.append({"text": text, "llamacpp": ids_llama, "tokenizers": ids_hf})
    print(f"tokenizer: {len(records)} texts, llama.cpp and tokenizers disagree on {disagree}", file=sys.stderr)
    write_json(out_dir, "tokenizer.json", {
        "generator": "scripts/make_qwen_fixtures.py",
        "versions": versions(),
        "models": MODELS,
        "vocab_sha256": v.digest,
        "n_tokens": len(v.tokens),
        "pre": v.pre,
        "add_bos": v.add_bos,
        "note": "llamacpp: llama-cpp-python Llama(vocab_only=True).tokenize(text, add_bos, special); "
                "tokenizers: PyPI BPE from the GGUF vocab+merges, qwen2 regex Split + ByteLevel, "
                "control/user-defined tokens added as special; special-token parsing on for every text",
        "texts": records,
    })


# Tensors of each type in the pair (the first one of that type in file order).
def dequant_fixture(out_dir, models_dir):
    records = []
    seen = set()
    for key in ("1.5b", "0.5b"):
        r = gguf.GGUFReader(os.path.join(models_dir, MODELS[key]))
        for t in r.tensors:
            ty = t.tensor_type.name
            if ty not in ("Q4_K", "Q5_0", "Q6_K", "Q8_0") or ty in seen or len(t.shape) != 2:
                continue
            seen.add(ty)
            x = np.asarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
            bits = x.reshape(-1).view(np.uint32).astype(np.uint64)
            idx = np.arange(1, bits.size + 1, dtype=np.uint64)
            with np.errstate(over="ignore"):
                s1 = int(bits.sum(dtype=np.uint64))
                s2 = int((bits * idx).sum(dtype=np.uint64))
            records.append({
                "model": key, "tensor": t.name, "type": ty, "shape": list(x.shape),
                "rows": [[int(b) for b in x[i].view(np.uint32)] for i in range(2)],
                "bits_sum": str(s1), "bits_index_sum": str(s2),
            })
            print(f"dequant: {key} {t.name} {ty} {list(x.shape)}", file=sys.stderr)
    missing = {"Q4_K", "Q5_0", "Q6_K", "Q8_0"} - seen
    if missing:
        sys.exit(f"no 2-D tensor of type {sorted(missing)} in the pair")
    write_json(out_dir, "dequant.json", {
        "generator": "scripts/make_qwen_fixtures.py",
        "versions": versions(),
        "note": "rows: the first two rows (PyTorch order, float32 bit patterns as uint32) of "
                "gguf.quants.dequantize(tensor); bits_sum = sum of all float32 bit patterns mod 2^64, "
                "bits_index_sum = sum of (i+1) * bits[i] mod 2^64 over the flattened tensor",
        "tensors": records,
    })


def last_logits(llm):
    ptr = llm._ctx.get_logits_ith(-1)
    row = np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(llm.n_vocab(),))
    return row.astype(np.float64)


def greedy_fixture(vocabs, out_dir, models_dir):
    import time
    llama_cpp = import_llama_cpp()
    doc = {
        "generator": "scripts/make_qwen_fixtures.py",
        "versions": versions(),
        "settings": {"max_new_tokens": GREEDY_NEW_TOKENS, "n_threads": N_THREADS,
                     "selection": "argmax over the full logits row (ties: lowest id), computed in numpy",
                     "chat": "the GGUF's chat template (jinja2), one user message, add_generation_prompt"},
        "precision_note": "llama.cpp multiplies the Q4_K/Q5_0/Q6_K/Q8_0 weights with activations "
                          "quantized to 8 bits (Q8_K/Q8_0 dot products); SpecLab uses float32 activations. "
                          "Greedy paths may part where the top-1 minus top-2 margin is small.",
        "models": {},
    }
    for key in ("1.5b", "0.5b"):
        v = vocabs[key]
        llm = llama_cpp.Llama(model_path=v.path, n_ctx=1024, n_batch=512, n_threads=N_THREADS,
                              n_threads_batch=N_THREADS, seed=1234, verbose=False, logits_all=False)
        recs = []
        for p in GREEDY_PROMPTS:
            text = render(v.template, [{"role": "user", "content": p["user"]}])
            ids = list(llm.tokenize(text.encode("utf-8"), add_bos=v.add_bos, special=True))
            llm.reset()
            t0 = time.time()
            llm.eval(ids)
            steps = []
            for _ in range(GREEDY_NEW_TOKENS):
                z = last_logits(llm)
                order = np.argsort(-z, kind="stable")
                a, b = int(order[0]), int(order[1])
                steps.append({"token": a, "second": b, "margin": round(float(z[a] - z[b]), 5)})
                if a == v.eos:
                    break
                llm.eval([a])
            dt = time.time() - t0
            gen = [s["token"] for s in steps]
            out_text = llm.detokenize([t for t in gen if t != v.eos]).decode("utf-8", errors="replace")
            recs.append({"name": p["name"], "user": p["user"], "rendered": text, "prompt_ids": ids,
                         "tokens": gen, "steps": steps, "text": out_text})
            print(f"greedy {key} {p['name']}: {len(ids)} prompt ids, {len(gen)} tokens in {dt:.1f} s, "
                  f"min margin {min(s['margin'] for s in steps):.3f}: {out_text[:60]!r}", file=sys.stderr)
        doc["models"][key] = {"file": MODELS[key], "eos_id": v.eos, "prompts": recs}
        del llm
    write_json(out_dir, "llamacpp_greedy.json", doc)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", default=os.path.join(ROOT, ".cache", "models"))
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "fixtures", "qwen"))
    ap.add_argument("--only", default="tokenizer,chat,dequant,greedy")
    args = ap.parse_args()
    parts = set(args.only.split(","))
    vocabs = {k: Vocab(os.path.join(args.models_dir, f)) for k, f in MODELS.items()}
    v = vocabs["1.5b"]
    chat_cases = chat_fixture(vocabs, args.out) if parts & {"chat", "tokenizer"} else []
    if "tokenizer" in parts:
        tokenizer_fixture(vocabs, args.out, chat_cases)
    if "dequant" in parts:
        dequant_fixture(args.out, args.models_dir)
    if "greedy" in parts:
        greedy_fixture(vocabs, args.out, args.models_dir)


if __name__ == "__main__":
    main()
