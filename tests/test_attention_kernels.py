"""Attention kernels per GPU generation: FlashAttention-2 and the 2023 Triton kernel on Hopper.

Shah et al., FlashAttention-3 (arXiv 2407.08608): FlashAttention-2 reaches only 35 % of H100 peak, as
it has no wgmma/TMA path; the catalog caps kernels written for an older architecture at that rate.
The expectations below are computed by hand from the kernel FLOP count (4*b*s^2*h, halved by the
causal mask; backward 2.5x forward) and the rates, on one GPU where nothing overlaps attention. The fused
kernels (flash, flash2) also pay a fixed cost per 128-query block, K0 = 738 keys of work (compute.py): at
SEQ tokens a query visits 128 x (SEQ/128 + 1) / 2 keys on average, 4,160 at the 8,192 where the rates hold.
"""
from __future__ import annotations

import math

import pytest

import cosearch
from cosearch import hardware
from cosearch.errors import CosearchError
from cosearch.model.profile import DEFAULT_PROFILE

LAYERS, HIDDEN, SEQ = 4, 2048, 16384


def _step_s(gpu: str, attention: str) -> float:
    sc = {
        "model": {"layers": LAYERS, "hidden": HIDDEN, "heads": 16, "ffn_hidden": 4 * HIDDEN, "vocab": 32000,
                  "seq_len": SEQ},
        "training": {"global_batch": 1, "precision": "bf16", "attention": attention},
        "cluster": {"gpu": gpu, "gpus": 1},
        "plan": {"microbatch": 1, "recompute": "none"},
    }
    return cosearch.estimate(sc)["step_time_s"]


#: time per FLOP of a fused kernel at SEQ causal tokens over that at 8,192 (the reference), by hand
SPAN = (1 + 738 / (128 * (SEQ / 128 + 1) / 2)) / (1 + 738 / 4160)


def _attention_flops_per_step() -> float:
    forward = 4.0 * SEQ * SEQ * HIDDEN * 0.5          # causal: half the scores
    return LAYERS * (forward + 2.5 * forward)         # forward + backward


def test_catalog_caps_hopper_only():
    for gid in ("h100-sxm", "h100-pcie", "h200", "h800"):
        assert hardware.gpu(gid)["legacy_attention_efficiency"] == 0.35, gid
        assert "2407.08608" in hardware.gpu(gid)["efficiency"]["legacy_attention_source"], gid
    for gid in ("a100-40gb", "a100-80gb", "v100-32gb", "b200", "mi300x"):
        assert math.isnan(hardware.gpu(gid)["legacy_attention_efficiency"]), gid


def test_flash2_on_a100_is_the_a100_kernel():
    # FlashAttention-2 is A100's own kernel: no cap, the same step as "flash"
    assert _step_s("a100-80gb", "flash2") == _step_s("a100-80gb", "flash")


def test_flash2_on_h100_runs_at_its_measured_forward_backward_rate():
    # the published forward cap (35 % of peak) times FA2's measured forward + backward share of it on one H100
    # (281.8 TFLOP/s at Llama 3 8B's shape, compute.FLASH2_CAPPED_FWD_BWD_RELATIVE)
    peak = 989.4e12
    p = DEFAULT_PROFILE
    flash_rate = peak * hardware.gpu("h100-sxm")["matmul_efficiency"] * p.matmul_scale * p.flash_attention_relative
    flash2_rate = 281.8e12
    assert flash2_rate < flash_rate  # the cap binds on Hopper
    flops = _attention_flops_per_step()
    expected_extra_s = SPAN * (flops / flash2_rate - flops / flash_rate)
    assert SPAN == pytest.approx(0.9253, abs=1e-4)  # 16,384 tokens: the fixed cost spread over twice the keys
    extra_s = _step_s("h100-sxm", "flash2") - _step_s("h100-sxm", "flash")
    assert extra_s == pytest.approx(expected_extra_s, rel=1e-9)


def test_triton_on_hopper_is_capped_fa2_over_1_8_and_on_a100_the_a100_ratio():
    p = DEFAULT_PROFILE
    flops = _attention_flops_per_step()
    # H100: min(flash rate, 35 % of peak: the published FA2 forward cap, no Hopper measurement of Triton) x (1 / 1.8)
    triton_h100 = 0.35 * 989.4e12 * p.triton_attention_relative
    extra_h100 = _step_s("h100-sxm", "triton") - _step_s("h100-sxm", "flash2")
    # the 2023 Triton kernel keeps a flat rate (no fixed cost per query block, compute.ATTENTION_FIXED_KEYS)
    assert extra_h100 == pytest.approx(flops / triton_h100 - SPAN * flops / 281.8e12, rel=1e-9)
    # A100: no cap, the Triton kernel at 1/1.8 of the flash rate
    flash_a100 = 312e12 * hardware.gpu("a100-80gb")["matmul_efficiency"] * p.matmul_scale * p.flash_attention_relative
    extra_a100 = _step_s("a100-80gb", "triton") - _step_s("a100-80gb", "flash")
    assert extra_a100 == pytest.approx(flops / (flash_a100 * p.triton_attention_relative) - SPAN * flops / flash_a100,
                                       rel=1e-9)


def test_context_parallel_takes_flash2_but_not_triton():
    base = {"model": "llama3-8b", "training": {"global_batch": 8}, "cluster": {"gpu": "h100-sxm", "gpus": 16},
            "plan": {"cp": 2, "microbatch": 1}}
    ok = cosearch.estimate({**base, "training": {"global_batch": 8, "attention": "flash2"}})
    assert ok["step_time_s"] > cosearch.estimate(base)["step_time_s"]
    with pytest.raises(CosearchError, match="flash or flash2"):
        cosearch.estimate({**base, "training": {"global_batch": 8, "attention": "triton"}})


def test_unknown_attention_names_the_choices():
    with pytest.raises(CosearchError, match="flash2"):
        cosearch.estimate({"model": "llama3-8b", "training": {"global_batch": 8, "attention": "flash4"},
                           "cluster": {"gpu": "h100-sxm", "gpus": 8}})


def test_estimate_warns_where_the_kernel_was_never_measured():
    def warnings(gpu: str, attention: str) -> list[str]:
        sc = {"model": "llama3-8b", "training": {"global_batch": 8, "attention": attention},
              "cluster": {"gpu": gpu, "gpus": 8}}
        return [w for w in cosearch.estimate(sc)["warnings"] if "training.attention" in w]

    assert warnings("b200", "flash2") and "b200" in warnings("b200", "flash2")[0]
    assert "/ 1.8" in warnings("mi300x", "triton")[0]
    assert warnings("h100-sxm", "flash2") == []      # measured (35 %)
    assert warnings("a100-80gb", "triton") == []     # the kernel's own architecture
    assert warnings("b200", "flash") == []           # the GPU's own kernel


def test_blackwell_ultra_softmax_speeds_up_attention_only():
    # GB300 and GB200 share peak and GEMM efficiency; GB300's doubled SFU throughput makes its attention
    # kernel 1.35x faster (NVIDIA, "Making Softmax More Efficient with NVIDIA Blackwell Ultra"), capped at
    # the GEMM rate: 0.75 x 1.35 = 1.0125 -> 1.0 of the 16-bit GEMM rate
    p = DEFAULT_PROFILE
    gemm16 = 2500e12 * hardware.gpu("gb200")["matmul_efficiency"] * p.matmul_scale
    assert hardware.gpu("gb300")["matmul_efficiency"] == hardware.gpu("gb200")["matmul_efficiency"]
    rate_gb200 = gemm16 * p.flash_attention_relative
    rate_gb300 = gemm16 * min(p.flash_attention_relative * 1.35, 1.0)
    flops = _attention_flops_per_step()
    saved_s = _step_s("gb200", "flash") - _step_s("gb300", "flash")
    assert saved_s == pytest.approx(SPAN * (flops / rate_gb200 - flops / rate_gb300), rel=1e-9)
    assert hardware.gpu("b200")["attention_speedup"] == 1.0


def test_head_width_factor_by_hand():
    from cosearch.model.compute import attention_head_width_factor as factor
    r = 989.4 / 3.9  # H100 matmul FLOP/s per exponential/s (FlashAttention-3, sec. 3.1)
    # time per score ~ 1 + r / (2 (d_qk + d_v)): 512 matmul FLOPs per score at width 128, 256 at 64
    assert factor(64.0, 64.0) == pytest.approx((1 + r / 512) / (1 + r / 256))
    assert factor(64.0, 64.0) == pytest.approx(0.751, abs=1e-3)
    assert factor(96.0, 96.0) == pytest.approx((1 + r / 512) / (1 + r / 384))
    for wide in ((128.0, 128.0), (192.0, 128.0), (256.0, 256.0)):  # capped: not faster than at 128
        assert factor(*wide) == 1.0


def test_narrow_heads_pay_the_softmax():
    # hidden 2048 as 32 heads of 64 instead of 16 of 128: the same FLOPs and parameters, only the
    # fused attention runs at 0.751 of its rate
    from cosearch.model.compute import attention_head_width_factor as factor

    def step(heads):
        sc = {"model": {"layers": LAYERS, "hidden": HIDDEN, "heads": heads, "ffn_hidden": 4 * HIDDEN, "vocab": 32000,
                        "seq_len": SEQ},
              "training": {"global_batch": 1, "precision": "bf16"},
              "cluster": {"gpu": "h100-sxm", "gpus": 1}, "plan": {"microbatch": 1, "recompute": "none"}}
        return cosearch.estimate(sc)["step_time_s"]

    p = DEFAULT_PROFILE
    rate = 989.4e12 * hardware.gpu("h100-sxm")["matmul_efficiency"] * p.matmul_scale * p.flash_attention_relative
    flops = _attention_flops_per_step()
    expected_extra_s = SPAN * (flops / (rate * factor(64.0, 64.0)) - flops / rate)
    assert step(32) - step(16) == pytest.approx(expected_extra_s, rel=1e-6)
