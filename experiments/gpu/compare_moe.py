"""Compare the model's MoE-layer kernel times with the ones measured on a real H100 (measure_moe.py).

Reads experiments/results/gpu/{grouped_gemm,moe_attention,moe_elementwise}_h100.csv and predicts each
kernel with cosearch's own functions at the kernel profile (no end-to-end constants) and at the shipped
default profile:
  * grouped expert GEMMs (``moe.grouped_gemm_time_s``): forward, data gradient and weight gradient,
    which the model charges alike, by tokens per expert;
  * fused causal attention (``compute.flash_attention_time_s`` at the rate ``evaluate`` gives it, with
    the head-width factor and the sliding-window work fraction): cuDNN's kernel for ``attention: flash``,
    FlashAttention-2 and FlexAttention for ``flash2``, forward and forward + backward;
  * permute / unpermute of the top-k token copies (HBM traffic at the profile's bandwidth).
Prints the errors (predicted / measured - 1) and writes experiments/results/gpu/compare_moe.json.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

from cosearch.fingerprint import model_fingerprint  # noqa: E402
from cosearch.model import compute as kern  # noqa: E402
from cosearch.model import moe  # noqa: E402
from cosearch.model import window as win  # noqa: E402
from cosearch.model.profile import DEFAULT_PROFILE, KERNEL_PROFILE, Profile  # noqa: E402
from _rates import bf16_rates  # noqa: E402

RESULTS = HERE.parent / "results" / "gpu"


def rates(p: Profile) -> tuple[float, float, float, float]:
    """(GEMM FLOP/s, fused-attention FLOP/s, FlashAttention-2 FLOP/s, HBM B/s) of a bf16 run on the H100, from
    ``evaluate``'s own rate chain (:func:`cosearch.model.evaluate.kernel_rates`)."""
    fused, fa2 = bf16_rates("h100-sxm", "flash", p), bf16_rates("h100-sxm", "flash2", p)
    return fused.gemm_Fps, fused.attn_Fps, fa2.attn_Fps, fused.hbm_Bps


def stats(err: pd.Series) -> dict:
    e = err.dropna()
    return {"n": int(e.size), "median_abs": float(e.abs().median()), "worst_abs": float(e.abs().max()),
            "bias": float(e.median())}


def grouped(p: Profile) -> tuple[pd.DataFrame, dict]:
    d = pd.read_csv(RESULTS / "grouped_gemm_h100.csv")
    gemm, _, _, hbm = rates(p)
    pred = np.asarray(moe.grouped_gemm_time_s(d.groups.to_numpy(float), d.tokens_per_expert.to_numpy(float),
                                              d.n.to_numpy(float), d.k.to_numpy(float), gemm, hbm,
                                              p.gemm_overhead_s, kern.BYTES_16BIT))
    d["pred_s"] = pred
    out = {}
    for col in ("fwd_s", "dgrad_s", "wgrad_s"):
        d[f"err_{col[:-2]}"] = pred / d[col] - 1.0
        out[col[:-2]] = stats(d[f"err_{col[:-2]}"])
        out[col[:-2]]["by_tokens_per_expert"] = {int(m): stats(g[f"err_{col[:-2]}"]) for m, g in d.groupby("tokens_per_expert")}
    # the measured rate of a grouped GEMM over one dense GEMM of the same total shape (GROUPED_GEMM_RELATIVE)
    d["grouped_over_dense"] = d.dense_s / d.fwd_s
    out["grouped_over_dense_rate"] = {int(m): float(g.grouped_over_dense.median()) for m, g in d.groupby("tokens_per_expert")}
    out["wgrad_over_fwd_rate"] = {int(m): float((g.fwd_s / g.wgrad_s).median()) for m, g in d.groupby("tokens_per_expert")}
    fp8 = d.dropna(subset=["fp8_fwd_s"])
    out["fp8_over_bf16_speedup"] = {int(m): float((g.fwd_s / g.fp8_fwd_s).median()) for m, g in fp8.groupby("tokens_per_expert")}
    return d, out


def attention(p: Profile) -> tuple[pd.DataFrame, dict]:
    d = pd.read_csv(RESULTS / "moe_attention_h100.csv").dropna(subset=["fwd_s"]).copy()
    _, attn, fa2, _ = rates(p)
    s = d.seq.to_numpy(float)
    w = d.window.to_numpy(float)
    # windowed work over full causal work and each query block's fixed cost, as evaluate charges them (window.py)
    work = np.asarray(win.attention_time_factor({"seq_len": s, "sliding_window": w, "layers": np.ones_like(s),
                                                 "global_attention_every": np.zeros_like(s)}, s))
    head = np.asarray(kern.attention_head_width_factor(d.qk_head_dim.to_numpy(float), d.v_head_dim.to_numpy(float)))
    rate = np.where(d.kernel == "sdpa_cudnn", attn, fa2) * head
    width = d.q_heads.to_numpy(float) * 0.5 * (d.qk_head_dim + d.v_head_dim).to_numpy(float)  # as moe.terms gives it
    fwd = np.asarray(kern.flash_attention_time_s(d.batch.to_numpy(float), s, s, width, rate)) * work
    d["pred_fwd_s"] = fwd
    d["pred_fwd_bwd_s"] = fwd * (1.0 + kern.FLASH_BACKWARD_RELATIVE)
    d["err_fwd"] = d.pred_fwd_s / d.fwd_s - 1.0
    d["err_fwd_bwd"] = d.pred_fwd_bwd_s / d.fwd_bwd_s - 1.0
    d["kind"] = np.where(d.kernel == "sdpa_cudnn", "flash (cuDNN)", np.where(d.kernel == "sdpa_flash", "flash2 (FA2)", "flash2 (flex)"))
    used = d[d.kernel != "sdpa_efficient"]
    out = {k: {"fwd": stats(g.err_fwd), "fwd_bwd": stats(g.err_fwd_bwd)} for k, g in used.groupby("kind")}
    wins = used[used.window > 0]
    out["windowed_flex"] = {"fwd_bwd": stats(wins.err_fwd_bwd),
                            "measured_over_full": {f"w{int(r.window)}_s{int(r.seq)}_hd{int(r.qk_head_dim)}_b{int(r.batch)}":
                                                   float(r.fwd_bwd_s / used[(used.kernel == "flex") & (used.window == 0)
                                                                            & (used.model == r.model) & (used.batch == r.batch)].fwd_bwd_s.iloc[0])
                                                   for r in wins.itertuples()}}
    out["backward_over_forward_measured_median"] = float(used.bwd_over_fwd.median())
    return used, out


def elementwise(p: Profile) -> dict:
    d = pd.read_csv(RESULTS / "moe_elementwise_h100.csv")
    hbm = rates(p)[3]
    pred = 2.0 * d.copies_bytes / hbm                   # read + write every token copy
    return {"permute": stats(pred / d.permute_s - 1.0), "unpermute_gather_sum": stats(pred / d.unpermute_gather_s - 1.0),
            "unpermute_index_add": stats(pred / d.unpermute_s - 1.0)}


def main() -> None:
    pd.set_option("display.width", 220)
    report = {}
    for name, prof in (("kernel", KERNEL_PROFILE), ("default", DEFAULT_PROFILE)):
        g, gs = grouped(prof)
        a, ast = attention(prof)
        report[name] = {"grouped_gemm": gs, "attention": ast, "permute": elementwise(prof)}
        if name == "kernel":
            print(g[["preset", "groups", "tokens_per_expert", "gemm", "k", "n", "fwd_tflops", "wgrad_tflops",
                     "err_fwd", "err_dgrad", "err_wgrad"]].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
            print(a[["model", "batch", "seq", "qk_head_dim", "v_head_dim", "kernel", "window", "fwd_tflops",
                     "fwd_bwd_tflops", "bwd_over_fwd", "err_fwd", "err_fwd_bwd"]]
                  .to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(json.dumps(report, indent=1))
    report["model_fingerprint"] = model_fingerprint()
    (RESULTS / "compare_moe.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
