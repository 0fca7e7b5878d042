"""Measure the kernels of a Mixture-of-Experts layer on the lent GPU (H100/H200): grouped expert GEMMs,
the attention variants of today's MoE models, token permutation and the router.

Times, with CUDA events (median of repeats after warm-up), bf16 unless said:
  * grouped GEMMs (``torch._grouped_mm``) of each MoE preset's expert shapes, for several local expert
    counts (experts / EP) and tokens per expert, queued back to back (and the forward one at a time, to
    see host overhead): forward fc1 (h -> fe, or 2 fe gated) and fc2 (fe -> h),
    and the two backward products (data gradient, and the weight gradient grouped along K), beside one
    dense GEMM of the same total shape (what cosearch's ``GROUPED_GEMM_RELATIVE`` compares with) and,
    where it runs, fp8 rowwise-scaled ``torch._scaled_grouped_mm``;
  * fused causal attention for head_dim 64 (GPT-OSS: 64 query / 8 KV heads), 96, 128, 256 and DeepSeek
    MLA (q/k head_dim 192, v 128): SDPA with each backend it offers (flash, cuDNN, memory-efficient) and
    FlexAttention, full and with sliding windows (GPT-OSS's 128 in alternate layers), forward and
    forward + backward, launches queued back to back (and one at a time, to see host overhead);
  * token permute (gather) and unpermute (scatter-add, or gather then sum of the k copies) of top-k
    copies, against a plain copy;
  * the router (h -> E logits, softmax, top-k).
Writes grouped_gemm.csv, moe_attention.csv, moe_elementwise.csv and a log to $OUT (or ./gpu_out).
experiments/gpu/compare_moe.py compares them with the model. Needs PyTorch with CUDA; never run by
the tests. Each case is tried on its own: a kernel the installed PyTorch lacks is logged and skipped.
"""
from __future__ import annotations

import csv
import os
import traceback
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from _timing import timeit as _timeit  # experiments/gpu/_timing.py (the script's own folder is on sys.path)
from _timing import timeit_queued

OUT = Path(os.environ.get("OUT", "gpu_out"))
OUT.mkdir(parents=True, exist_ok=True)
DEV, BF16 = "cuda", torch.bfloat16

#: (preset, hidden, expert_ffn_hidden, gated, experts): public configs, as in cosearch/data/models.yaml
EXPERT_SHAPES = [
    ("qwen3-30b-a3b", 2048, 768, 1, 128),
    ("qwen3-235b-a22b", 4096, 1536, 1, 128),
    ("gpt-oss", 2880, 2880, 1, 32),
    ("deepseek-v3", 7168, 2048, 1, 256),
    ("mixtral-8x7b", 4096, 14336, 1, 8),
]
#: local experts per GPU (experts / EP) and token copies per local expert to try
LOCAL_EXPERTS = {"qwen3-30b-a3b": (16, 4), "qwen3-235b-a22b": (16, 4), "gpt-oss": (4, 16),
                 "deepseek-v3": (8, 4), "mixtral-8x7b": (1, 2)}
TOKENS_PER_EXPERT = (128, 256, 512, 1024, 2048, 4096)


timeit = partial(_timeit, reps=20, warm=4)  # one launch at a time: host overhead included


def offsets(groups, m):
    return torch.arange(1, groups + 1, device=DEV, dtype=torch.int32) * m


def rel_err(x, ref):
    return float((x.float() - ref.float()).norm() / ref.float().norm())


def attempt(rec, key, fn):
    """rec[key] = fn(), or the error under ``key + '_error'`` (a kernel this PyTorch lacks is skipped)."""
    try:
        rec[key] = fn()
    except Exception as e:  # noqa: BLE001
        rec[key + "_error"] = f"{type(e).__name__}: {str(e)[:160]}"


def grouped_rows():
    rows = []
    gm = getattr(torch, "_grouped_mm", None)
    sgm = getattr(torch, "_scaled_grouped_mm", None)
    for name, h, fe, gated, _experts in EXPERT_SHAPES:
        n1 = fe * (1 + gated)
        for groups in LOCAL_EXPERTS[name]:
            for m in TOKENS_PER_EXPERT:
                if groups * m * max(h, n1) * 2 > 6e9:
                    continue
                offs = offsets(groups, m)
                for gemm, (k, n) in (("fc1", (h, n1)), ("fc2", (fe, h))):
                    rec = dict(preset=name, hidden=h, expert_ffn_hidden=fe, gated=gated, groups=groups,
                               tokens_per_expert=m, gemm=gemm, k=k, n=n)
                    x = torch.randn(groups * m, k, device=DEV, dtype=BF16)
                    w = torch.randn(groups, n, k, device=DEV, dtype=BF16) / k ** 0.5  # [G, N, K] like nn.Linear
                    dy = torch.randn(groups * m, n, device=DEV, dtype=BF16)
                    flops = 2.0 * groups * m * n * k
                    rec["gflop"] = flops / 1e9
                    attempt(rec, "dense_s", lambda: timeit_queued(lambda: x @ w[0].t()))  # one [G*m, k] x [k, n] GEMM
                    if gm is not None:
                        def check():
                            y = gm(x, w.transpose(-2, -1), offs=offs)
                            ref = torch.cat([x[i * m:(i + 1) * m].float() @ w[i].float().t() for i in range(groups)])
                            return rel_err(y, ref)
                        attempt(rec, "check_rel_err", check)
                        attempt(rec, "fwd_s", lambda: timeit_queued(lambda: gm(x, w.transpose(-2, -1), offs=offs)))
                        attempt(rec, "fwd_single_s", lambda: timeit(lambda: gm(x, w.transpose(-2, -1), offs=offs)))
                        # data gradient: dx = dy @ W  -> [G*m, n] x [G, n, k]
                        attempt(rec, "dgrad_s", lambda: timeit_queued(lambda: gm(dy, w, offs=offs)))
                        # weight gradient: dW_g = dy_g^T x_g, grouped along the token (K) dimension
                        attempt(rec, "wgrad_s", lambda: timeit_queued(lambda: gm(dy.t(), x, offs=offs)))
                    if groups <= 16 and m == 1024:
                        ws = [w[i].t() for i in range(groups)]
                        attempt(rec, "loop_fwd_s", lambda: timeit_queued(lambda: [x[i * m:(i + 1) * m] @ ws[i] for i in range(groups)]))
                    if sgm is not None:
                        def fp8():
                            xf, wf = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
                            sa = torch.ones(groups * m, device=DEV, dtype=torch.float32)
                            sb = torch.ones(groups, n, device=DEV, dtype=torch.float32)
                            return timeit_queued(lambda: sgm(xf, wf.transpose(-2, -1), sa, sb, offs=offs, out_dtype=BF16))
                        attempt(rec, "fp8_fwd_s", fp8)
                    for key in ("dense_s", "fwd_s", "dgrad_s", "wgrad_s", "fp8_fwd_s"):
                        if key in rec:
                            rec[key[:-2] + "_tflops"] = flops / rec[key] / 1e12
                    print({k2: (round(v, 6) if isinstance(v, float) else v) for k2, v in rec.items()}, flush=True)
                    rows.append(rec)
                    del x, w, dy
                torch.cuda.empty_cache()
    return rows


def attention_rows():
    """Fused attention, forward and forward + backward, queued back to back: SDPA with each backend it
    offers (flash, cuDNN, memory-efficient), and FlexAttention causal and with sliding windows."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    rows = []
    try:
        import torch._dynamo
        torch._dynamo.config.recompile_limit = 10_000
        torch._dynamo.config.cache_size_limit = 10_000
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        flex = torch.compile(flex_attention, dynamic=False)
    except Exception as e:  # noqa: BLE001
        print("flex_attention unavailable:", e, flush=True)
        flex = create_block_mask = None

    def windowed(w):
        def mod(b, h, q, kv):
            return (q >= kv) & (q - kv < w)
        return mod

    # (model, batch, q heads, kv heads, seq, qk head_dim, v head_dim, windows for flex)
    cases = [("gpt-oss", 1, 64, 8, 4096, 64, 64, (0, 128)), ("gpt-oss", 4, 64, 8, 4096, 64, 64, (0, 128)),
             ("hd64", 2, 32, 32, 4096, 64, 64, (0, 128, 1024)), ("hd96", 2, 32, 32, 4096, 96, 96, ()),
             ("hd128", 2, 32, 32, 4096, 128, 128, (0, 128, 1024)), ("hd128-8k", 1, 32, 8, 8192, 128, 128, (0, 4096)),
             ("hd256", 2, 16, 16, 4096, 256, 256, ()), ("deepseek-mla", 1, 128, 128, 4096, 192, 128, (0,)),
             ("deepseek-mla-tp8", 2, 16, 16, 4096, 192, 128, ())]
    backends = [("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION),
                ("sdpa_efficient", SDPBackend.EFFICIENT_ATTENTION)]
    for model, b, hq, hkv, s, dqk, dv, windows in cases:
        q = torch.randn(b, hq, s, dqk, device=DEV, dtype=BF16, requires_grad=True)
        k = torch.randn(b, hkv, s, dqk, device=DEV, dtype=BF16, requires_grad=True)
        v = torch.randn(b, hkv, s, dv, device=DEV, dtype=BF16, requires_grad=True)
        go = torch.randn(b, hq, s, dv, device=DEV, dtype=BF16)
        gqa = hkv != hq
        variants = [(name, be, 0) for name, be in backends]
        if flex is not None:
            variants += [("flex", None, w) for w in windows]
        for kind, backend, w in variants:
            win = w if w else s
            pairs = sum(min(i + 1, win) for i in range(s))          # query-key pairs a causal (windowed) layer needs
            flops = 2.0 * b * hq * (dqk + dv) * pairs
            rec = dict(model=model, batch=b, q_heads=hq, kv_heads=hkv, seq=s, qk_head_dim=dqk, v_head_dim=dv,
                       kernel=kind, window=w, gflop_fwd=flops / 1e9)
            try:
                if backend is not None:
                    def f(backend=backend):
                        with sdpa_kernel([backend]):
                            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
                else:
                    bm = create_block_mask(windowed(win), None, None, s, s, device=DEV)

                    def f(bm=bm):
                        return flex(q, k, v, block_mask=bm, enable_gqa=gqa)
                with torch.no_grad():
                    rec["fwd_s"] = timeit_queued(f)
                    rec["fwd_single_s"] = timeit(f, reps=9)

                def fb():
                    f().backward(go)
                rec["fwd_bwd_s"] = timeit_queued(fb)
                rec["fwd_tflops"] = flops / rec["fwd_s"] / 1e12
                rec["bwd_over_fwd"] = (rec["fwd_bwd_s"] - rec["fwd_s"]) / rec["fwd_s"]
                rec["fwd_bwd_tflops"] = 3.5 * flops / rec["fwd_bwd_s"] / 1e12
            except Exception as e:  # noqa: BLE001
                rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            print({k2: (round(v2, 6) if isinstance(v2, float) else v2) for k2, v2 in rec.items()}, flush=True)
            rows.append(rec)
            q.grad = k.grad = v.grad = None
        del q, k, v, go
        torch.cuda.empty_cache()
    return rows


def elementwise_rows():
    rows = []
    for name, h, tokens, topk, experts in (("deepseek-v3", 7168, 4096, 8, 256), ("qwen3-30b-a3b", 2048, 8192, 8, 128),
                                            ("gpt-oss", 2880, 8192, 4, 32)):
        x = torch.randn(tokens, h, device=DEV, dtype=BF16)
        idx = torch.randint(0, tokens, (tokens * topk,), device=DEV)
        perm = torch.argsort(torch.randint(0, experts, (tokens * topk,), device=DEV))
        src = torch.repeat_interleave(torch.arange(tokens, device=DEV), topk)[perm]
        y = x.index_select(0, src)
        copy_bytes = 2 * y.numel() * 2
        rec = dict(model=name, hidden=h, tokens=tokens, top_k=topk, experts=experts, copies_bytes=y.numel() * 2)
        rec["copy_s"] = timeit(lambda: y.clone())
        rec["permute_s"] = timeit(lambda: x.index_select(0, src))
        out = torch.zeros_like(x)
        rec["unpermute_s"] = timeit(lambda: out.index_add_(0, src, y))
        inv = torch.argsort(perm)  # each token's k copies, back in token order, then summed (a fused unpermute)
        rec["unpermute_gather_s"] = timeit(lambda: y.index_select(0, inv).view(tokens, topk, h).sum(1))
        rec["copy_TBps"] = copy_bytes / rec["copy_s"] / 1e12
        rec["permute_TBps"] = (y.numel() * 2 + y.numel() * 2) / rec["permute_s"] / 1e12
        rec["unpermute_TBps"] = (y.numel() * 2 + 2 * x.numel() * 2) / rec["unpermute_s"] / 1e12
        wr = torch.randn(experts, h, device=DEV, dtype=BF16)

        def router():
            logits = x @ wr.t()
            return torch.topk(torch.softmax(logits.float(), -1), topk, -1)
        rec["router_s"] = timeit(router)
        rec["router_gemm_s"] = timeit(lambda: x @ wr.t())
        del idx
        print(rec, flush=True)
        rows.append(rec)
    return rows


def write(name, rows):
    if not rows:
        return
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(OUT / name, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys); w.writeheader(); w.writerows(rows)


def main():
    import sys
    only = sys.argv[1:]  # e.g. "attention": run that part alone
    p = torch.cuda.get_device_properties(0)
    print(p.name, p.multi_processor_count, "SMs; torch", torch.__version__, flush=True)
    torch.manual_seed(0)
    for name, fn in (("moe_elementwise.csv", elementwise_rows), ("grouped_gemm.csv", grouped_rows),
                     ("moe_attention.csv", attention_rows)):
        if only and not any(o in name for o in only):
            continue
        try:
            rows = fn()
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            rows = []
        for r in rows:
            r["gpu"] = p.name
        write(name, rows)


if __name__ == "__main__":
    main()
