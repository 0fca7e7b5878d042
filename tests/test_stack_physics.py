"""Three facts of the stack a run states, each from a measurement: PyTorch eager mode's unfused memory-bound
ops (training.fusion), a board power limit below the rated power (cluster.power_limit_w), and
FlashAttention-2's forward + backward rate on Hopper (training.attention flash2)."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import cosearch
from cosearch._cells import fusion_of, gpu_id
from cosearch.errors import CosearchError
from cosearch.model import compute as kern
from cosearch.model import power
from cosearch.model.columns import scalar_columns
from cosearch.model.evaluate import kernel_rates
from cosearch.model.profile import DEFAULT_PROFILE
from cosearch.scenario import parse_scenario, scenario_columns

GPU_RESULTS = Path(__file__).resolve().parents[1] / "experiments" / "results" / "gpu"


def _gpt(fusion="fused", **cluster):
    # one H100, no parallelism, no recompute: nothing to overlap, every term adds up
    return {"model": {"layers": 24, "hidden": 2048, "heads": 16, "ffn_hidden": 8192, "vocab": 50304, "seq_len": 2048},
            "training": {"global_batch": 4, "precision": "bf16", "fusion": fusion},
            "cluster": {"gpu": "h100-sxm", "gpus": 1, **cluster}, "plan": {"microbatch": 4}}


def test_eager_ratio_recomputed_from_the_measured_steps():
    # eager minus compiled step time of the same GPT step, over the model's fused memory-bound time
    # (forward + 2x backward, every layer): the shipped constant lies within the measured pairs
    eager = pd.read_csv(GPU_RESULTS / "step_h100.csv")
    comp = pd.read_csv(GPU_RESULTS / "step_compiled_h100.csv")
    pairs = eager.merge(comp, on=["model", "microbatch", "recompute"], suffixes=("_e", "_c"))
    pairs = pairs[pairs.recompute == "none"]
    assert len(pairs) >= 3
    hbm = 3.35e12 * DEFAULT_PROFILE.hbm_efficiency
    ratios = []
    for r in pairs.itertuples():
        tok = r.microbatch * r.seq_len_e
        fused_s = 3 * r.layers_e * tok * 2 * (10 * r.hidden_e + 2 * 4 * r.hidden_e) / hbm
        ratios.append(1 + (r.step_s_e - r.step_s_c) / fused_s)
    assert min(ratios) <= kern.EAGER_ELEMENTWISE_RELATIVE <= max(ratios)
    assert max(ratios) - min(ratios) < 0.3  # one ratio for all sizes: the extra traffic scales with tokens x hidden


def test_eager_adds_exactly_the_extra_memory_bound_time():
    fused, eager = cosearch.estimate(_gpt()), cosearch.estimate(_gpt("eager"))
    tok, h, f, layers = 4 * 2048, 2048, 8192, 24
    hbm = 3.35e12 * DEFAULT_PROFILE.hbm_efficiency
    extra = 3 * layers * tok * 2 * (10 * h + 2 * f) / hbm * (kern.EAGER_ELEMENTWISE_RELATIVE - 1)
    assert eager["step_time_s"] - fused["step_time_s"] == pytest.approx(extra, rel=1e-9)
    assert eager["memory_gib"] == fused["memory_gib"]


def test_static_power_share_solves_the_two_hopper_parts():
    # cube law, one static power P0 for both parts: P = P0 + SMs x w x (clock ratio)^3; the clock ratio is the
    # per-SM matmul rate ratio of the H100 PCIe (496 TFLOP/s, 114 SMs, 350 W) to the SXM (792, 132, 700 W)
    r = (496 / 114) / (792 / 132)
    p0, w = np.linalg.solve([[1.0, 132.0], [1.0, 114.0 * r ** 3]], [700.0, 350.0])
    assert power.STATIC_POWER_SHARE == pytest.approx(p0 / 700.0, rel=1e-12)
    assert 150 < p0 < 220  # HBM, I/O and leakage of a 700 W part: a plausible static draw
    # at the rated power and without a limit the clock is the rated one; 500 W on the SXM part: the cube root
    assert power.clock_factor(700.0, 700.0) == 1.0 and power.clock_factor(800.0, 700.0) == 1.0
    assert power.clock_factor(float("nan"), 700.0) == 1.0
    assert power.clock_factor(500.0, 700.0) == pytest.approx(((500 - p0) / (700 - p0)) ** (1 / 3), rel=1e-12)


def test_power_limit_slows_compute_monotonically_and_caps_energy():
    base = _gpt()
    base["training"]["tokens"] = 1e9
    times, energies = [], []
    for limit in (None, 700, 600, 500, 400, 300):
        sc = copy.deepcopy(base)
        if limit is not None:
            sc["cluster"]["power_limit_w"] = limit
        e = cosearch.estimate(sc)
        times.append(e["step_time_s"])
        energies.append(e["energy_to_train_mwh"] / e["time_to_train_days"])  # mean power x a constant
    assert times[0] == times[1]  # a limit at the rated power changes nothing
    assert all(a < b for a, b in zip(times[1:], times[2:]))  # every lower limit is slower
    assert energies[0] == pytest.approx(energies[1]) and energies[3] == pytest.approx(energies[0] * 500 / 700)
    # the clock scales the tensor-core rates only: slower by less than the clock alone would make it
    assert 1.0 < times[3] / times[0] < 1.0 / power.clock_factor(500.0, 700.0)


def test_power_limit_below_static_draw_is_refused():
    with pytest.raises(CosearchError, match="cluster.power_limit_w"):
        cosearch.estimate(_gpt(power_limit_w=150))


def test_cells_read_the_power_limit_and_eager():
    gid, over = gpu_id("H100 SXM 96GB HBM2e (Grand Teton, 500 W power limit)")
    assert gid == "h100-sxm" and over["power_limit_w"] == 500.0 and over["hbm_gib"] == 96.0
    assert gpu_id("H100 SXM 80GB")[1] == {}
    assert fusion_of("torchtitan (PyTorch FSDP2, eager, SDPA; Dec 2024)") == "eager"
    assert fusion_of("torchtitan (PyTorch FSDP2, torch.compile per block, SDPA; Dec 2024)") == "fused"
    assert fusion_of("NeMo 24.07 (Megatron-Core, Transformer Engine)") == "fused"


def test_flash2_on_hopper_runs_at_the_measured_rate():
    measured = pd.read_csv(GPU_RESULTS / "moe_attention_h100.csv")
    row = measured[(measured.model == "hd128-8k") & (measured.kernel == "sdpa_flash")].iloc[0]
    assert row.fwd_bwd_tflops == pytest.approx(281.8, abs=0.05)
    sc = _gpt()
    sc["training"]["attention"] = "flash2"
    rates = kernel_rates(scalar_columns(scenario_columns(parse_scenario(sc))), DEFAULT_PROFILE)
    assert rates.attn_Fps == pytest.approx(row.fwd_bwd_tflops * 1e12, rel=1e-3)
    # Ampere is FlashAttention-2's own architecture: no cap, the GPU's fused rate
    sc["cluster"]["gpu"] = "a100-80gb"
    a100 = kernel_rates(scalar_columns(scenario_columns(parse_scenario(sc))), DEFAULT_PROFILE)
    sc["training"]["attention"] = "flash"
    assert a100.attn_Fps == kernel_rates(scalar_columns(scenario_columns(parse_scenario(sc))), DEFAULT_PROFILE).attn_Fps


def test_power_limit_caps_the_energy_of_an_inventory_too():
    # 8 H100 (700 W) + 8 A100 (400 W) under a 400 W limit: the H100s draw 400 W, the A100s their rated 400 W
    base = {"model": "llama3-8b", "training": {"global_batch": 64, "tokens": 1e9},
            "cluster": {"inventory": {"h100-sxm": 8, "a100-80gb": 8}}, "plan": {"pp": 2, "microbatch": 1}}
    capped = copy.deepcopy(base)
    capped["cluster"]["power_limit_w"] = 400
    free, lim = cosearch.estimate(base), cosearch.estimate(capped)
    mean_power = [e["energy_to_train_mwh"] / e["time_to_train_days"] for e in (free, lim)]
    assert mean_power[1] / mean_power[0] == pytest.approx((8 * 400 + 8 * 400) / (8 * 700 + 8 * 400), rel=1e-12)
    assert lim["step_time_s"] >= free["step_time_s"]
