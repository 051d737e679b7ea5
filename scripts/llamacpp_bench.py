#!/usr/bin/env python3
"""llama.cpp throughput on a GGUF file, for `speclab bench` (experiments/speclab/cmd_bench.cpp).

Measures, with llama-cpp-python, on the same synthetic prompt SpecLab uses
(token i = 3 + (i*7919 + 13) % (vocab - 3)):
  prefill_tok_s  n_prompt tokens in one llama_decode batch, from an empty KV cache;
  decode_tok_s   n_decode single-token greedy steps after that prefill (argmax of the last logits);
  decode_at      {context: tok/s}: the same decode after a prefill of `context` tokens, for each
                 of --contexts (the KV cache holds `context` tokens when decoding starts).
Each is the best of --repeats runs.

--flash-attn best (the default) measures every figure with llama.cpp's flash-attention kernel off
and on, and reports the faster of the two per figure: SpecLab is compared with the peer's best
configuration. On a 2-core EPYC (SmolLM2 Q4_1) flash attention made llama.cpp's decode 5-10%
faster at context 64 and 10-27% faster at 2,048; llama-cpp-python's default is off.

Prints exactly one JSON line on stdout:
  {"version", "model", "decode_tok_s", "prefill_tok_s", "decode_at", "threads", "n_prompt", "n_decode",
   "flash_attn": the mode asked for, "flash_attn_used": {figure: bool}, which setting each figure
   came from ("decode", "prefill", and each context), "by_flash_attn": {"off"|"on": the figures}}
Errors go to stderr with a non-zero exit status (the caller then reports llama.cpp as unavailable).
"""
import argparse
import contextlib
import json
import os
import sys
import time


def synthetic_tokens(n, vocab):
    return [3 + (i * 7919 + 13) % (vocab - 3) for i in range(n)]


def last_logits(llm, vocab):
    """Logits of the last token of the last llama_decode batch, [vocab] float32 (a view).

    With logits_all=False llama-cpp-python does not copy logits into llm.scores, so they are
    read from the context directly (llama_get_logits_ith(ctx, -1)).
    """
    import ctypes
    import numpy as np
    ptr = llm._ctx.get_logits_ith(-1)
    return np.ctypeslib.as_array(ctypes.cast(ptr, ctypes.POINTER(ctypes.c_float)), shape=(vocab,))


def last_argmax(llm, vocab):
    import numpy as np
    return int(np.argmax(last_logits(llm, vocab)))


def measure(llama_cpp, args, n_ctx, flash_attn):
    """{"decode_tok_s", "prefill_tok_s", "decode_at"} with llama.cpp's flash attention on or off."""
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=n_ctx, n_batch=max(512, args.n_prompt),
                          n_ubatch=max(512, args.n_prompt), n_threads=args.threads,
                          n_threads_batch=args.threads, verbose=False, logits_all=False,
                          flash_attn=flash_attn)
    try:
        vocab = llm.n_vocab()

        def prefill_then_decode(n_prompt):
            """Best-of-repeats (prefill seconds, decode seconds) after n_prompt tokens."""
            prompt = synthetic_tokens(n_prompt, vocab)
            best_prefill = float("inf")
            best_decode = float("inf")
            for _ in range(args.repeats):
                llm.reset()  # n_tokens = 0; eval() then drops every cached position >= 0
                t0 = time.perf_counter()
                llm.eval(prompt)
                best_prefill = min(best_prefill, time.perf_counter() - t0)
                # Greedy decode: argmax of the last row of logits, one token per llama_decode.
                tok = last_argmax(llm, vocab)
                t0 = time.perf_counter()
                for _ in range(args.n_decode):
                    llm.eval([tok])
                    tok = last_argmax(llm, vocab)
                best_decode = min(best_decode, time.perf_counter() - t0)
            return best_prefill, best_decode

        best_prefill, best_decode = prefill_then_decode(args.n_prompt)
        decode_at = {}
        for c in args.contexts:
            decode_at[str(c)] = round(args.n_decode / prefill_then_decode(c)[1], 2)
        return {"decode_tok_s": round(args.n_decode / best_decode, 2),
                "prefill_tok_s": round(args.n_prompt / best_prefill, 2),
                "decode_at": decode_at}
    finally:
        if hasattr(llm, "close"):  # frees the model and context before the next setting loads
            llm.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--probe", action="store_true",
                    help="only import llama-cpp-python and print its version (exit 1 with the reason when it cannot)")
    ap.add_argument("--model", help="path to a .gguf file (required without --probe)")
    ap.add_argument("--n-prompt", type=int, default=128)
    ap.add_argument("--n-decode", type=int, default=64)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--contexts", type=int, nargs="*", default=[])
    ap.add_argument("--flash-attn", choices=["best", "on", "off"], default="best",
                    help="llama.cpp's flash-attention kernel: off, on, or both and the faster per figure")
    args = ap.parse_args()
    if args.probe:  # speclab bench --llama-cpp on: before any SpecLab figure is timed
        from peer import import_llama_cpp
        print(json.dumps({"version": import_llama_cpp().__version__}))
        return
    if not args.model:
        ap.error("--model is required")
    if args.n_prompt <= 0 or args.n_decode <= 0 or args.threads <= 0 or args.repeats <= 0:
        ap.error("--n-prompt, --n-decode, --threads and --repeats must be positive")
    if any(c <= 0 for c in args.contexts):
        ap.error("--contexts must be positive")
    n_ctx = max([args.n_prompt] + args.contexts) + args.n_decode + 16

    from peer import import_llama_cpp
    llama_cpp = import_llama_cpp()

    # llama.cpp's C code may log to stdout/stderr even with verbose=False; keep stdout clean
    # for the one JSON line by pointing fd 1 at stderr while the library runs.
    saved_stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            settings = {"best": [False, True], "on": [True], "off": [False]}[args.flash_attn]
            by_setting = {}
            for fa in settings:
                by_setting["on" if fa else "off"] = measure(llama_cpp, args, n_ctx, fa)
    finally:
        sys.stdout.flush()
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)

    # The faster setting per figure (rates: higher is better).
    def best(get):
        name = max(by_setting, key=lambda k: get(by_setting[k]))
        return get(by_setting[name]), name == "on"
    decode_tok_s, decode_fa = best(lambda f: f["decode_tok_s"])
    prefill_tok_s, prefill_fa = best(lambda f: f["prefill_tok_s"])
    used = {"decode": decode_fa, "prefill": prefill_fa}
    decode_at = {}
    for c in args.contexts:
        decode_at[str(c)], used[str(c)] = best(lambda f: f["decode_at"][str(c)])

    out = {
        "version": llama_cpp.__version__,
        "model": os.path.abspath(args.model),
        "decode_tok_s": decode_tok_s,
        "prefill_tok_s": prefill_tok_s,
        "decode_at": decode_at,
        "flash_attn": args.flash_attn,
        "flash_attn_used": used,
        "by_flash_attn": by_setting,
        "threads": args.threads,
        "n_prompt": args.n_prompt,
        "n_decode": args.n_decode,
    }
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
