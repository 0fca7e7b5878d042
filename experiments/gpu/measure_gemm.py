"""bf16 and fp8 GEMM throughput on the lent GPU (H100/H200), for the catalog's efficiencies.

For square-ish training shapes, times bf16 torch.matmul and fp8 (e4m3, per-tensor scaled)
torch._scaled_mm with CUDA events, median of repeats; also a large device-to-device copy for the
achievable HBM bandwidth. Writes gemm_<gpu>.csv to $OUT. Never run by the tests.
"""
from __future__ import annotations

import csv
import os
from pathlib import Path

import torch
from _timing import timeit  # experiments/gpu/_timing.py (the script's own folder is on sys.path)

OUT = Path(os.environ.get("OUT", "gpu_out"))
OUT.mkdir(parents=True, exist_ok=True)


def main():
    name = torch.cuda.get_device_name(0)
    tag = "h200" if "H200" in name else "h100"
    rows = []
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 8192, 8192), (8192, 12288, 49152 // 8),
              (16384, 4096, 16384), (4096, 8192, 28672 // 4), (16384, 16384, 16384), (2048, 4096, 4096)]
    for m, k, n in shapes:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        t16 = timeit(lambda: a @ b)
        a8 = a.to(torch.float8_e4m3fn)
        b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.ones((), device="cuda", dtype=torch.float32)
        try:
            t8 = timeit(lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))
        except Exception as err:  # noqa: BLE001
            print("fp8 failed:", err)
            t8 = float("nan")
        f = 2 * m * n * k
        rows.append(dict(gpu=name, m=m, k=k, n=n, bf16_s=t16, fp8_s=t8, bf16_tflops=f / t16 / 1e12, fp8_tflops=f / t8 / 1e12))
        print(rows[-1], flush=True)
    x = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    t = timeit(lambda: y.copy_(x))
    copy_tbps = 2 * x.numel() / t / 1e12
    print("copy TB/s (read+write):", copy_tbps)
    for r in rows:
        r["copy_tbps"] = copy_tbps
    with open(OUT / f"gemm_{tag}.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)


if __name__ == "__main__":
    main()
