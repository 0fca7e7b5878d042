"""The kernel model against kernels measured on a real H100 (experiments/gpu/measure_moe.py; the CSVs
are committed under experiments/results/gpu/, so these run without a GPU).

Expectations are the measurements themselves: grouped expert GEMMs (queued launches, so host
overhead is out), fused attention by head width, and sliding windows against the same kernel without one.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cosearch.hardware import gpu
from cosearch.model import compute as kern
from cosearch.model import moe
from cosearch.model import window as win
from cosearch.model.profile import KERNEL_PROFILE

GPU_RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "gpu"


def test_grouped_gemm_model_matches_measured_h100():
    d = pd.read_csv(GPU_RESULTS / "grouped_gemm_h100.csv")
    g, p = gpu("h100-sxm"), KERNEL_PROFILE
    pred = np.asarray(moe.grouped_gemm_time_s(
        d.groups.to_numpy(float), d.tokens_per_expert.to_numpy(float), d.n.to_numpy(float), d.k.to_numpy(float),
        g["peak_tflops"]["bf16"] * 1e12 * g["matmul_efficiency"], g["hbm_tbps"] * 1e12 * p.hbm_efficiency,
        p.gemm_overhead_s, kern.BYTES_16BIT))
    assert len(d) >= 100
    for col in ("fwd_s", "dgrad_s"):  # no constant fitted to these: measured 4.6 % and 6 %
        err = pred / d[col].to_numpy() - 1.0
        assert np.median(np.abs(err)) < 0.10, col
        assert abs(np.median(err)) < 0.05, col
    # the weight gradient is the slower kernel (grouped along the tokens): the model, which charges it
    # like the forward, is optimistic there, never pessimistic on the median
    assert np.median(pred / d.wgrad_s.to_numpy() - 1.0) < 0.0


def test_narrow_heads_measured_slower_as_modelled():
    d = pd.read_csv(GPU_RESULTS / "moe_attention_h100.csv").dropna(subset=["fwd_bwd_s"])
    d = d[(d.window == 0) & (d.batch == 2) & (d.q_heads == 32) & (d.seq == 4096)]
    rate = d.set_index(["kernel", "qk_head_dim"]).fwd_bwd_tflops
    ratios = [rate[(k, 64)] / rate[(k, 128)] for k in ("sdpa_cudnn", "sdpa_flash", "flex")]
    assert all(r < 0.95 for r in ratios)  # every kernel: width 64 runs slower per FLOP than 128
    assert kern.attention_head_width_factor(64.0, 64.0) == pytest.approx(float(np.median(ratios)), abs=0.1)


def _flex_windows():
    """(row, measured time over the same FlexAttention kernel without a window) of each windowed measurement."""
    d = pd.read_csv(GPU_RESULTS / "moe_attention_h100.csv").dropna(subset=["fwd_bwd_s"])
    flex = d[d.kernel == "flex"]
    for r in flex[flex.window > 0].itertuples():
        full = flex[(flex.window == 0) & (flex.model == r.model) & (flex.batch == r.batch)].fwd_bwd_s.iloc[0]
        yield r, r.fwd_bwd_s / full


def test_tiled_window_work_is_closer_to_the_measured_kernel_than_pairs():
    checked = 0
    for r, measured in _flex_windows():
        tiled = win.causal_work_fraction(float(r.seq), float(r.window))
        exact = win.causal_work_fraction(float(r.seq), float(r.window), block=1.0)
        if r.window <= 8 * win.ATTENTION_BLOCK:  # narrow windows: whole tiles are what the kernel pays for
            assert abs(tiled - measured) < abs(exact - measured)
        else:  # wide windows: the edge tiles matter little, both counts are close
            assert tiled == pytest.approx(measured, abs=0.05) and exact == pytest.approx(measured, abs=0.05)
        assert tiled <= measured + 0.05  # fixed costs only add to the tiles' work
        checked += 1
    assert checked >= 5


def test_causal_keys_per_query_by_hand():
    # 300 tokens in 128-row tiles: 3 query blocks visiting 1, 2, 3 key blocks -> 2 blocks = 256 keys on average
    assert kern.causal_keys_per_query(300.0) == 256.0
    assert kern.causal_keys_per_query(8192.0) == 128.0 * 65 / 2  # 4,160: where the catalog's rates hold
    assert kern.attention_span_factor(kern.causal_keys_per_query(8192.0)) == pytest.approx(1.0)
    assert kern.attention_span_factor(1e12) == pytest.approx(1.0 / (1.0 + 738.0 / 4160.0))  # no fixed cost left


def test_fused_attention_rate_grows_with_the_length_as_measured():
    # cuDNN forward + backward at 2k-32k causal tokens (the fit's own data: the form must hold across it) and
    # FlashAttention-2 at 4k against 8k (not fitted): rate at s over rate at 8k = span(8k) / span(s)
    d = pd.read_csv(GPU_RESULTS / "attention_h100.csv")
    d = d[d.head_dim == 128]
    ref = float(d[d.seq == 8192].fwd_bwd_tflops.iloc[0])
    for r in d.itertuples():
        model = 1.0 / kern.attention_span_factor(kern.causal_keys_per_query(float(r.seq)))
        assert model == pytest.approx(r.fwd_bwd_tflops / ref, rel=0.04), r.seq
    m = pd.read_csv(GPU_RESULTS / "moe_attention_h100.csv")
    fa2 = m[(m.kernel == "sdpa_flash") & (m.qk_head_dim == 128) & (m.window == 0)].set_index("seq").fwd_bwd_tflops
    measured = fa2[4096] / fa2[8192]  # 0.881; both shapes launch 2,048 query blocks
    assert 1.0 / kern.attention_span_factor(kern.causal_keys_per_query(4096.0)) == pytest.approx(measured, rel=0.02)


def test_window_time_with_the_fixed_cost_matches_the_measured_kernel():
    # windows of 128 and 1,024 keys in 4,096 tokens, 4,096 in 8,192: the tiles' work at that share of the keys,
    # each query block paying its fixed cost, against the same FlexAttention kernel without a window
    checked = 0
    for r, measured in _flex_windows():
        s, w = float(r.seq), float(r.window)
        c = {"seq_len": s, "sliding_window": w, "layers": 1.0, "global_attention_every": 0.0}
        model = win.attention_time_factor(c, s) / kern.attention_span_factor(kern.causal_keys_per_query(s))
        tiled = win.causal_work_fraction(s, w)
        if w <= 8 * win.ATTENTION_BLOCK:  # narrow windows: the fixed cost is most of the time (0.25-0.41 measured)
            assert abs(model - measured) < abs(tiled - measured)
            assert model == pytest.approx(measured, abs=0.11)  # 0.347 against 0.245-0.406, where tiles give 0.119
        else:  # 1,024-4,096 keys: 0.61 / 0.80 against 0.58 / 0.75 (tiles 0.48 / 0.76)
            assert model == pytest.approx(measured, abs=0.06)
        checked += 1
    assert checked >= 5
