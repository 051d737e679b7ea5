#!/usr/bin/env python3
"""Reference outputs of the `gguf` Python package (PyPI) for SpecLab's GGUF tests.

The C++ reader, dequantizer, quantizer and writer (models/loaders/gguf.h, dequant.h) are
checked against these files, so that the tests compare with an outside implementation:

  tests/fixtures/gguf/smollm2_reference.json
      For several tensors of the real SmolLM2-135M-Instruct Q4_1 file, gguf.quants.dequantize
      results: name, type, shape (PyTorch order), count, sum, sum of squares, the first 64
      values and 64 values at a pseudo-random stride; the start of two q rows and one k row
      after HF's un-permutation (the inverse of convert_hf_to_gguf.py's `permute`); header
      facts and some metadata values; GGML_QUANT_SIZES; the package version.
  tests/fixtures/gguf/python_writer.gguf
      Written by gguf.GGUFWriter: one metadata value of every type (nested array, custom
      alignment 64) and F32/F16/Q8_0/Q4_0/Q4_1 tensors of known values (quantized with
      gguf.quants.quantize), each quantized tensor followed by "<name>.dequant" (F32, what
      gguf.quants.dequantize makes of it). SpecLab's writer must reproduce it byte for byte.
  tests/fixtures/gguf/python_dequant.gguf
      Random blocks of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q5_0, Q5_1, IQ4_NL, IQ4_XS, BF16 and F16 (scale fields set
      to finite values), each followed by "<name>.expected" (F32, gguf.quants.dequantize), plus
      one IQ2_XXS block that SpecLab must refuse to decode.

Usage:
  python3 scripts/make_gguf_reference.py [--model PATH] [--out DIR]   # regenerate fixtures
  python3 scripts/make_gguf_reference.py --check-cpp FILE             # verify a file written
                                                                      # by SpecLab's write_gguf
The test_gguf binary writes its copy to <build>/tests/gguf_cpp_written.gguf.
"""
import argparse
import json
import os
import sys
from importlib.metadata import version as package_version

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(ROOT, "tests/fixtures/gguf")

# ---- known tensor values, reproduced exactly by tests/unit/test_gguf.cpp ----------------------


def known_values(n: int, salt: int) -> np.ndarray:
    """Element i: block 2 (i in [64, 96)) is 0, block 3 is 1.25, else a rational in [-2.52, 2.52]."""
    out = np.empty(n, dtype=np.float32)
    for i in range(n):
        if 64 <= i < 96:
            v = 0.0
        elif 96 <= i < 128:
            v = 1.25
        else:
            v = (((i * 7919 + salt * 104729) % 2001) - 1000) / 397.0
        out[i] = np.float32(v)
    return out


# (name, type, shape in PyTorch order, salt)
WRITER_TENSORS = [
    ("t.f32", T.F32, (2, 64), 1),
    ("t.f16", T.F16, (4, 64), 2),
    ("t.q8_0", T.Q8_0, (4, 64), 3),
    ("t.q4_0", T.Q4_0, (4, 64), 4),
    ("t.q4_1", T.Q4_1, (2, 2, 64), 5),
]


def add_writer_metadata(w: "gguf.GGUFWriter") -> None:
    w.add_custom_alignment(64)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.1)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "h\u00e9llo \u2713")
    w.add_uint64("test.u64", 2**63 + 5)
    w.add_int64("test.i64", -(2**62))
    w.add_float64("test.f64", 0.1)
    w.add_array("test.arr_str", ["a", "", "\u0120The"])
    w.add_array("test.arr_i32", [1, -2, 3])
    w.add_array("test.arr_f32", [0.5, -1.25])
    w.add_key_value("test.arr_u8", [0, 255, 7], V.ARRAY, sub_type=V.UINT8)
    w.add_array("test.arr_nested", [[1, 2], [3]])


def write_python_writer_file(path: str) -> None:
    w = gguf.GGUFWriter(path, "speclabtest")
    add_writer_metadata(w)
    for name, qtype, shape, salt in WRITER_TENSORS:
        x = known_values(int(np.prod(shape)), salt).reshape(shape)
        if qtype == T.F32:
            w.add_tensor(name, x)
            continue
        q = gguf.quants.quantize(x, qtype)
        if qtype == T.F16:
            w.add_tensor(name, q)
        else:
            w.add_tensor(name, q, raw_dtype=qtype)
        w.add_tensor(name + ".dequant", gguf.quants.dequantize(q, qtype).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---- random blocks of the decode-only types ------------------------------------------------------

# Byte offsets of the f16 scale fields inside one block (ggml block layouts).
F16_FIELDS = {
    T.Q2_K: [80, 82],
    T.Q3_K: [108],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.IQ4_NL: [0],
    T.IQ4_XS: [0],
}


def random_blocks(rng: np.random.Generator, qtype: T, n_blocks: int) -> np.ndarray:
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        scale = rng.uniform(-0.05, 0.05, size=n_blocks).astype(np.float16)
        raw[:, off:off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
    return raw


def write_python_dequant_file(path: str) -> None:
    rng = np.random.default_rng(20240607)
    w = gguf.GGUFWriter(path, "speclabtest")
    for qtype in [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.Q5_0, T.Q5_1, T.IQ4_NL, T.IQ4_XS]:
        block_size, _ = gguf.GGML_QUANT_SIZES[qtype]
        n_blocks = 3 if block_size == 256 else 8
        rows = 1 if block_size == 256 else 2
        raw = random_blocks(rng, qtype, n_blocks).reshape(rows, -1)
        name = "r." + qtype.name.lower()
        w.add_tensor(name, raw, raw_dtype=qtype)
        w.add_tensor(name + ".expected", gguf.quants.dequantize(raw, qtype).astype(np.float32))
    x = rng.standard_normal((2, 32)).astype(np.float32) * 3
    bf16 = gguf.quants.quantize(x, T.BF16)  # uint8 bytes
    w.add_tensor("r.bf16", bf16, raw_dtype=T.BF16)
    w.add_tensor("r.bf16.expected", gguf.quants.dequantize(bf16, T.BF16).astype(np.float32))
    f16 = np.concatenate([x.astype(np.float16).ravel(),
                          np.array([6e-8, -6e-8, 65504, 1e-5, 0, -0.0], dtype=np.float16),
                          np.zeros(26, dtype=np.float16)]).reshape(3, 32)
    w.add_tensor("r.f16", f16)
    w.add_tensor("r.f16.expected", gguf.quants.dequantize(f16.view(np.uint8), T.F16).astype(np.float32))
    iq = rng.integers(0, 256, size=(1, gguf.GGML_QUANT_SIZES[T.IQ2_XXS][1]), dtype=np.uint8)
    w.add_tensor("r.iq2_xxs", iq, raw_dtype=T.IQ2_XXS)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---- the real model ---------------------------------------------------------------------------

REFERENCE_TENSORS = [
    "token_embd.weight",       # Q8_0 [49152, 576]
    "blk.0.attn_q.weight",     # Q4_1 [576, 576]
    "blk.0.attn_k.weight",     # Q4_1 [192, 576]
    "blk.7.attn_v.weight",     # Q4_1 [192, 576]
    "blk.0.ffn_gate.weight",   # Q4_1 [1536, 576]
    "blk.29.ffn_up.weight",    # Q4_1 [1536, 576]
    "blk.0.ffn_down.weight",   # Q4_1 [576, 1536]
    "blk.0.attn_norm.weight",  # F32  [576]
    "output_norm.weight",      # F32  [576]
]
STRIDE_SAMPLES = 64


def stride_indices(count: int) -> list:
    # A prime stride (mod count) visits scattered elements across the whole tensor.
    return [(k * 1000003 + 12345) % count for k in range(STRIDE_SAMPLES)]


def unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of convert_hf_to_gguf.py LlamaModel.permute (GGUF interleaved -> HF rotate_half)."""
    rows = w.shape[0]
    return (w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:])
             .swapaxes(1, 2)
             .reshape(w.shape))


def floats(a) -> list:
    return [float(v) for v in np.asarray(a, dtype=np.float32).ravel()]


def make_model_reference(model: str) -> dict:
    r = gguf.GGUFReader(model)
    by_name = {t.name: t for t in r.tensors}

    def field(key):
        return r.fields[key].contents()

    out = {
        "gguf_package_version": package_version("gguf"),
        "numpy_version": np.__version__,
        "file": os.path.basename(model),
        "file_size": os.path.getsize(model),
        "version": int(field("GGUF.version")),
        "tensor_count": len(r.tensors),
        "kv_count": int(field("GGUF.kv_count")),
        "data_offset": int(r.data_offset),
        "type_counts": {},
        "tensor_data_bytes": int(sum(int(t.n_bytes) for t in r.tensors)),
        "metadata": {
            "general.architecture": field("general.architecture"),
            "llama.block_count": int(field("llama.block_count")),
            "llama.context_length": int(field("llama.context_length")),
            "llama.embedding_length": int(field("llama.embedding_length")),
            "llama.feed_forward_length": int(field("llama.feed_forward_length")),
            "llama.attention.head_count": int(field("llama.attention.head_count")),
            "llama.attention.head_count_kv": int(field("llama.attention.head_count_kv")),
            "llama.rope.freq_base": float(field("llama.rope.freq_base")),
            "llama.attention.layer_norm_rms_epsilon": float(field("llama.attention.layer_norm_rms_epsilon")),
            "tokenizer.ggml.model": field("tokenizer.ggml.model"),
            "tokenizer.ggml.pre": field("tokenizer.ggml.pre"),
            "tokenizer.ggml.bos_token_id": int(field("tokenizer.ggml.bos_token_id")),
            "tokenizer.ggml.eos_token_id": int(field("tokenizer.ggml.eos_token_id")),
            "tokenizer.ggml.tokens.count": len(r.fields["tokenizer.ggml.tokens"].data),
            "tokenizer.ggml.tokens[0:5]": field("tokenizer.ggml.tokens")[:5],
            "tokenizer.ggml.tokens[-1]": field("tokenizer.ggml.tokens")[-1],
            "tokenizer.ggml.merges.count": len(r.fields["tokenizer.ggml.merges"].data),
            "tokenizer.ggml.merges[0]": field("tokenizer.ggml.merges")[0],
            "tokenizer.ggml.token_type[0:3]": [int(v) for v in field("tokenizer.ggml.token_type")[:3]],
            "tokenizer.chat_template.length": len(field("tokenizer.chat_template").encode("utf-8")),
        },
        "tensors": [],
        "unpermuted_rows": [],
        # [block size, bytes per block] of every type the package knows.
        "ggml_quant_sizes": {t.name: [int(b), int(s)] for t, (b, s) in gguf.GGML_QUANT_SIZES.items()},
    }
    for t in r.tensors:
        out["type_counts"][t.tensor_type.name] = out["type_counts"].get(t.tensor_type.name, 0) + 1

    for name in REFERENCE_TENSORS:
        t = by_name[name]
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        flat = x.ravel()
        x64 = flat.astype(np.float64)
        idx = stride_indices(flat.size)
        out["tensors"].append({
            "name": name,
            "type": t.tensor_type.name,
            "shape": [int(d) for d in x.shape],
            "count": int(flat.size),
            "sum": float(x64.sum()),
            "sum_sq": float((x64 * x64).sum()),
            "first": floats(flat[:64]),
            "stride_indices": idx,
            "stride_values": floats(flat[idx]),
        })

    heads = int(field("llama.attention.head_count"))
    kv_heads = int(field("llama.attention.head_count_kv"))
    for name, n_heads, rows in [("blk.0.attn_q.weight", heads, [1, 40]),
                                ("blk.0.attn_k.weight", kv_heads, [5])]:
        t = by_name[name]
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
        hf = unpermute(x, n_heads)
        for row in rows:
            # The first 96 values identify the row (un-permuting moves whole rows).
            out["unpermuted_rows"].append({"tensor": name, "n_heads": n_heads, "row": row,
                                           "values": floats(hf[row][:96])})
    return out


# ---- checking a file written by SpecLab --------------------------------------------------------


def check_cpp_file(path: str, fixture_dir: str) -> int:
    """Reads `path` with gguf.GGUFReader and compares it with python_writer.gguf."""
    got = gguf.GGUFReader(path)
    want = gguf.GGUFReader(os.path.join(fixture_dir, "python_writer.gguf"))
    problems = []
    gk = {k: f for k, f in got.fields.items()}
    wk = {k: f for k, f in want.fields.items()}
    if list(gk) != list(wk):
        problems.append(f"keys differ: {list(gk)} vs {list(wk)}")
    for k in wk:
        if k in gk and (gk[k].types != wk[k].types or gk[k].contents() != wk[k].contents()):
            problems.append(f"{k}: {gk[k].types} {gk[k].contents()!r} vs {wk[k].types} {wk[k].contents()!r}")
    if [t.name for t in got.tensors] != [t.name for t in want.tensors]:
        problems.append("tensor names differ")
    for g, w in zip(got.tensors, want.tensors):
        if g.tensor_type != w.tensor_type or list(g.shape) != list(w.shape):
            problems.append(f"{g.name}: {g.tensor_type.name} {list(g.shape)} vs {w.tensor_type.name} {list(w.shape)}")
            continue
        gd = gguf.quants.dequantize(g.data, g.tensor_type)
        wd = gguf.quants.dequantize(w.data, w.tensor_type)
        if not np.array_equal(gd, wd):
            problems.append(f"{g.name}: dequantized values differ (max |diff| {np.abs(gd - wd).max()})")
    if got.alignment != want.alignment:
        problems.append(f"alignment {got.alignment} vs {want.alignment}")
    for p in problems:
        print("MISMATCH:", p)
    print(f"{path}: gguf {package_version('gguf')} read {len(got.fields)} fields and "
          f"{len(got.tensors)} tensors; {'OK' if not problems else 'FAILED'}")
    return 1 if problems else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--check-cpp", metavar="FILE")
    args = ap.parse_args()
    if args.check_cpp:
        return check_cpp_file(args.check_cpp, args.out)
    os.makedirs(args.out, exist_ok=True)
    write_python_writer_file(os.path.join(args.out, "python_writer.gguf"))
    write_python_dequant_file(os.path.join(args.out, "python_dequant.gguf"))
    ref = make_model_reference(args.model)
    with open(os.path.join(args.out, "smollm2_reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}: gguf {ref['gguf_package_version']}, {len(ref['tensors'])} reference tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
