"""Compare the model's per-layer kernel times with one transformer layer measured on a real H100.

Reads experiments/results/gpu/layer_<gpu>.csv (from measure_layer.py on the H100 and H200), predicts the same layer's forward
and forward+backward time with cosearch's kernel model (GEMMs, flash attention, memory-bound
kernels) at the given profile, prints the errors and writes experiments/results/gpu/compare_layer.json.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from cosearch.hardware import gpu  # noqa: E402
from cosearch.model import compute as kern  # noqa: E402
from cosearch.model.profile import DEFAULT_PROFILE, KERNEL_PROFILE, Profile  # noqa: E402

RESULTS = HERE.parent / "results" / "gpu"


def layer_times(r: pd.Series, p: Profile, gpu_id: str = "h100-sxm") -> tuple[float, float]:
    g = gpu(gpu_id)
    gemm_Fps = g["peak_tflops"]["bf16"] * 1e12 * g["matmul_efficiency"] * p.matmul_scale
    hbm = g["hbm_tbps"] * 1e12 * p.hbm_efficiency
    tok = r.microbatch * r.seq_len
    h, f, tp, gated = r.hidden, r.ffn_hidden, r.tp, r.gated_mlp
    kv_loc = h / r.heads * max(r.kv_heads / tp, 1)
    t0 = p.gemm_overhead_s
    gemm = (kern.gemm_time_s(tok, h / tp + 2 * kv_loc, h, gemm_Fps, hbm, t0) + kern.gemm_time_s(tok, h, h / tp, gemm_Fps, hbm, t0)
            + kern.gemm_time_s(tok, f * (1 + gated) / tp, h, gemm_Fps, hbm, t0) + kern.gemm_time_s(tok, h, f / tp, gemm_Fps, hbm, t0))
    attn = kern.flash_attention_time_s(r.microbatch, r.seq_len, r.seq_len, h / tp, gemm_Fps * p.flash_attention_relative)
    elem = tok * kern.elementwise_bytes_per_token(h, f / tp, gated) / hbm
    fwd = gemm + attn + elem
    return fwd, fwd + 2 * gemm + 2.5 * attn + 2 * elem


def main() -> None:
    parts = []
    for tag, gid in (("h100", "h100-sxm"), ("h200", "h200")):
        path = RESULTS / f"layer_{tag}.csv"
        if path.exists():
            parts.append(pd.read_csv(path).assign(gpu_id=gid))
    d = pd.concat(parts, ignore_index=True)
    out = {}
    for name, prof in (("default", DEFAULT_PROFILE), ("kernel", KERNEL_PROFILE)):
        pred = np.array([layer_times(r, prof, r.gpu_id) for _, r in d.iterrows()])
        d[f"{name}_fwd_err"] = pred[:, 0] / d.fwd_s - 1
        d[f"{name}_fwd_bwd_err"] = pred[:, 1] / d.fwd_bwd_s - 1
        e = d[f"{name}_fwd_bwd_err"].abs()
        out[name] = {"median_abs_error_fwd_bwd": float(e.median()), "worst_abs_error_fwd_bwd": float(e.max()),
                     "median_abs_error_fwd": float(d[f"{name}_fwd_err"].abs().median())}
    pd.set_option("display.width", 200)
    print(d.drop(columns=["gpu"]).to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print(json.dumps(out, indent=1))
    (RESULTS / "compare_layer.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
