"""Measure one transformer layer and flash attention on a real GPU (run on the lent H100/H200).

Times, with CUDA events (median of repeated runs after warm-up), in bf16:
  * a GPT layer as Megatron computes it on one tensor-parallel rank (LayerNorm, QKV, causal flash
    attention via torch SDPA, output projection, LayerNorm, MLP with GeLU or SwiGLU), forward and
    forward+backward, for several hidden sizes, sequence lengths, micro-batches and TP widths;
  * causal flash attention alone, forward and forward+backward.
Writes layer.csv and attention.csv to $OUT (or ./gpu_out). experiments/gpu/compare_layer.py compares
them with the model. Needs PyTorch with CUDA; never run by the tests.
"""
from __future__ import annotations

import csv
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from _timing import timeit  # experiments/gpu/_timing.py (the script's own folder is on sys.path)

OUT = Path(os.environ.get("OUT", "gpu_out"))
OUT.mkdir(parents=True, exist_ok=True)
dev = "cuda"
dt = torch.bfloat16


class Layer(torch.nn.Module):
    def __init__(self, h, heads, kv_heads, ffn, gated, tp):
        super().__init__()
        self.hd = h // heads
        self.nh, self.nkv = heads // tp, max(kv_heads // tp, 1)
        self.ln1 = torch.nn.LayerNorm(h)
        self.qkv = torch.nn.Linear(h, (self.nh + 2 * self.nkv) * self.hd, bias=False)
        self.proj = torch.nn.Linear(self.nh * self.hd, h, bias=False)
        self.ln2 = torch.nn.LayerNorm(h)
        self.gated = gated
        self.fc1 = torch.nn.Linear(h, ffn // tp * (2 if gated else 1), bias=False)
        self.fc2 = torch.nn.Linear(ffn // tp, h, bias=False)

    def forward(self, x):  # x: [b, s, h]
        b, s, _ = x.shape
        y = self.qkv(self.ln1(x))
        q, k, v = y.split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], dim=-1)
        q = q.view(b, s, self.nh, self.hd).transpose(1, 2)
        k = k.view(b, s, self.nkv, self.hd).transpose(1, 2)
        v = v.view(b, s, self.nkv, self.hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.nkv != self.nh)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, -1))
        z = self.fc1(self.ln2(x))
        if self.gated:
            g, u = z.chunk(2, dim=-1)
            z = F.silu(g) * u
        else:
            z = F.gelu(z, approximate="tanh")
        return x + self.fc2(z)


LAYERS = [  # h, heads, kv_heads, ffn, gated, tp, seq, mb
    (2048, 16, 16, 8192, 0, 1, 2048, 4),
    (4096, 32, 32, 16384, 0, 1, 2048, 2),
    (4096, 32, 32, 16384, 0, 1, 2048, 8),
    (4096, 32, 8, 14336, 1, 1, 8192, 1),
    (5120, 40, 40, 20480, 0, 1, 2048, 4),
    (8192, 64, 8, 28672, 1, 4, 4096, 1),
    (8192, 64, 64, 32768, 0, 8, 2048, 1),
    (12288, 96, 96, 49152, 0, 8, 2048, 1),
    (12288, 96, 96, 49152, 0, 8, 2048, 4),
    (16384, 128, 8, 53248, 1, 8, 8192, 1),
    (4096, 32, 32, 16384, 0, 1, 16384, 1),
    (4096, 32, 32, 16384, 0, 1, 32768, 1),
]


def main():
    props = torch.cuda.get_device_properties(0)
    print(props.name, props.multi_processor_count, "SMs", flush=True)
    rows = []
    for h, heads, kvh, ffn, gated, tp, seq, mb in LAYERS:
        layer = Layer(h, heads, kvh, ffn, gated, tp).to(dev, dt)
        x = torch.randn(mb, seq, h, device=dev, dtype=dt, requires_grad=True)
        with torch.no_grad():
            t_f = timeit(lambda: layer(x), reps=10)

        def fb():
            layer(x).sum().backward()
        t_fb = timeit(fb, reps=10)
        rows.append(dict(gpu=props.name, hidden=h, heads=heads, kv_heads=kvh, ffn_hidden=ffn, gated_mlp=gated, tp=tp,
                         seq_len=seq, microbatch=mb, fwd_s=t_f, fwd_bwd_s=t_fb))
        print(rows[-1], flush=True)
        del layer, x
        torch.cuda.empty_cache()
    with open(OUT / "layer.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0])); w.writeheader(); w.writerows(rows)

    att = []
    for b, nh, s, d in [(8, 32, 2048, 128), (4, 32, 4096, 128), (1, 32, 16384, 128), (1, 32, 32768, 128), (2, 16, 8192, 128), (16, 16, 2048, 64)]:
        q = torch.randn(b, nh, s, d, device=dev, dtype=dt, requires_grad=True)
        k = torch.randn_like(q, requires_grad=True); v = torch.randn_like(q, requires_grad=True)
        with torch.no_grad():
            t_f = timeit(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), reps=10)
        t_fb = timeit(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward(), reps=10)
        flops_f = 4 * b * nh * s * s * d * 0.5  # causal
        att.append(dict(gpu=props.name, batch=b, heads=nh, seq=s, head_dim=d, fwd_s=t_f, fwd_bwd_s=t_fb,
                        fwd_tflops=flops_f / t_f / 1e12, fwd_bwd_tflops=3.5 * flops_f / t_fb / 1e12))
        print(att[-1], flush=True)
    with open(OUT / "attention.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(att[0])); w.writeheader(); w.writerows(att)


if __name__ == "__main__":
    main()
