"""cuBLAS through PyTorch on the shapes of a Llama-7B decode step (bf16): time per matmul and the
weight bytes it streams per second, for 1 and 16 activation rows. A reference for what the
model's matmuls can reach on this GPU (docs/gpu.md)."""
import time

import torch

for m in (1, 16):
    for n, k in ((12288, 4096), (4096, 4096), (22016, 4096), (4096, 11008), (32000, 4096)):
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            torch.nn.functional.linear(x, w)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(50):
            torch.nn.functional.linear(x, w)
        torch.cuda.synchronize()
        dt = (time.perf_counter() - t0) / 50
        print(f"rows {m:2d}  [{n:5d} x {k:5d}]  {dt * 1e6:7.1f} us  {n * k * 2 / dt / 1e9:6.0f} GB/s")
