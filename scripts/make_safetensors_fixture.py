#!/usr/bin/env python3
"""Writes the safetensors fixtures read by tests/unit/test_safetensors.cpp.

The files are written by the reference implementation (the `safetensors` PyPI package, whose
Rust core lays out the header, padding and tensor order; its header metadata order may vary between runs), so the C++ reader and writer are
checked against an outside implementation:

  tiny.safetensors       mixed dtypes (F32, F16, BF16, I64, an empty F32) plus metadata;
                         the C++ reader must decode every supported value exactly.
  tiny_f16.safetensors   one dtype (F16, converted from `src` by numpy, round to nearest even);
                         the C++ writer, given the float32 `src` values, must produce the same bytes.
  tiny_bf16.safetensors  one dtype (BF16, values exactly representable); same byte check.

Usage: python3 scripts/make_safetensors_fixture.py [out_dir]
(default out_dir: tests/fixtures/safetensors). Needs `pip install safetensors numpy`.
"""
import os
import sys

import numpy as np
from safetensors import TensorSpec, serialize
from safetensors.numpy import save_file

# float32 values chosen to exercise float32 -> float16 rounding: ties to even, subnormals,
# overflow to inf, signed zero and NaN. The C++ test lists the same values.
SRC = np.array(
    [
        1.0,
        1.0 + 2.0**-11,  # tie -> 1.0 (even)
        1.0 + 3 * 2.0**-11,  # tie -> 1 + 2^-9 (even)
        65504.0,  # largest half
        65519.0,  # rounds down to 65504
        65520.0,  # tie -> inf
        -70000.0,  # -> -inf
        2.0**-24,  # smallest subnormal half
        2.0**-25,  # tie -> 0
        3 * 2.0**-26,  # -> 2^-24
        -0.0,
        0.1,
        float("nan"),
        1.0 / 3.0,
        2.0**-14 - 2.0**-26,  # just below the smallest normal half, rounds up to it
    ],
    dtype=np.float32,
).reshape(3, 5)

# bfloat16 values exactly representable (their float32 bits end in 16 zero bits).
BF16_VALUES = np.array([1.0, -2.5, 0.15625, 2.0**127, -(2.0**-130), 448.0], dtype=np.float32)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """bfloat16 bits of float32 values that are exactly representable in bfloat16."""
    bits = values.astype(np.float32).view(np.uint32)
    assert not np.any(bits & 0xFFFF), "values must be bfloat16-exact"
    return (bits >> 16).astype(np.uint16)


def round_bf16(values: np.ndarray) -> np.ndarray:
    """Truncates float32 values to bfloat16-exact float32 values."""
    return (values.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)


def spec(name_to_array, bf16_names=()):
    """TensorSpecs for safetensors.serialize; arrays in bf16_names hold bf16 bits as uint16."""
    specs = {}
    for name, arr in name_to_array.items():
        arr = np.ascontiguousarray(arr)
        dtype = "bfloat16" if name in bf16_names else arr.dtype.name
        specs[name] = TensorSpec(dtype=dtype, shape=list(arr.shape), data_ptr=arr.ctypes.data,
                                 data_len=arr.nbytes)
    return specs


def main() -> None:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "safetensors")
    os.makedirs(out_dir, exist_ok=True)

    with np.errstate(over="ignore"):  # 65520 and -70000 overflow to inf on purpose
        src_f16 = SRC.astype(np.float16)
    bf16 = round_bf16(BF16_VALUES).reshape(2, 3)
    assert np.array_equal(bf16.reshape(-1), BF16_VALUES)
    arrays = {
        "src": SRC,
        "half": src_f16,
        "bf16": bf16_bits(bf16).reshape(2, 3),
        "i64": np.array([7, -3], dtype=np.int64),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    data = serialize(spec(arrays, bf16_names=("bf16",)),
                     metadata={"format": "pt", "note": "speclab fixture"})
    with open(os.path.join(out_dir, "tiny.safetensors"), "wb") as f:
        f.write(bytes(data))

    # Single-dtype files for the writer's byte-for-byte check.
    save_file(
        {
            "b.weight": src_f16,
            "a.bias": src_f16[0],
            "scalar": np.array(src_f16[1, 1]),
        },
        os.path.join(out_dir, "tiny_f16.safetensors"),
        metadata={"format": "pt"},
    )
    data = serialize(spec({"x": bf16_bits(bf16).reshape(3, 2)}, bf16_names=("x",)),
                     metadata={"format": "pt"})
    with open(os.path.join(out_dir, "tiny_bf16.safetensors"), "wb") as f:
        f.write(bytes(data))


if __name__ == "__main__":
    main()
