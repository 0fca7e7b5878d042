"""Measure whole training steps of GPT models on one GPU (run on the lent H100): step time and peak memory.

Plain PyTorch: GPT-2-style layers (LayerNorm, QKV, causal SDPA, projection, LayerNorm, GeLU MLP),
tied embeddings, bf16 autocast over fp32 parameters (fp32 master weights and gradients), fused AdamW,
one micro-batch per step (forward, backward, optimizer step), no recompute or full recompute of every
layer (torch.utils.checkpoint); with ``--compile`` each block goes through torch.compile (Inductor
fuses its memory-bound kernels, as Megatron/Transformer Engine do by hand). Arguments ``NAME/MB`` pick
configurations. Times are medians of timed steps after warm-up (host clock around a
synchronized step). Writes step.csv to $OUT (or ./gpu_out); experiments/gpu/compare_step.py compares it
with cosearch.estimate. Needs PyTorch with CUDA; never run by the tests.
"""
from __future__ import annotations

import csv
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

OUT = Path(os.environ.get("OUT", "gpu_out"))
OUT.mkdir(parents=True, exist_ok=True)
VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 128 (Megatron-LM's habit)

#: (name, layers, hidden, heads, seq, micro-batch)
MODELS = [("gpt-350m", 24, 1024, 16, 2048, 8), ("gpt-760m", 24, 1536, 16, 2048, 4),
          ("gpt-1.3b", 24, 2048, 16, 2048, 4), ("gpt-1.3b", 24, 2048, 16, 2048, 8),
          ("gpt-2.7b", 32, 2560, 32, 2048, 2), ("gpt-2.7b", 32, 2560, 32, 2048, 4)]


class Block(torch.nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(h), torch.nn.LayerNorm(h)
        self.qkv = torch.nn.Linear(h, 3 * h)
        self.proj = torch.nn.Linear(h, h)
        self.fc1 = torch.nn.Linear(h, 4 * h)
        self.fc2 = torch.nn.Linear(4 * h, h)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, layers, h, heads, seq, recompute):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, h)
        self.pos = torch.nn.Embedding(seq, h)
        self.blocks = torch.nn.ModuleList(Block(h, heads) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(h)
        self.recompute = recompute

    def forward(self, idx):
        x = self.emb(idx) + self.pos.weight[: idx.shape[1]]
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False) if self.recompute else blk(x)
        return self.ln(x) @ self.emb.weight.t()  # tied output head


def run(name, layers, h, heads, seq, mb, recompute, compiled=False, steps=8, warm=3):
    torch.manual_seed(0)
    model = GPT(layers, h, heads, seq, recompute).cuda()
    if compiled:  # each block through torch.compile: its norms, GeLU, casts and adds fused by Inductor
        for blk in model.blocks:
            blk.compile()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    idx = torch.randint(0, VOCAB, (mb, seq), device="cuda")
    tgt = torch.randint(0, VOCAB, (mb, seq), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(idx)
        loss = F.cross_entropy(logits.float().view(-1, VOCAB), tgt.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ts = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t)
    ts.sort()
    params = sum(p.numel() for p in model.parameters())
    rec = dict(model=name, layers=layers, hidden=h, heads=heads, seq_len=seq, microbatch=mb,
               recompute="full" if recompute else "none", compiled=int(compiled), params=params, step_s=ts[len(ts) // 2],
               step_min_s=ts[0], peak_memory_gib=torch.cuda.max_memory_allocated() / 2**30)
    flops = 6 * params * mb * seq + 12 * layers * h * seq * seq * mb / 2  # model FLOPs (causal attention)
    rec["model_tflops"] = flops / rec["step_s"] / 1e12
    del model, opt
    torch.cuda.empty_cache()
    return rec


def main():
    p = torch.cuda.get_device_properties(0)
    print(p.name, "torch", torch.__version__, flush=True)
    compiled = "--compile" in sys.argv
    only = [a for a in sys.argv[1:] if not a.startswith("--")]
    rows = []
    for name, layers, h, heads, seq, mb in MODELS:
        if only and f"{name}/{mb}" not in only:
            continue
        for recompute in (False, True):
            try:
                rec = run(name, layers, h, heads, seq, mb, recompute, compiled)
            except torch.OutOfMemoryError as e:
                rec = dict(model=name, layers=layers, hidden=h, heads=heads, seq_len=seq, microbatch=mb,
                           recompute="full" if recompute else "none", error=f"OOM: {str(e)[:80]}")
                torch.cuda.empty_cache()
            rec["gpu"] = p.name
            print(rec, flush=True)
            rows.append(rec)
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(OUT / ("step_compiled.csv" if compiled else "step.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys); w.writeheader(); w.writerows(rows)


if __name__ == "__main__":
    main()
