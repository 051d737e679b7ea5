#!/usr/bin/env python3
"""The Qwen pair against llama.cpp, side by side in one run (tracker issue 17).

The figure a user cares about: SpecLab's speculative decode rate (Qwen2.5-Coder-0.5B drafting for
the 1.5B) divided by llama.cpp's plain AR decode rate on the 1.5B, on the same HumanEval prompts.

1. `speclab run` on a generated config: the first --prompts HumanEval prompts (chat template),
   greedy, --max-new tokens, AR and draft_model (gamma --gamma, LM head cut to --draft-vocab
   tokens; 0 = whole head), one warm-up prompt-run.
2. llama.cpp (PyPI llama-cpp-python) on the same GGUF: each prompt rendered with the same ChatML
   template (its token count must equal SpecLab's), prefilled, then greedy single-token steps
   for as many tokens as SpecLab's AR run produced. Its greedy tokens are compared with SpecLab's.
3. A table per prompt and the totals: decode tok/s = generated tokens / time after the prompt
   processing (the target's prefill; for speculative also the draft model's prefill of the prompt,
   as llama.cpp's speculative example counts it in its encode time), for SpecLab AR, SpecLab
   speculative and llama.cpp AR; the ratio speculative / llama.cpp AR. Then the same ratio end to
   end (prompt processing included on both sides).

Usage (from the repository root, after `make qwen-pair peer` and a build):
    /usr/bin/python3 experiments/pair_vs_llamacpp.py \
        [--speclab build/speclab] [--prompts 10] [--max-new 64] [--gamma 2] [--threads 2]
Needs h5py and numpy (Debian python3-h5py) and llama-cpp-python: the one on PYTHONPATH, else the
one `make peer` installs in .cache/peer (scripts/peer.py). Exit 2 on bad input.
"""
import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "analysis"))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

TARGET = os.path.join(ROOT, ".cache/models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
# The GGUF's chat template rendered for one user message and no tools (what SpecLab renders;
# tests/integration/test_qwen.cpp checks SpecLab's rendering against llama.cpp's).
SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."


def chatml(text):
    return (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{text}<|im_end|>\n"
            "<|im_start|>assistant\n")


CONFIG = """name: pair_vs_llamacpp
models:
  target: {{path: qwen2.5-coder-1.5b-instruct}}
  draft: {{path: qwen2.5-coder-0.5b-instruct}}
prompts:
  sources:
    - file: {humaneval}
      field: prompt
      id_field: task_id
      category: humaneval
      per_category: {prompts}
  chat: auto
drafters:
  - label: draft_model
    name: draft_model
    draft_vocab: {draft_vocab}
sweep:
  drafter.num_speculative_tokens: [{gamma}]
sampling: {{temperature: 0}}
generation: {{max_new_tokens: {max_new}}}
repeats: 1
warmup: 1
output: {{path: {out}}}
"""


def fail(msg):
    print(f"pair_vs_llamacpp: {msg}", file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speclab", default=os.path.join(ROOT, "build/speclab"))
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--gamma", type=int, default=2)
    ap.add_argument("--draft-vocab", type=int, default=65536)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--flash-attn", choices=["on", "off"], default="on",
                    help="llama.cpp's flash-attention kernel (default on: its faster setting on a 2-core "
                         "EPYC; it sums attention in another order, so near ties may pick other greedy tokens)")
    ap.add_argument("--datasets", default=os.path.join(ROOT, "..", "shared", "datasets"))
    args = ap.parse_args()
    if args.prompts <= 0 or args.max_new <= 0 or args.gamma <= 0 or args.threads <= 0 or args.draft_vocab < 0:
        fail("--prompts, --max-new, --gamma and --threads must be positive, --draft-vocab >= 0")
    humaneval = os.path.abspath(os.path.join(args.datasets, "humaneval.jsonl.gz"))
    for path, what in ((args.speclab, "--speclab"), (TARGET, "the 1.5B GGUF (make qwen-pair)"), (humaneval, "--datasets")):
        if not os.path.exists(path):
            fail(f"{what}: expected {path}, found nothing")
    try:
        from peer import import_llama_cpp
        llama_cpp = import_llama_cpp()
        from speclab_h5 import Experiment
    except ImportError as e:
        fail(f"needs llama-cpp-python, h5py and numpy: {e}")

    with tempfile.TemporaryDirectory() as tmp:
        cfg = os.path.join(tmp, "pair.yaml")
        out = os.path.join(tmp, "pair.h5")
        with open(cfg, "w") as f:
            f.write(CONFIG.format(humaneval=humaneval, prompts=args.prompts, draft_vocab=args.draft_vocab,
                                  gamma=args.gamma, max_new=args.max_new, out=out))
        print(f"[1/2] speclab run: {args.prompts} HumanEval prompts, AR + draft_model (gamma {args.gamma}, "
              f"draft_vocab {args.draft_vocab}), {args.max_new} new tokens, {args.threads} threads", flush=True)
        r = subprocess.run([args.speclab, "run", cfg, "--threads", str(args.threads), "--report-dir",
                            os.path.join(tmp, "report")], cwd=ROOT, stdout=subprocess.DEVNULL)
        if r.returncode != 0:
            fail(f"speclab run failed (exit {r.returncode})")
        exp = Experiment(out)
        runs = exp.runs
        prompts = exp.prompts
        rows = {}
        for i in range(exp.n_runs):
            # one prompt per run: llama.cpp below decodes the first turn's rendering only
            if int(runs["turns"][i]) > 1:
                fail(f"prompt {runs['prompt_id'][i]}: a conversation of {runs['turns'][i]} turns; "
                     "this comparison takes one-message prompts (prompts.field: turns.0)")
            rows[(int(runs["prompt"][i]), runs["method"][i])] = i

    print(f"[2/2] llama.cpp {llama_cpp.__version__} (flash attention {args.flash_attn}): AR greedy on the same prompts",
          flush=True)
    import numpy as np
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            llm = llama_cpp.Llama(model_path=TARGET, n_ctx=2048, n_batch=512, n_threads=args.threads,
                                  n_threads_batch=args.threads, verbose=False, logits_all=False,
                                  flash_attn=args.flash_attn == "on")
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    import ctypes
    vocab = llm.n_vocab()

    def argmax_last():
        ptr = llm._ctx.get_logits_ith(-1)
        return int(np.argmax(np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(vocab,))))

    # Warm-up (first-call allocations), as speclab run's warm-up prompt-run.
    llm.reset()
    llm.eval(llm.tokenize(chatml("def f():").encode(), add_bos=False, special=True))
    llm.eval([argmax_last()])

    hdr = f"{'prompt':<16} {'tokens':>6} {'SpecLab AR':>11} {'SpecLab spec':>13} {'llama.cpp AR':>13} {'spec/llama':>10} {'tau':>5} {'same tokens':>11}"
    print(hdr)
    print("-" * len(hdr))
    tot = {"ar": [0, 0.0], "spec": [0, 0.0], "lcpp": [0, 0.0]}
    wall = {"spec": 0.0, "lcpp": 0.0, "draft_prefill": 0.0}  # end to end: prompt processing + decode
    agree_all = 0
    for p in sorted({k[0] for k in rows}):
        ar, sp = rows.get((p, "ar")), rows.get((p, "draft_model"))
        if ar is None or sp is None:
            fail(f"prompt {p}: the run lacks its ar or draft_model row")
        n_prompt = int(runs["n_prompt_tokens"][ar])
        ids = llm.tokenize(chatml(prompts["text"][p]).encode(), add_bos=False, special=True)
        if len(ids) != n_prompt:
            fail(f"prompt {prompts['id'][p]}: llama.cpp renders {len(ids)} prompt tokens, SpecLab {n_prompt}")
        n_gen = int(runs["n_generated"][ar])
        llm.reset()
        t_pre = time.perf_counter()
        llm.eval(ids)
        tok = argmax_last()
        got = [tok]
        t0 = time.perf_counter()
        for _ in range(n_gen - 1):
            llm.eval([tok])
            tok = argmax_last()
            got.append(tok)
        lcpp_s = time.perf_counter() - t0
        lcpp_wall = time.perf_counter() - t_pre
        # SpecLab's decode_seconds covers every token after the prefill's first one likewise (and
        # after the draft model's own prefill of the prompt, which is prompt processing).
        ref = [int(t) for t in exp.run_tokens(ar)]
        same = 0
        while same < min(len(ref), len(got)) and ref[same] == got[same]:
            same += 1
        agree_all += same == n_gen
        rates = {}
        for key, row in (("ar", ar), ("spec", sp)):
            n, s = int(runs["n_generated"][row]) - 1, float(runs["decode_seconds"][row])
            tot[key][0] += n
            tot[key][1] += s
            rates[key] = n / s
        tot["lcpp"][0] += n_gen - 1
        tot["lcpp"][1] += lcpp_s
        wall["spec"] += float(runs["wall_seconds"][sp])
        wall["lcpp"] += lcpp_wall
        # the draft model's prefill: prompt processing beyond the target's (the ar run's) prefill
        wall["draft_prefill"] += float(runs["prefill_seconds"][sp]) - float(runs["prefill_seconds"][ar])
        rates["lcpp"] = (n_gen - 1) / lcpp_s
        tau = int(runs["n_generated"][sp]) / max(1, int(runs["target_forwards"][sp]) - 1)
        print(f"{prompts['id'][p]:<16} {n_gen:>6} {rates['ar']:>11.2f} {rates['spec']:>13.2f} {rates['lcpp']:>13.2f} "
              f"{rates['spec'] / rates['lcpp']:>10.2f} {tau:>5.2f} {same:>5}/{n_gen:<5}")
    r = {k: v[0] / v[1] for k, v in tot.items()}
    print("-" * len(hdr))
    print(f"{'all':<16} {tot['ar'][0]:>6} {r['ar']:>11.2f} {r['spec']:>13.2f} {r['lcpp']:>13.2f} {r['spec'] / r['lcpp']:>10.2f}")
    print(f"\nSpecLab speculative / llama.cpp AR (decode tok/s, same prompts, one run): {r['spec'] / r['lcpp']:.2f}x"
          f"  (target >= 1.3x)")
    print(f"SpecLab AR / llama.cpp AR: {r['ar'] / r['lcpp']:.2f}x; speculative / SpecLab AR: {r['spec'] / r['ar']:.2f}x")
    print(f"end to end (prompt processing + decode; SpecLab's includes the draft model's prefill, about "
          f"{wall['draft_prefill']:.2f} s over all prompts): SpecLab speculative {wall['spec']:.2f} s, llama.cpp AR "
          f"{wall['lcpp']:.2f} s -> {wall['lcpp'] / wall['spec']:.2f}x")
    print(f"greedy outputs identical to llama.cpp's on {agree_all} of {len(prompts['id'])} prompts"
          " (SpecLab's int8 activations with float32 block scales vs llama.cpp's Q8_K/Q8_0 rounding: divergence at"
          " a near-tie is not an error)")


if __name__ == "__main__":
    main()
