"""Which backend PyTorch's scaled_dot_product_attention picks by default on the lent GPU, and how fast each runs.

torchtitan (and any PyTorch-native stack) calls ``F.scaled_dot_product_attention`` without choosing a backend;
cosearch maps that to ``training.attention: flash2`` (FlashAttention-2's rate) on the evidence that SDPA does
not pick cuDNN on H100 (pytorch/pytorch#142132, Dec 2024). This checks it on the installed PyTorch: the backend
``torch._fused_sdp_choice`` names for causal bf16 training shapes, and forward + backward times of the default
call against each backend forced (CUDA events, median of repeats after warm-up). Writes sdpa_default_backend.csv
to $OUT (or ./gpu_out). Needs PyTorch with CUDA; never run by the tests.
"""
from __future__ import annotations

import csv
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

OUT = Path(os.environ.get("OUT", "gpu_out"))
OUT.mkdir(parents=True, exist_ok=True)
DEV, BF16 = "cuda", torch.bfloat16
#: (name, batch, q heads, kv heads, seq, head_dim): Llama 3 8B / 70B-per-TP-rank / GPT-OSS-like shapes
SHAPES = [("llama3-8b", 1, 32, 8, 8192, 128), ("llama3-70b-tp8", 1, 8, 1, 8192, 128),
          ("hd128-4k", 2, 32, 32, 4096, 128), ("hd64-4k", 2, 64, 64, 4096, 64)]
BACKENDS = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}
NAMES = {int(getattr(SDPBackend, n)): n for n in ("ERROR", "MATH", "FLASH_ATTENTION", "EFFICIENT_ATTENTION",
                                                    "CUDNN_ATTENTION", "OVERRIDEABLE") if hasattr(SDPBackend, n)}


def time_fwd_bwd(q, k, v, backend, reps=20, warm=5):
    def run():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=k.shape[1] != q.shape[1])
        out.backward(torch.ones_like(out))
    ctx = sdpa_kernel([backend]) if backend is not None else torch.enable_grad()
    with ctx:
        for _ in range(warm):
            run()
        times = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            run()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    rows = []
    for name, b, hq, hkv, s, d in SHAPES:
        q = torch.randn(b, hq, s, d, device=DEV, dtype=BF16, requires_grad=True)
        k = torch.randn(b, hkv, s, d, device=DEV, dtype=BF16, requires_grad=True)
        v = torch.randn(b, hkv, s, d, device=DEV, dtype=BF16, requires_grad=True)
        try:
            choice = NAMES.get(int(torch._fused_sdp_choice(q, k, v, is_causal=True, enable_gqa=hkv != hq)), "?")
        except Exception as err:  # noqa: BLE001 - record what the installed PyTorch says
            choice = f"error: {type(err).__name__}"
        flop = 4 * b * hq * s * s * d / 2 * 3.5  # causal forward 2 GEMMs, backward 2.5x
        row = {"shape": name, "batch": b, "q_heads": hq, "kv_heads": hkv, "seq": s, "head_dim": d,
               "fused_sdp_choice": choice, "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
               "gpu": torch.cuda.get_device_name()}
        for label, backend in BACKENDS.items():
            try:
                t = time_fwd_bwd(q, k, v, backend)
                row[f"{label}_s"], row[f"{label}_tflops"] = t, flop / t / 1e12
            except Exception as err:  # noqa: BLE001
                row[f"{label}_s"], row[f"{label}_tflops"] = None, None
                print(name, label, type(err).__name__, str(err)[:120])
        rows.append(row)
        print(row)
    keys = sorted({k for r in rows for k in r}, key=lambda k: list(rows[0]).index(k) if k in rows[0] else 99)
    with open(OUT / "sdpa_default_backend.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)


if __name__ == "__main__":
    main()
