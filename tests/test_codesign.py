"""Co-design features against hand-computed cases: collective algorithms, oversubscription, the
memory expansion tier with offloading, and time-to-accuracy (McCandlish et al. 2018)."""
import numpy as np
import pytest

from cosearch import estimate
from cosearch.errors import CosearchError
from cosearch.model import BREAKDOWN_KEYS, evaluate
from cosearch.model import collectives as coll
from cosearch.model import communication as comm
from cosearch.model import flops as fl
from cosearch.model.collectives import COLLECTIVE_CODES
from cosearch.model.expansion import OFFLOAD_CODES

GIB = 2.0**30


# ------------------------------------------------------------------------------------ collectives
def _fabric(nvl=100e9, net=25e9, a_nvl=1e-5, a_net=1e-5, domain=8.0, oversub=1.0, leaf=np.nan):
    return coll.Fabric(nvl, net, a_nvl, a_net, domain, oversub, leaf)


def test_ring_and_tree_inside_one_domain_hand_computed():
    f = _fabric()
    t = coll.algorithm_times_s("all_reduce", 1e9, 8.0, 1.0, f)
    # ring: 2*7/8 * 1 GB / 100 GB/s + 2*7 steps * 10 us
    assert t["ring"] == pytest.approx(17.5e-3 + 14 * 1e-5)
    # NCCL tree inside a node is a chain: 2 M / (0.9 B) + 2*(8-1) * 10 us
    assert t["tree"] == pytest.approx(2e9 / 0.9e11 + 14 * 1e-5)
    # direct (two-shot over NVSwitch): 2*7/8 * M/B + 2 rounds of one latency
    assert t["direct"] == pytest.approx(17.5e-3 + 2e-5)
    # hierarchical inside one domain is the direct exchange over the NVSwitch
    assert t["hierarchical"] == pytest.approx(t["direct"])


def test_tree_beats_ring_for_small_messages_at_scale_and_loses_for_large():
    f = _fabric()
    # 64 ranks one per node (stride 8, domain 8): g = 1, n = 64
    small = coll.algorithm_times_s("all_reduce", 1e6, 64.0, 8.0, f)
    assert small["ring"] == pytest.approx(2 * 63 / 64 * 1e6 / 25e9 + 2 * 63 * 1e-5)
    assert small["tree"] == pytest.approx(2e6 / (0.9 * 25e9) + 2 * 6 * 1e-5)  # ceil(log2 64) = 6
    assert small["tree"] < small["ring"]
    big = coll.algorithm_times_s("all_reduce", 1e9, 64.0, 8.0, f)
    assert big["ring"] < big["tree"]


def test_hierarchical_all_reduce_on_a_two_level_system():
    # 64 ranks, 8 per NVLink domain (stride 1): RS + AG over the NVSwitch (one latency each),
    # 8 parallel rings of 8 domains on M/8 over the network
    f = _fabric(nvl=300e9, net=50e9, a_nvl=2e-6, a_net=1e-5)
    M = 1e9
    t = coll.algorithm_times_s("all_reduce", M, 64.0, 1.0, f)
    want = 2 * 7 / 8 * M / 300e9 + 2 * 7 / 8 * (M / 8) / 50e9 + 2 * (2e-6 + 7 * 1e-5)
    assert t["hierarchical"] == pytest.approx(want)
    # flat ring over min(NVLink, 8 NICs) with 2(64-8) NVLink steps and 2*7 network steps
    ring = 2 * 63 / 64 * M / 300e9 + 2 * (56 * 2e-6 + 7 * 1e-5)
    assert t["ring"] == pytest.approx(ring)
    g = coll.algorithm_times_s("all_gather", M, 64.0, 1.0, f)
    assert g["hierarchical"] == pytest.approx(want / 2)


def test_auto_takes_the_fastest_and_codes_select_each_algorithm():
    f = _fabric()
    sizes = np.logspace(3, 10, 30)
    times = coll.algorithm_times_s("all_reduce", sizes, 256.0, 8.0, f)
    auto = coll.collective_s("all_reduce", COLLECTIVE_CODES["auto"], sizes, 256.0, 8.0, f)
    np.testing.assert_allclose(auto, np.min(np.stack([times[a] for a in coll.ALGORITHMS]), axis=0))
    for name in coll.ALGORITHMS:
        np.testing.assert_allclose(coll.collective_s("all_reduce", COLLECTIVE_CODES[name], sizes, 256.0, 8.0, f), times[name])
    legacy = coll.collective_s("all_reduce", 0.0, sizes, 256.0, 8.0, f)
    np.testing.assert_allclose(legacy, comm.all_reduce_s(sizes, 256.0, 25e9, 1e-5))
    assert set(coll.fastest_algorithm("all_reduce", np.array([1e3, 1e10]), 256.0, 8.0, f)) <= set(coll.ALGORITHMS)


def test_oversubscription_halves_cross_node_bandwidth():
    f1, f2 = _fabric(oversub=1.0), _fabric(oversub=2.0)
    # a data-parallel group across nodes (one member per 8-GPU domain): half the NIC rate
    assert f2.ring_nic_Bps(64.0, 8.0) == pytest.approx(25e9 / 2)
    assert f2.bandwidth_Bps(64.0, 8.0) == pytest.approx(f1.bandwidth_Bps(64.0, 8.0) / 2)
    # a group inside one NVLink domain never touches the spine
    assert f2.bandwidth_Bps(8.0, 1.0) == f1.bandwidth_Bps(8.0, 1.0) == 100e9
    # a group that stays under one 512-GPU leaf keeps full bandwidth
    assert _fabric(oversub=4.0, leaf=512.0).ring_nic_Bps(64.0, 8.0) == 25e9
    # all-to-all: 63/64 of the traffic leaves the leaf -> 1 / (2 * 63/64) of the NIC rate
    assert comm.spine_share(64.0, 8.0, 8.0, np.nan, 2.0, all_to_all=True) == pytest.approx(64 / 126)
    # rings across leaves of 4 domains: 4 members per leaf share uplinks 4/2 -> unthrottled
    assert comm.spine_share(64.0, 8.0, 8.0, 32.0, 2.0) == 1.0
    assert comm.spine_share(64.0, 8.0, 8.0, 32.0, 8.0) == pytest.approx(0.5)


# ------------------------------------------------------------------------------- model-level
TOY = dict(layers=4, hidden=1024, heads=16, kv_heads=16, ffn_hidden=4096, vocab=32000, seq_len=1024,
           peak_tflops=989.0, matmul_efficiency=0.8, hbm_gib=80.0, hbm_tbps=3.35, nvlink_gbps=450.0,
           nvlink_domain=8.0, gpus_per_node=8.0, network_gbps=400.0, power_w=700.0, price_usd_per_gpu_hour=2.0,
           global_batch=64, gpus=8, tp=1, pp=1, microbatch=1, zero=0)


def test_offloading_optimizer_removes_12_bytes_per_parameter_and_adds_the_transfer():
    P = fl.total_params(4, 1024, 16, 16, 4096, 0, 32000, 1)
    e_Bps = 1e9  # 1 GB/s: slow enough that every transfer shows
    base = dict(TOY, overlap_grad_reduce=0.0, expansion_gib=64.0, expansion_gbps=e_Bps / 1e9)
    none = evaluate(dict(base, offload=0.0))
    opt = evaluate(dict(base, offload=float(OFFLOAD_CODES["optimizer"])))
    assert none["mem_optimizer_gib"] * GIB == pytest.approx(12 * P)
    assert opt["mem_optimizer_gib"] == 0.0
    assert (none["memory_gib"] - opt["memory_gib"]) * GIB == pytest.approx(12 * P)
    assert opt["expansion_used_gib"] * GIB == pytest.approx(12 * P)
    # Adam on the tier: 28 B/param at 1 GB/s; gradients down (2 B/param) race the DP all-reduce
    # (no overlap with backward here), updated weights up (2 B/param)
    assert opt["time_optimizer_s"] == pytest.approx(28 * P / e_Bps)
    dp = none["dp_comm_total_s"]
    want_offload = max(dp, 2 * P / e_Bps) - dp + 2 * P / e_Bps
    assert opt["time_offload_s"] == pytest.approx(want_offload)
    assert opt["step_time_s"] - none["step_time_s"] == pytest.approx(
        want_offload + 28 * P / e_Bps - none["time_optimizer_s"])


def test_expansion_tier_capacity_is_checked_per_gpu_and_per_node_pool():
    P = fl.total_params(4, 1024, 16, 16, 4096, 0, 32000, 1)
    need_gib = 12 * P / GIB
    cols = dict(TOY, offload=float(OFFLOAD_CODES["optimizer"]), expansion_gbps=50.0)
    assert not evaluate(dict(cols, expansion_gib=0.0))["fits"]
    assert not evaluate(dict(cols, expansion_gib=0.99 * need_gib))["fits"]
    assert evaluate(dict(cols, expansion_gib=1.01 * need_gib))["fits"]
    # pooled: one pool for the node's 8 GPUs
    assert not evaluate(dict(cols, expansion_gib=4 * need_gib, expansion_pooled=1.0))["fits"]
    assert evaluate(dict(cols, expansion_gib=8.1 * need_gib, expansion_pooled=1.0))["fits"]
    # nothing offloaded: no tier needed
    assert evaluate(dict(TOY))["fits"] and evaluate(dict(TOY))["expansion_used_gib"] == 0


def test_activation_offload_frees_hbm_and_is_free_when_the_link_keeps_up(gpt3_columns):
    cols = dict(gpt3_columns, recompute=0.0, expansion_gib=1e4)
    none = evaluate(dict(cols, offload=0.0, expansion_gbps=1e4))
    fast = evaluate(dict(cols, offload=float(OFFLOAD_CODES["activations"]), expansion_gbps=1e4))
    slow = evaluate(dict(cols, offload=float(OFFLOAD_CODES["activations"]), expansion_gbps=1.0))
    assert fast["mem_activations_gib"] < 0.25 * none["mem_activations_gib"]
    assert fast["step_time_s"] == pytest.approx(none["step_time_s"], rel=1e-12)
    assert slow["step_time_s"] > none["step_time_s"] and slow["time_offload_s"] > 0
    assert fast["expansion_used_gib"] > 0.75 * none["mem_activations_gib"]


def test_weight_offload_keeps_only_a_two_layer_buffer(gpt3_columns):
    cols = dict(gpt3_columns, expansion_gib=1e4, expansion_gbps=1e3)
    off = evaluate(dict(cols, offload=float(OFFLOAD_CODES["optimizer+weights"])))
    base = evaluate(cols)
    layer = (12 * 12288**2) / 8  # params per layer per TP rank (the embedding is smaller)
    assert off["mem_weights_gib"] * GIB == pytest.approx(2 * layer * (2 + 2), rel=0.02)
    assert off["mem_gradients_gib"] == 0 and off["mem_optimizer_gib"] == 0
    assert off["memory_gib"] < base["memory_gib"]
    assert off["step_time_s"] > base["step_time_s"]


def test_statistical_efficiency_at_the_critical_batch(gpt3_columns):
    B_tokens = 1536 * 2048
    E_min = 3e11
    out = evaluate(dict(gpt3_columns, target_tokens=E_min, critical_batch_tokens=float(B_tokens)))
    # at B = B_noise: S = 2 S_min = 2 E_min / B_noise and E = 2 E_min (McCandlish eqs. 2.11-2.12)
    assert out["steps_to_target"] == pytest.approx(2 * E_min / B_tokens)
    assert out["tokens_to_target"] == pytest.approx(2 * E_min)
    assert out["statistical_efficiency"] == pytest.approx(0.5)
    assert out["time_to_accuracy_days"] == pytest.approx(2 * E_min / B_tokens * out["step_time_s"] / 86400)
    assert out["cost_to_accuracy_usd"] == pytest.approx(out["time_to_accuracy_days"] * 24 * 1024 * 2.0)
    # no critical batch: perfect scaling, time to accuracy = time to train E_min tokens
    perfect = evaluate(dict(gpt3_columns, target_tokens=E_min))
    assert perfect["time_to_accuracy_days"] == pytest.approx(perfect["time_to_train_days"])
    assert np.isnan(evaluate(gpt3_columns)["time_to_accuracy_days"])


# ------------------------------------------------------------------------------ invariants
def _random_codesign(base, n, seed):
    rng = np.random.default_rng(seed)
    cols = dict(base)
    cols.update(
        tp=rng.choice([1, 2, 4, 8, 16], n).astype(float), pp=rng.choice([1, 2, 4, 8], n).astype(float),
        microbatch=rng.choice([1, 2], n).astype(float), recompute=rng.integers(3, size=n).astype(float),
        sequence_parallel=rng.integers(2, size=n).astype(float), zero=rng.integers(4, size=n).astype(float),
        cp=rng.choice([1, 2], n).astype(float),
        offload=rng.choice(sorted(set(OFFLOAD_CODES.values())), n).astype(float),
        tp_collective=rng.integers(6, size=n).astype(float), dp_collective=rng.integers(6, size=n).astype(float),
        expansion_gib=rng.choice([256.0, 1024.0], n), expansion_gbps=rng.choice([8.0, 32.0, 128.0], n),
        oversubscription=rng.choice([1.0, 2.0, 4.0], n), nvlink_domain=rng.choice([8.0, 72.0], n),
        overlap_grad_reduce=rng.integers(2, size=n).astype(float),
    )
    cols["gpus"] = cols["tp"] * cols["pp"] * cols["cp"] * rng.choice([4, 16, 64], n)
    cols.pop("dp", None)
    return cols


@pytest.mark.parametrize("knob,factor", [("expansion_gbps", 2.0), ("oversubscription", 0.5), ("network_gbps", 2.0),
                                         ("nvlink_gbps", 2.0)])
def test_more_expansion_bandwidth_or_less_oversubscription_is_never_slower(gpt3_columns, knob, factor):
    cols = _random_codesign(gpt3_columns, 4000, 11)
    if knob == "oversubscription":
        cols["oversubscription"] = np.maximum(cols["oversubscription"], 2.0)
    slow = evaluate(cols)["step_time_s"]
    fast = evaluate(dict(cols, **{knob: cols[knob] * factor}))["step_time_s"]
    ok = np.isfinite(slow)
    assert ok.sum() > 1000
    assert np.all(fast[ok] <= slow[ok] * (1 + 1e-12))
    assert np.any(fast[ok] < slow[ok] * 0.999)


def test_breakdown_still_sums_and_vectorized_equals_row_by_row(gpt3_columns):
    cols = _random_codesign(gpt3_columns, 600, 12)
    out = evaluate(cols)
    ok = out["valid"]
    total = sum(out[f"time_{k}_s"] for k in BREAKDOWN_KEYS)
    np.testing.assert_allclose(total[ok], out["step_time_s"][ok], rtol=1e-9)
    mem_total = out["mem_weights_gib"] + out["mem_gradients_gib"] + out["mem_optimizer_gib"] + out["mem_activations_gib"]
    np.testing.assert_allclose(mem_total[ok], out["memory_gib"][ok], rtol=1e-9)
    for i in range(0, 600, 37):
        row = {k: (v[i] if np.ndim(v) else v) for k, v in cols.items()}
        one = evaluate(row)
        for key in ("step_time_s", "memory_gib", "fits", "expansion_used_gib"):
            np.testing.assert_allclose(np.asarray(one[key], float), np.asarray(out[key][i], float), rtol=1e-12)


def test_auto_collectives_never_slower_than_any_single_algorithm(gpt3_columns):
    cols = _random_codesign(gpt3_columns, 3000, 13)
    auto = evaluate(dict(cols, tp_collective=5.0, dp_collective=5.0))["step_time_s"]
    for code in (1.0, 2.0, 3.0, 4.0):
        fixed = evaluate(dict(cols, tp_collective=code, dp_collective=code))["step_time_s"]
        ok = np.isfinite(fixed)
        assert np.all(auto[ok] <= fixed[ok] * (1 + 1e-12))


def test_every_group_honours_the_nvlink_domain(gpt3_columns):
    # with one NVLink domain spanning the job, no group touches the network: its bandwidth is irrelevant
    cols = _random_codesign(gpt3_columns, 2000, 14)
    cols.update(offload=0.0, nvlink_domain=cols["gpus"], oversubscription=4.0)
    a = evaluate(cols)["step_time_s"]
    b = evaluate(dict(cols, network_gbps=gpt3_columns["network_gbps"] * 10))["step_time_s"]
    np.testing.assert_array_equal(a, b)
    cols["nvlink_domain"] = np.full_like(cols["gpus"], 8.0)
    c = evaluate(cols)["step_time_s"]
    d = evaluate(dict(cols, network_gbps=gpt3_columns["network_gbps"] * 10))["step_time_s"]
    assert np.any(d < c * 0.99)


# ------------------------------------------------------------------------------ scenario / CLI
def test_scenario_knobs_reach_the_model(gpt3_scenario):
    sc = dict(gpt3_scenario)
    sc["training"] = dict(sc["training"], target_tokens=3e11, critical_batch_tokens=4e6)
    sc["cluster"] = dict(sc["cluster"], expansion_gib=512, expansion_gbps=64, oversubscription=2, leaf_gpus=256)
    sc["plan"] = dict(sc["plan"], offload="optimizer", tp_collective="auto", dp_collective="hierarchical")
    r = estimate(sc)
    assert r["breakdown_s"]["offload"] >= 0 and r["expansion_used_gib"] > 0 and r["expansion_fits"]
    assert r["breakdown_s"]["optimizer"] > estimate(gpt3_scenario)["breakdown_s"]["optimizer"]
    assert r["time_to_accuracy_days"] > 0 and r["cost_to_accuracy_usd"] > 0
    assert sum(r["breakdown_s"].values()) == pytest.approx(r["step_time_s"])
    bad = dict(gpt3_scenario, plan=dict(gpt3_scenario["plan"], offload="optimizer"))
    with pytest.raises(CosearchError) as err:
        estimate(bad)
    assert "expansion_gbps" in str(err.value)
    with pytest.raises(CosearchError):
        estimate(dict(gpt3_scenario, cluster=dict(gpt3_scenario["cluster"], oversubscription=0.5)))
    with pytest.raises(CosearchError):
        estimate(dict(gpt3_scenario, plan=dict(gpt3_scenario["plan"], dp_collective="butterfly")))


def test_defaults_leave_the_model_unchanged(gpt3_columns):
    base = evaluate(gpt3_columns)
    explicit = evaluate(dict(gpt3_columns, offload=0.0, tp_collective=0.0, dp_collective=0.0, oversubscription=1.0,
                             expansion_gib=0.0, expansion_gbps=0.0, leaf_gpus=np.nan))
    for key in ("step_time_s", "memory_gib", "fits"):
        assert base[key] == explicit[key]
    assert base["time_offload_s"] == 0
