"""Compare the model's per-layer kernel times with one transformer layer measured on a real H100.

Reads experiments/results/gpu/layer_<gpu>.csv (from measure_layer.py on the H100 and H200), predicts the same layer's forward
and forward+backward time with cosearch's kernel model (GEMMs, flash attention, memory-bound
kernels) at the given profile, prints the errors and writes experiments/results/gpu/compare_layer.json.
Also compares the fused causal attention alone (attention_<gpu>.csv, cuDNN through torch SDPA) with the
model's attention rate, by sequence length: the measured rate grows with the sequence, the model's is flat.
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
from cosearch.model.profile import DEFAULT_PROFILE, KERNEL_PROFILE, Profile  # noqa: E402
from _rates import bf16_rates  # noqa: E402

RESULTS = HERE.parent / "results" / "gpu"


def measured(kind: str) -> pd.DataFrame:
    """The H100 and H200 measurements ``<kind>_<gpu>.csv`` that exist, with the catalog id in ``gpu_id``."""
    parts = [pd.read_csv(RESULTS / f"{kind}_{tag}.csv").assign(gpu_id=gid)
             for tag, gid in (("h100", "h100-sxm"), ("h200", "h200")) if (RESULTS / f"{kind}_{tag}.csv").exists()]
    return pd.concat(parts, ignore_index=True)


def rates(p: Profile, gpu_id: str):
    """The model's bf16 kernel rates on ``gpu_id`` with the fused (cuDNN) attention kernel (evaluate's own chain)."""
    return bf16_rates(gpu_id, "flash", p)


def layer_times(r: pd.Series, p: Profile, gpu_id: str = "h100-sxm") -> tuple[float, float]:
    gemm_Fps, _, attn_Fps, hbm = rates(p, gpu_id)
    tok = r.microbatch * r.seq_len
    h, f, tp, gated = r.hidden, r.ffn_hidden, r.tp, r.gated_mlp
    kv_loc = h / r.heads * max(r.kv_heads / tp, 1)
    t0 = p.gemm_overhead_s
    gemm = (kern.gemm_time_s(tok, h / tp + 2 * kv_loc, h, gemm_Fps, hbm, t0) + kern.gemm_time_s(tok, h, h / tp, gemm_Fps, hbm, t0)
            + kern.gemm_time_s(tok, f * (1 + gated) / tp, h, gemm_Fps, hbm, t0) + kern.gemm_time_s(tok, h, f / tp, gemm_Fps, hbm, t0))
    attn = kern.flash_attention_time_s(r.microbatch, r.seq_len, r.seq_len, h / tp, attn_Fps) * kern.attention_span_factor(
        kern.causal_keys_per_query(r.seq_len))  # each query block's fixed cost (compute.ATTENTION_FIXED_KEYS)
    elem = tok * kern.elementwise_bytes_per_token(h, f / tp, gated) / hbm
    fwd = gemm + attn + elem
    return fwd, fwd + 2 * gemm + kern.FLASH_BACKWARD_RELATIVE * attn + 2 * elem


def attention(p: Profile) -> tuple[pd.DataFrame, dict]:
    """Fused causal attention alone: the model's forward and forward+backward times against the measured ones,
    and the measured forward+backward rate by sequence length (FLOPs counted as the model counts them)."""
    d = measured("attention")
    attn = {gid: float(rates(p, gid).attn_Fps) for gid in d.gpu_id.unique()}
    width = np.array([kern.attention_head_width_factor(hd, hd) for hd in d.head_dim.astype(float)])
    span = np.asarray(kern.attention_span_factor(kern.causal_keys_per_query(d.seq.to_numpy(float))))
    d["pred_fwd_s"] = kern.flash_attention_time_s(d.batch, d.seq, d.seq, d.heads * d.head_dim,
                                                  d.gpu_id.map(attn) * width) * span
    d["pred_fwd_bwd_s"] = d.pred_fwd_s * (1.0 + kern.FLASH_BACKWARD_RELATIVE)
    d["fwd_err"] = d.pred_fwd_s / d.fwd_s - 1.0
    d["fwd_bwd_err"] = d.pred_fwd_bwd_s / d.fwd_bwd_s - 1.0
    out = {"median_abs_error_fwd_bwd": float(d.fwd_bwd_err.abs().median()),
           "fwd_bwd_error_by_seq_hd128": {f"{g}/{int(s)}": float(e) for g, s, e in
                                          d[d.head_dim == 128][["gpu_id", "seq", "fwd_bwd_err"]].itertuples(index=False)}}
    return d, out


def main() -> None:
    d = measured("layer")
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
    for name, prof in (("default", DEFAULT_PROFILE), ("kernel", KERNEL_PROFILE)):
        a, out[name]["attention"] = attention(prof)
        print(f"\nfused causal attention alone ({name} profile): measured vs predicted")
        print(a[["gpu_id", "batch", "heads", "seq", "head_dim", "fwd_bwd_tflops", "fwd_err", "fwd_bwd_err"]]
              .to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    print(json.dumps(out, indent=1))
    out["model_fingerprint"] = model_fingerprint()
    (RESULTS / "compare_layer.json").write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
