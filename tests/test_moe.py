"""Mixture-of-experts, MLA and expert parallelism (issue 13): hand-computed cases, published counts,
invariants, feasibility and the shipped search space."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import experiment_script, random_rows

from cosearch.errors import CosearchError
from cosearch.estimate import estimate
from cosearch.model import evaluate, evaluate_scalar, scalar_columns
from cosearch.model.evaluate import BREAKDOWN_KEYS
from cosearch.model.profile import DEFAULT_PROFILE as P
from cosearch.presets import preset, presets
from cosearch.scenario import parse_scenario, scenario_columns
from cosearch.search.space import load_space

ROOT = Path(__file__).resolve().parent.parent
GIB = 2.0**30


def cols_of(sc: dict) -> dict:
    return scalar_columns(scenario_columns(parse_scenario(sc)))


def run(sc: dict) -> dict:
    return evaluate_scalar(scenario_columns(parse_scenario(sc)))


# ----------------------------------------------------------------------------- published counts
MOE_PRESETS = sorted(n for n, p in presets().items() if p.get("experts"))


def test_every_moe_preset_is_listed():
    assert set(MOE_PRESETS) >= {"mixtral-8x7b", "mixtral-8x22b", "deepseek-v3", "qwen3-30b-a3b", "qwen3-235b-a22b",
                                "gpt-oss-20b", "gpt-oss-120b", "llama4-scout", "llama4-maverick"}


@pytest.mark.parametrize("name", MOE_PRESETS)
def test_total_and_active_parameters_match_the_published_counts(name):
    """Each preset's total and activated parameters against the count its source publishes
    (models.yaml: params_b_reported, active_params_b_reported, with the source)."""
    p = presets()[name]
    out = run({"model": name, "training": {"global_batch": 64}, "cluster": {"gpu": "h100-sxm", "gpus": 8}})
    active = out["active_params"]
    if p.get("active_excludes_input_embedding"):  # OpenAI's gpt-oss table leaves the input embedding out
        active -= p["vocab"] * p["hidden"]
    assert out["params"] / 1e9 == pytest.approx(p["params_b_reported"], rel=0.02)
    assert active / 1e9 == pytest.approx(p["active_params_b_reported"], rel=0.02)
    assert out["active_params"] < out["params"]


def test_deepseek_v3_parameters_by_hand():
    """DeepSeek-V3 (config.json) layer by layer:
    MLA  q_down 7168*1536 = 11,010,048; q_up 1536*128*(128+64) = 37,748,736; kv_down 7168*(512+64) =
         4,128,768; kv_up 512*128*(128+128) = 16,777,216; out 128*128*7168 = 117,440,512 -> 187,105,280
    dense MLP 3*7168*18432 = 396,361,728 (3 layers); router 7168*256 = 1,835,008;
    one expert 3*7168*2048 = 44,040,192 (1 shared + 256 routed, 8 active), 58 MoE layers;
    embeddings 2*129280*7168 = 1,853,358,080."""
    mla, dense, router, expert, emb = 187_105_280, 396_361_728, 1_835_008, 44_040_192, 1_853_358_080
    total = 3 * (mla + dense) + 58 * (mla + router + 257 * expert) + emb
    active = 3 * (mla + dense) + 58 * (mla + router + 9 * expert) + emb
    out = run({"model": "deepseek-v3", "training": {"global_batch": 64}, "cluster": {"gpu": "h800", "gpus": 8}})
    assert out["params"] == pytest.approx(total, rel=1e-12)       # 671.03e9 (published 671B)
    assert out["active_params"] == pytest.approx(active, rel=1e-12)  # 37.55e9 (published 37B)
    # model FLOPs per token (MFU numerator): 3 x (2 x active weights less the input-embedding lookup
    # + scores and values 2*s*heads*(d_qk + d_v) per layer = 2*4096*128*(192+128) = 335,544,320, x 61)
    # + the preset's one MTP module (num_nextn_predict_layers 1): one more MoE layer, its [h; h] -> h
    # projection 2*7168*7168 weights and a second pass through the 129280 x 7168 output head
    core = 2 * 4096 * 128 * (192 + 128)
    mtp_head = 2 * (2 * 7168 * 7168) + 2 * 7168 * 129280 + core
    per_token = 3 * (2 * (active - emb // 2) + 61 * core + 2 * (mla + router + 9 * expert) + mtp_head)
    flops = out["model_tflops_per_gpu"] * 1e12 * out["step_time_s"] * out["gpus"]
    assert flops / (64 * 4096) == pytest.approx(per_token, rel=1e-12)   # 2.92e11 FLOPs per token (2.80e11 without MTP)
    total_flops = out["total_param_tflops_per_gpu"] * 1e12 * out["step_time_s"] * out["gpus"]
    assert total_flops / (64 * 4096) == pytest.approx(
        3 * (2 * (total - emb // 2) + 61 * core + 2 * (mla + router + 257 * expert) + mtp_head), rel=1e-12)


def test_dense_model_with_moe_columns_is_unchanged():
    """A dense row evaluated beside MoE rows gets exactly the values it gets alone."""
    dense = {"model": "llama3-70b", "training": {"global_batch": 512, "tokens": 1e12},
             "cluster": {"gpu": "h100-sxm", "gpus": 512}, "plan": {"tp": 8, "pp": 4, "sequence_parallel": True, "zero": 1}}
    moe = {"model": "mixtral-8x7b", "training": {"global_batch": 512, "tokens": 1e12},
           "cluster": {"gpu": "h100-sxm", "gpus": 512}, "plan": {"tp": 2, "pp": 4, "ep": 8, "sequence_parallel": True}}
    a, b = cols_of(dense), cols_of(moe)
    both = evaluate({k: np.array([a[k], b[k]]) for k in a})
    alone = evaluate(a)
    for key in ("step_time_s", "memory_gib", "model_tflops_per_gpu", "params", "time_dp_comm_s"):
        assert both[key][0] == alone[key]
        assert both[key][1] == evaluate(b)[key]
    grid = evaluate({k: np.array([[a[k]], [b[k]]]) for k in a})  # 2-D: one pass, rows picked in place
    for key in ("step_time_s", "memory_gib", "model_tflops_per_gpu", "params", "time_dp_comm_s"):
        assert grid[key][0, 0] == both[key][0] and grid[key][1, 0] == both[key][1]
    assert both["time_ep_comm_s"][0] == 0.0 and both["time_ep_comm_s"][1] > 0.0
    assert both["active_params"][0] == both["params"][0]


# ----------------------------------------------------------------------------- all-to-all by hand
def _tiny(ep: int, microbatches: int = 1, **plan) -> dict:
    return {"model": {"layers": 2, "hidden": 1024, "heads": 8, "ffn_hidden": 1024, "gated_mlp": True, "vocab": 1024,
                      "seq_len": 1024, "experts": 16, "top_k": 2},
            "training": {"global_batch": 16 * microbatches, "moe_load_imbalance": 1.0},
            "cluster": {"gpu": "h100-sxm", "gpus": 16},  # 2 nodes of 8, NVLink 450 GB/s, 400 Gb/s NIC per GPU
            "plan": {"ep": ep, **plan}}


def test_all_to_all_inside_one_node_by_hand():
    """ep 8 (one node): per layer and micro-batch a GPU holds 1024 tokens, sends 1024*top_k 2 copies of
    1024 bf16 values = 4,194,304 B, of which 7/8 leave it (3,670,016 B, i.e. 3,584 B per token) over
    NVLink at 450e9*0.78 B/s; one latency of 4 us. Dispatch + combine forward, the same backward:
    4 all-to-alls per layer, 2 layers, 1 micro-batch."""
    per_token = 2 * 1024 * 2 * 7 / 8
    assert per_token == 3584
    t = 1024 * per_token / (450e9 * P.nvlink_efficiency) + P.nvlink_latency_s
    out = run(_tiny(8))
    assert out["time_ep_comm_s"] == pytest.approx(2 * 4 * t, rel=1e-12)


def test_all_to_all_across_nodes_by_hand():
    """ep 16 over 2 nodes: of each token's 2*1024*2 = 4,096 B, 7/16 go to the 7 peers in the node
    (1,792 B over NVLink) and 8/16 to the 8 peers in the other node (2,048 B through the GPU's own
    400 Gb/s NIC at 0.85 efficiency = 42.5e9 B/s). Both links run at once: the slower, the NIC, sets
    the time, plus a network latency."""
    nvl = 1024 * 1792 / (450e9 * P.nvlink_efficiency)
    nic = 1024 * 2048 / (400e9 / 8 * P.network_efficiency)
    t = max(nvl, nic) + P.network_latency_s
    out = run(_tiny(16))
    assert out["time_ep_comm_s"] == pytest.approx(2 * 4 * t, rel=1e-12)
    assert out["time_ep_comm_s"] > 4 * run(_tiny(8))["time_ep_comm_s"]  # 2,048 B at 42.5 GB/s vs 3,584 at 351 GB/s


def test_deepep_sends_each_token_once_per_remote_node_by_hand():
    """DeepEP dispatch, ep 16 over 2 nodes, top_k 2: a token reaches the other node with probability
    1 - (1/2)^2 = 0.75 and then crosses the network once (1024 values, 2,048 B): 1,536 B per token over
    the NIC instead of 2,048; inside the node the copies are forwarded over NVLink, 7/8 of all
    4,096 B = 3,584 B per token."""
    nic = 1024 * 0.75 * 2048 / (400e9 / 8 * P.network_efficiency)
    nvl = 1024 * 3584 / (450e9 * P.nvlink_efficiency)
    t = max(nic, nvl) + P.network_latency_s
    assert run(_tiny(16, moe_dispatcher="deepep"))["time_ep_comm_s"] == pytest.approx(2 * 4 * t, rel=1e-12)
    limited = _tiny(16, moe_dispatcher="deepep")
    limited["model"]["routed_nodes_limit"] = 1  # at most one node: no change with two nodes (0.75 < 1)
    assert run(limited)["time_ep_comm_s"] == pytest.approx(2 * 4 * t, rel=1e-12)


def test_fp8_dispatch_sends_one_byte_and_combines_in_bf16():
    """DeepSeek-V3 sec. 3.3.2 (plan.moe_fp8_dispatch): fp8 dispatch, bf16 combine -> forward bytes 1 + 2
    instead of 2 + 2; the backward pair stays 2 + 2."""
    sc = _tiny(8, moe_fp8_dispatch=True)
    sc["training"]["precision"] = "fp8"
    t2 = 1024 * 3584 / (450e9 * P.nvlink_efficiency) + P.nvlink_latency_s
    t1 = 1024 * 1792 / (450e9 * P.nvlink_efficiency) + P.nvlink_latency_s
    assert run(sc)["time_ep_comm_s"] == pytest.approx(2 * (t1 + 3 * t2), rel=1e-12)


def test_megatron_core_dispatches_in_16_bits_under_fp8():
    """Megatron-Core sends token copies in bf16 whatever the GEMM precision (its HybridEP buffer asserts
    fp8_dispatch off): an fp8 run without plan.moe_fp8_dispatch moves the bf16 run's bytes, 2 layers x
    4 all-to-alls of 3,584 B per token; the knob does nothing under bf16."""
    t2 = 1024 * 3584 / (450e9 * P.nvlink_efficiency) + P.nvlink_latency_s
    sc = _tiny(8)
    sc["training"]["precision"] = "fp8"
    assert run(sc)["time_ep_comm_s"] == pytest.approx(2 * 4 * t2, rel=1e-12)
    assert run(_tiny(8, moe_fp8_dispatch=True))["time_ep_comm_s"] == run(_tiny(8))["time_ep_comm_s"]
    on = dict(sc, plan=dict(sc["plan"], moe_fp8_dispatch=True))
    assert run(on)["time_ep_comm_s"] < run(sc)["time_ep_comm_s"]


def test_paired_overlap_hides_each_transfer_under_its_partner_phase_by_hand():
    """DualPipe / Megatron 1F1B pairing (DeepSeek-V3 Fig. 4): forward dispatch 3 under backward MLP 1 leaves 2,
    forward combine 2 under backward attention 2.5 leaves 0; backward combine 2 under forward attention 1 leaves 1,
    backward dispatch 2 under forward MLP 4 leaves 0. The layer's 8.5 of compute exceeds its 9 of transfers only
    once they may hide anywhere; paired, 3 stay exposed. Half the phases usable: 2.5 + 0.75 and 1.5 + 0."""
    from cosearch.model.moe import paired_a2a_exposed_s

    args = ((3.0, 2.0), (2.0, 2.0), (1.0, 4.0), (2.5, 1.0))
    assert paired_a2a_exposed_s(*args, 1.0) == (2.0, 1.0)
    assert paired_a2a_exposed_s(*args, 0.0) == (5.0, 4.0)
    assert paired_a2a_exposed_s(*args, 0.5) == (3.25, 1.5)
    arrays = paired_a2a_exposed_s(*(tuple(np.full(3, x) for x in pair) for pair in args), np.array([0.0, 0.5, 1.0]))
    assert np.array_equal(arrays[0], [5.0, 3.25, 2.0]) and np.array_equal(arrays[1], [4.0, 1.5, 1.0])


def test_hidden_all_to_all_still_costs_the_sms_its_kernels_hold():
    """Inside one node (ep 8) every paired transfer hides under its partner phase; what remains is the compute
    slowed by the 20 of 132 SMs the communication kernels hold (DeepSeek-V3 sec. 3.2.2): 20 / 112 of the
    transfers. Of 8 micro-batches 7 pair (a step's first forward and last backward have no partner), so the
    charge is 7/8 x 20/112 + 1/8 of the transfers. Across nodes (ep 16, here on 100 Gb/s NICs so that the transfers
    outlast their partner phase) some also shows, so it is larger."""
    share = 7 / 8 * 20.0 / (132.0 - 20.0) + 1 / 8

    def sc(ep, **plan):
        out = _tiny(ep, 8, **plan)
        if ep > 8:
            out["cluster"]["network_gbps"] = 100.0
        return out

    for ep, exact in ((8, True), (16, False)):
        exposed = run(sc(ep))["time_ep_comm_s"]  # no overlap: every transfer shows
        hidden = run(sc(ep, moe_a2a_overlap=1.0))["time_ep_comm_s"]
        if exact:
            assert hidden == pytest.approx(share * exposed, rel=1e-9)
        else:
            assert share * exposed < hidden < exposed


def test_more_overlap_never_exposes_more_all_to_all():
    """Across expert-parallel widths (in the node and across it) and recompute modes, the exposed expert
    communication never grows with plan.moe_a2a_overlap, and full overlap hides some of it."""
    for ep in (4, 8, 16):
        for rc in ("none", "selective", "full"):
            times = [run(_tiny(ep, 4, moe_a2a_overlap=ov, recompute=rc))["time_ep_comm_s"] for ov in (0.0, 0.25, 0.5, 1.0)]
            assert all(a >= b for a, b in zip(times, times[1:])), (ep, rc, times)
            assert times[0] > times[-1] >= 0.0


def test_overlap_capacity_and_imbalance_move_the_right_way():
    base = run(_tiny(16, 4))
    hidden = run(_tiny(16, 4, moe_a2a_overlap=1.0))
    assert hidden["time_ep_comm_s"] < base["time_ep_comm_s"] and hidden["step_time_s"] < base["step_time_s"]
    imb = _tiny(16, 4)
    imb["training"]["moe_load_imbalance"] = 1.5
    worse = run(imb)
    assert worse["time_ep_comm_s"] == pytest.approx(1.5 * base["time_ep_comm_s"], rel=0.2)  # latency unscaled
    assert worse["time_compute_s"] > base["time_compute_s"]
    capped = _tiny(16, 4, capacity_factor=1.0)
    capped["training"]["moe_load_imbalance"] = 1.5
    assert run(capped)["time_ep_comm_s"] == pytest.approx(base["time_ep_comm_s"], rel=1e-12)  # min(1.5, 1.0)
    assert run(_tiny(1))["time_ep_comm_s"] == 0.0


# ----------------------------------------------------------------------------- memory by hand
def test_deepseek_v3_last_stage_memory_by_hand():
    """DeepSeek-V3 on 2,048 H800, tp 1, pp 16, ep 64, dp 128, bf16, ZeRO-1, full recompute.
    61 layers on 16 stages: 4 per stage, 3 on the first and last. The last stage holds 3 MoE layers
    and the output layer:
      non-expert 3*(187,105,280 MLA + 1,835,008 router + 44,040,192 shared) + 926,679,040 = 1,625,620,480
      experts    3 layers * 256/64 = 4 local experts * 44,040,192                         =   528,482,304
    weights 2 B and gradients 2 B per parameter; Adam's 12 B sharded over dp*cp = 128 (non-expert)
    and over the expert-data-parallel group tp*cp*dp/(ep*etp) = 128/64 = 2 (experts).
    It is the peak rank here: its fp32 logits buffer (4096*129280*6 B = 3.2 GB) outweighs the
    activations the middle ranks keep."""
    dense, experts = 1_625_620_480, 528_482_304
    sc = {"model": "deepseek-v3", "training": {"global_batch": 15360, "precision": "bf16"},
          "cluster": {"gpu": "h800", "gpus": 2048},
          "plan": {"tp": 1, "pp": 16, "ep": 64, "zero": 1, "recompute": "full"}}
    out = run(sc)
    assert out["mem_weights_gib"] * GIB == pytest.approx(2 * (dense + experts), rel=1e-12)
    assert out["mem_gradients_gib"] * GIB == pytest.approx(2 * (dense + experts), rel=1e-12)
    assert out["mem_optimizer_gib"] * GIB == pytest.approx(12 * dense / 128 + 12 * experts / 2, rel=1e-12)
    # ep 32: twice the experts per GPU (8), expert-DP group 4
    sc["plan"]["ep"] = 32
    out = run(sc)
    assert out["mem_weights_gib"] * GIB == pytest.approx(2 * (dense + 2 * experts), rel=1e-12)
    assert out["mem_optimizer_gib"] * GIB == pytest.approx(12 * dense / 128 + 12 * 2 * experts / 4, rel=1e-12)


@pytest.mark.parametrize("plan", [
    {"pp": 16},
    {"pp": 16, "schedule": "zb-h1"},
    {"pp": 16, "schedule": "dualpipe"},
    {"pp": 16, "zero": 3},
    {"pp": 16, "zero": 3, "zero3_live_params": 1e8},
    {"pp": 16, "offload": "all"},
])
def test_a_moe_model_never_reads_the_dense_ffn_hidden(plan):
    """DeepSeek-V3 states its dense layers' width (dense_ffn_hidden) and its experts' (expert_ffn_hidden):
    the generic ffn_hidden is then used by no layer, so no answer may move with it (the ZeRO-3 gather buffers,
    DeepSpeed's sub-module floor, offload's streaming buffers and the zero-bubble W pass once read it)."""
    def one(ffn):
        sc = {"model": {**preset("deepseek-v3"), "ffn_hidden": ffn},
              "training": {"global_batch": 15360, "precision": "fp8"},
              "cluster": {"gpu": "h800", "gpus": 2048, "expansion_gib": 4096, "expansion_gbps": 400},
              "plan": {"tp": 1, "ep": 64, "microbatch": 1, "recompute": "none", **plan}}
        out = run(sc)
        assert out["valid"], out
        return out["step_time_s"], out["memory_gib"]
    assert one(2048) == one(18432) == one(50000)


def test_zero_bubble_deferred_w_memory_of_a_moe_layer_by_hand():
    """ZB-H1 keeps, per deferred W pass, each linear layer's input (2 B) and output gradient (2 B). Tiny MoE
    layer, h 1024, 8 heads of 128 (MHA), 16 experts of 1024 (gated), top-2, tp 1, 1024 tokens a micro-batch:
      QKV   in 1024, out 3*1024          -> 2*1024 + 2*3072       =  8,192 B a token
      proj  in 1024, out 1024             ->                           4,096
      each of the 2 routed copies: fc1 in 1024, out 2*1024; fc2 in 1024, out 1024 -> 2*(6,144 + 4,096) = 20,480
    = 32,768 B a token, 33,554,432 B a layer. On 4 stages of one layer the last rank holds min(p-1, m-1) pending
    W passes (Qi et al. sec. 2.3): 1 with 2 micro-batches, 3 with 4, so its memory grows by 2 M_W (full
    recompute keeps the last rank the peak)."""
    def mem(global_batch):
        sc = {"model": {"layers": 4, "hidden": 1024, "heads": 8, "ffn_hidden": 1024, "gated_mlp": True,
                        "vocab": 1024, "seq_len": 1024, "experts": 16, "top_k": 2},
              "training": {"global_batch": global_batch, "moe_load_imbalance": 1.0, "precision": "bf16"},
              "cluster": {"gpu": "h100-sxm", "gpus": 4},
              "plan": {"pp": 4, "tp": 1, "microbatch": 1, "recompute": "full", "schedule": "zb-h1"}}
        return run(sc)["memory_gib"] * GIB
    m_w = 1024 * (8192 + 4096 + 2 * (6144 + 4096))
    assert m_w == 33_554_432
    assert mem(4) - mem(2) == pytest.approx(2 * m_w, rel=1e-12)
    assert mem(8) == mem(4)  # at most p-1 = 3 pending


# ----------------------------------------------------------------------------- consistency
def test_breakdown_sums_and_scalar_equals_vectorized_for_moe():
    sc = {"model": "deepseek-v3", "training": {"global_batch": 4096, "precision": "fp8", "tokens": 1e12},
          "cluster": {"gpu": "h800", "gpus": 1024},
          "plan": {"tp": 2, "pp": 8, "ep": 32, "sequence_parallel": True, "zero": 1, "recompute": "selective",
                   "moe_a2a_overlap": 0.5, "capacity_factor": 1.1}}
    c = scenario_columns(parse_scenario(sc))
    s, v = evaluate_scalar(c), evaluate(c)
    for key in ("step_time_s", "memory_gib", "time_ep_comm_s", "active_params", "total_param_tflops_per_gpu"):
        assert s[key] == pytest.approx(np.asarray(v[key]).item(), rel=1e-12)
    assert sum(s[f"time_{k}_s"] for k in BREAKDOWN_KEYS) == pytest.approx(s["step_time_s"], rel=1e-9)
    assert s["valid"] and s["time_ep_comm_s"] > 0
    # MFU counts active parameters; the total-parameter rate is 671/37.5 ~ 18x larger
    assert 10 < s["total_param_tflops_per_gpu"] / s["model_tflops_per_gpu"] < 20


def test_fsdp_with_experts_shards_expert_weights_over_expert_dp():
    sc = {"model": "mixtral-8x7b", "training": {"global_batch": 256}, "cluster": {"gpu": "h100-sxm", "gpus": 64},
          "plan": {"ep": 8, "zero": 3}}
    z1 = run({**sc, "plan": {"ep": 8, "zero": 1}})
    z3 = run(sc)
    assert z3["mem_weights_gib"] < z1["mem_weights_gib"] / 4  # experts over edp = 8, the rest over dp = 64


# ----------------------------------------------------------------------------- rules and errors
@pytest.mark.parametrize("change, field", [
    ({"plan": {"ep": 3}}, "plan.ep"),                                   # 8 experts
    ({"plan": {"ep": 16, "tp": 8}}, "plan.ep"),                         # dp*cp = 64/8 = 8 < 16
    ({"plan": {"ep": 2, "tp": 2}}, "plan.sequence_parallel"),          # Megatron-Core needs SP with TP + EP
    ({"plan": {"ep": 2, "etp": 3}}, "plan.etp"),                        # 3 does not divide 14336
    ({"plan": {"ep": 2, "burst": True}}, "plan.burst"),                # DeepPool burst with MoE: not modelled
])
def test_invalid_expert_plans_name_the_field(change, field):
    sc = {"model": "mixtral-8x7b", "training": {"global_batch": 256}, "cluster": {"gpu": "h100-sxm", "gpus": 64}}
    with pytest.raises(CosearchError) as err:
        estimate({**sc, **change})
    assert err.value.field == field
    assert not evaluate(scenario_columns(parse_scenario({**sc, **change})))["valid"]


def test_ep_divides_dp_times_cp_as_megatron():
    """Megatron-Core: with etp = tp, ep must divide dp*cp; etp*ep must divide tp*cp*dp."""
    base = {"model": "mixtral-8x7b", "training": {"global_batch": 256}, "cluster": {"gpu": "h100-sxm", "gpus": 64}}
    ok = lambda plan: bool(evaluate(scenario_columns(parse_scenario({**base, "plan": plan})))["valid"])  # noqa: E731
    assert ok({"tp": 8, "ep": 8, "sequence_parallel": True})             # dp 8
    assert ok({"tp": 4, "cp": 2, "ep": 8, "sequence_parallel": True})    # dp*cp = 8*2 = 16
    assert ok({"tp": 8, "etp": 1, "ep": 8, "sequence_parallel": True})   # etp*ep = 8 divides 64
    assert not ok({"tp": 8, "etp": 8, "ep": 16, "sequence_parallel": True})
    with pytest.raises(CosearchError) as err:
        estimate({"model": "llama3-8b", "training": {"global_batch": 256}, "cluster": {"gpu": "h100-sxm", "gpus": 64},
                  "plan": {"ep": 2}})
    assert err.value.field == "plan.ep"


@pytest.mark.parametrize("model, field", [
    ({"experts": 8}, "model.top_k"),
    ({"experts": 8, "top_k": 9}, "model.top_k"),
    ({"top_k": 2}, "model.top_k"),
    ({"attention": "mla", "kv_lora_rank": 512}, "model.qk_rope_head_dim"),
    ({"kv_lora_rank": 512}, "model.kv_lora_rank"),
    ({"attention": "mha", "kv_heads": 8}, "model.attention"),
    ({"attention": "moa"}, "model.attention"),
])
def test_bad_moe_model_fields_are_one_line_errors(model, field):
    base = {"layers": 4, "hidden": 1024, "heads": 16, "vocab": 1000, "seq_len": 512}
    with pytest.raises(CosearchError) as err:
        parse_scenario({"model": {**base, **model}, "training": {"global_batch": 8}, "cluster": {"gpu": "h100-sxm", "gpus": 8}})
    assert err.value.field == field
    assert "\n" not in str(err.value)


# ----------------------------------------------------------------------------- search and export
def test_readme_worked_example_runs_on_an_unpriced_cluster_and_matches_its_committed_answer():
    """experiments/moe_worked_example.py fixes the shipped space's cluster to 2,048 H800, which has no list
    price: it must still rank the plans (by time) rather than be refused for the space's cost objective, and
    its answer must be the committed one the README quotes (stop 41 found the script refusing since stop 40)."""
    import json

    import yaml
    example = experiment_script("moe_worked_example")
    data = yaml.safe_load(example.SPACE.read_text())
    got = example.fastest(data, "h800", 2048, "grouped")
    committed = next(r for r in json.loads(example.OUT.read_text())["rows"]
                     if (r["gpu"], r["gpus"], r["kernel"]) == ("h800", 2048, "grouped"))
    assert got["plan"] == committed["plan"] and got["plan"]["schedule"] in ("dualpipe", "zb-v")  # a V-shaped layout
    assert got["days"] == pytest.approx(committed["days"], rel=1e-9)


def test_shipped_deepseek_v3_space_searches_ep_and_finds_feasible_plans():
    space = load_space(ROOT / "searchspaces" / "moe-deepseek-v3.yaml")
    paths = {d.path for d in space.dims}
    assert {"plan.ep", "plan.etp", "plan.capacity_factor", "plan.schedule", "cluster.gpu"} <= paths
    schedules = next(d for d in space.dims if d.path == "plan.schedule").choices
    assert {"1f1b", "zb-h1", "zb-v", "dualpipe"} <= set(schedules)
    gpus = next(d for d in space.dims if d.path == "cluster.gpu").choices
    assert "h800" in gpus and "b200" in gpus
    rows = random_rows(space, 400, seed=1)
    m = space.evaluate_rows(rows)
    assert m["feasible"].any() and (m["time_ep_comm_s"][m["valid"]] >= 0).all()
    i = int(np.flatnonzero(m["valid"])[0])
    sc = space.scenarios(rows[i:i + 1])[0]
    assert estimate(sc)["step_time_s"] == pytest.approx(m["step_time_s"][i], rel=1e-12)


def test_megatron_export_maps_expert_parallelism():
    from cosearch.frameworks import megatron

    sc = parse_scenario({"model": "qwen3-30b-a3b", "training": {"global_batch": 256},
                         "cluster": {"gpu": "h100-sxm", "gpus": 64},
                         "plan": {"tp": 2, "ep": 8, "etp": 1, "sequence_parallel": True, "capacity_factor": 1.25}})
    f = megatron.flags(sc)
    pairs = dict(zip(f, f[1:]))
    assert pairs["--num-experts"] == "128" and pairs["--moe-router-topk"] == "8"
    assert pairs["--expert-model-parallel-size"] == "8" and pairs["--expert-tensor-parallel-size"] == "1"
    assert pairs["--moe-ffn-hidden-size"] == "768" and pairs["--kv-channels"] == "128"
    assert pairs["--moe-expert-capacity-factor"] == "1.25"
    with pytest.raises(CosearchError) as err:
        from cosearch.frameworks import nemo

        nemo.export(sc)
    assert err.value.field == "model.experts"


def test_megatron_export_refuses_one_launch_grouped_gemms():
    """Megatron-Core has no one-launch grouped GEMM to export (TE GroupedLinear and the legacy
    grouped_gemm build launch one GEMM per expert): a plan that assumes one is refused, naming the field."""
    from cosearch.frameworks import megatron

    sc = {"model": "qwen3-30b-a3b", "training": {"global_batch": 256}, "cluster": {"gpu": "h100-sxm", "gpus": 64},
          "plan": {"ep": 8}}
    assert "--moe-grouped-gemm" in megatron.flags(parse_scenario(sc))  # the default, per_expert, exports
    sc["plan"]["moe_grouped_gemm"] = "grouped"
    with pytest.raises(CosearchError) as err:
        megatron.flags(parse_scenario(sc))
    assert err.value.field == "plan.moe_grouped_gemm" and "per_expert" in str(err.value)


def test_per_expert_gemm_launches_by_hand():
    """One GEMM launch per local expert costs GROUPED_GEMM_LAUNCH_S = 25 us each (TE PR #3134: 0.267 ms for
    8 experts through the multi-stream path vs 0.069 ms in one launch): 2 expert GEMMs forward and 4 backward
    (data and weight gradients) per MoE layer and micro-batch, 2 more under full recompute. Tiny model,
    2 layers, 1 micro-batch, 16 experts: ep 8 holds 2 per GPU (2*2*6*25 us = 0.6 ms), ep 2 holds 8 (2.4 ms)."""
    from cosearch.model.moe import GROUPED_GEMM_LAUNCH_S

    assert GROUPED_GEMM_LAUNCH_S == pytest.approx((0.267e-3 - 0.069e-3) / 8, rel=0.02)  # 24.75 us, rounded
    for ep, rc, launches in ((8, "none", 6), (8, "full", 8), (2, "none", 6), (2, "full", 8)):
        one = run(_tiny(ep, moe_grouped_gemm="grouped", recompute=rc))
        each = run(_tiny(ep, moe_grouped_gemm="per_expert", recompute=rc))
        extra = 2 * (16 / ep) * launches * 25e-6
        got = (each["time_compute_s"] + each["time_recompute_s"]) - (one["time_compute_s"] + one["time_recompute_s"])
        assert got == pytest.approx(extra, rel=1e-9)
        assert each["step_time_s"] > one["step_time_s"]
    dense = {"model": {"layers": 2, "hidden": 1024, "heads": 8, "ffn_hidden": 1024, "vocab": 1024, "seq_len": 1024},
             "training": {"global_batch": 16}, "cluster": {"gpu": "h100-sxm", "gpus": 16}}
    assert run(dict(dense, plan={"moe_grouped_gemm": "grouped"}))["step_time_s"] == run(dense)["step_time_s"]


def test_megatron_export_refuses_fp8_dispatch_under_fp8():
    from cosearch.frameworks import megatron

    plan = {"ep": 8, "moe_fp8_dispatch": True}
    bf16 = parse_scenario({"model": "qwen3-30b-a3b", "training": {"global_batch": 256},
                           "cluster": {"gpu": "h100-sxm", "gpus": 64}, "plan": plan})
    assert "--num-experts" in megatron.flags(bf16)  # bf16: the knob changes nothing, nothing to refuse
    fp8 = parse_scenario({"model": "qwen3-30b-a3b", "training": {"global_batch": 256, "precision": "fp8"},
                          "cluster": {"gpu": "h100-sxm", "gpus": 64}, "plan": plan})
    with pytest.raises(CosearchError) as err:
        megatron.flags(fp8)
    assert err.value.field == "plan.moe_fp8_dispatch"


def test_unfused_attention_on_an_extended_layer_is_refused_not_priced_as_flash():
    """The MoE/MLA layer prices fused attention only: ``training.attention: standard`` there was silently
    the flash price (same step time and memory); now a one-line error naming the field, in the scalar and
    the vectorized path. A dense model keeps unfused attention (slower than flash, as measured in 2019-21)."""
    moe_sc = {"model": "mixtral-8x7b", "training": {"global_batch": 256, "precision": "bf16", "attention": "standard"},
              "cluster": {"gpu": "h100-sxm", "gpus": 64},
              "plan": {"tp": 2, "ep": 8, "microbatch": 1, "sequence_parallel": True}}
    with pytest.raises(CosearchError, match=r"^training\.attention: .*allowed there: flash, triton, flash2"):
        estimate(moe_sc)
    cols = scenario_columns(parse_scenario({**moe_sc, "training": {**moe_sc["training"], "attention": "flash"}}))
    both = {k: np.array([v, v]) for k, v in cols.items()}
    both["attention"] = np.array([0.0, 1.0])  # flash, standard
    assert evaluate(both)["valid"].tolist() == [True, False]
    head_dim = {"model": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "vocab": 128256,
                          "seq_len": 8192, "head_dim": 128, "gated_mlp": True},  # no experts: the extended layer too
                "training": {"global_batch": 64, "precision": "bf16", "attention": "standard"},
                "cluster": {"gpu": "h100-sxm", "gpus": 8}, "plan": {"microbatch": 1}}
    with pytest.raises(CosearchError, match=r"^training\.attention: "):
        estimate(head_dim)
    dense = {"model": "gpt3-175b", "training": {"global_batch": 1536, "precision": "bf16"},
             "cluster": {"gpu": "a100-80gb", "gpus": 1024}, "plan": {"tp": 8, "pp": 8, "microbatch": 1}}
    unfused = estimate({**dense, "training": {**dense["training"], "attention": "standard"}})["step_time_s"]
    assert unfused > estimate(dense)["step_time_s"]


def test_expert_tp_defaults_to_tp_on_every_input_kind():
    """One rule for etp's default (Megatron-Core: expert TP = TP when unset), on model columns (NaN),
    plain floats (the scalar path) and a Scenario's None."""
    from cosearch.model.moe import expert_tp

    got = expert_tp(np.array([np.nan, 2.0, 1.0]), np.array([4.0, 4.0, 8.0]))
    assert got.tolist() == [4.0, 2.0, 1.0]
    assert expert_tp(float("nan"), 8.0) == 8.0
    assert expert_tp(1.0, 8.0) == 1.0
    assert expert_tp(None, 2) == 2


def test_mla_up_projection_recompute_frees_qkv_and_reruns_the_up_projections_by_hand():
    """DeepSeek-V3 on one stage (pp 1, one micro-batch of 4,096 tokens, tp 1): 61 layers plus the MTP layer
    each keep q and k (128 heads x 192) and v (128 x 128) in 16 bits, 2 * 4096 * 65,536 B = 0.5 GiB; with
    plan.recompute_mla_up_proj they are freed (62 * 0.5 = 31 GiB less) and the backward reruns the q
    (1,536 -> 24,576) and kv (512 -> 32,768) up-projections: 62 * 2 * 4096 * (1536*24576 + 512*32768) FLOPs,
    which take at least their time at the H800's bf16 peak. Under full recompute the flag is moot."""
    sc = {"model": "deepseek-v3", "training": {"global_batch": 64, "precision": "bf16"},
          "cluster": {"gpu": "h800", "gpus": 64}, "plan": {"tp": 1, "pp": 1, "ep": 64, "zero": 1, "recompute": "none"}}
    up_flops = 62 * 2 * 4096 * (1536 * 24576 + 512 * 32768)
    for rc in ("none", "selective"):
        base = run({**sc, "plan": {**sc["plan"], "recompute": rc}})
        up = run({**sc, "plan": {**sc["plan"], "recompute": rc, "recompute_mla_up_proj": True}})
        assert base["num_microbatches"] == 1
        assert (base["mem_activations_gib"] - up["mem_activations_gib"]) * GIB == pytest.approx(62 * 2 * 4096 * 65536, rel=1e-12)
        extra_s = up["time_recompute_s"] - base["time_recompute_s"]
        assert up_flops / 989.4e12 < extra_s < up_flops / (0.3 * 989.4e12)
        assert up["step_time_s"] - base["step_time_s"] == pytest.approx(extra_s, rel=1e-9)
    full = run({**sc, "plan": {**sc["plan"], "recompute": "full"}})
    full_up = run({**sc, "plan": {**sc["plan"], "recompute": "full", "recompute_mla_up_proj": True}})
    assert full_up["memory_gib"] == full["memory_gib"] and full_up["step_time_s"] == full["step_time_s"]


def test_mla_up_projection_recompute_needs_latent_attention():
    with pytest.raises(CosearchError, match=r"^plan\.recompute_mla_up_proj: needs model\.attention: mla"):
        estimate({"model": "mixtral-8x7b", "training": {"global_batch": 64}, "cluster": {"gpu": "h100-sxm", "gpus": 8},
                  "plan": {"ep": 8, "recompute_mla_up_proj": True}})


def test_megatron_export_and_import_keep_the_mla_up_projection_recompute():
    from cosearch.frameworks import megatron

    base = {"model": "deepseek-v3", "training": {"global_batch": 1024, "precision": "bf16"},
            "cluster": {"gpu": "h800", "gpus": 256}, "plan": {"tp": 1, "pp": 1, "ep": 32, "zero": 1}}  # pp 1: 61 layers
    for rc, modules in (("none", ["mla_up_proj"]), ("selective", ["core_attn", "mla_up_proj"])):
        sc = parse_scenario({**base, "plan": {**base["plan"], "recompute": rc, "recompute_mla_up_proj": True}})
        f = [str(x) for x in megatron.flags(sc)]
        i = f.index("--recompute-modules")
        assert f[i - 1] == "selective" and f[i + 1:i + 1 + len(modules)] == modules
        back = megatron.parse_args(f, {"gpu": "h800", "gpus": 256})
        assert (back.plan.recompute, back.plan.recompute_mla_up_proj) == (rc, True)
        assert estimate(back)["memory_gib"] == pytest.approx(estimate(sc)["memory_gib"], rel=1e-12)
    # a module the model does not have is a one-line error naming the flag
    f = [str(x) for x in megatron.flags(parse_scenario({**base, "plan": {**base["plan"], "recompute": "selective"}}))]
    with pytest.raises(CosearchError, match=r"^--recompute-modules: layernorm is not modelled; allowed: core_attn"):
        megatron.parse_args(f + ["--recompute-modules", "layernorm", "mla_up_proj"], {"gpu": "h800", "gpus": 256})


@pytest.mark.parametrize("ep,expert_layers_gathered", [(8, 0), (4, 2)])
def test_zero3_gathers_routed_experts_only_where_they_are_sharded(ep, expert_layers_gathered):
    """ZeRO-3 on Mixtral 8x7B (8 GPUs, tp 1): the gather buffers hold two layers of what is sharded. With ep 8 the
    expert-data-parallel group is 1, the experts stay resident whole and only attention and router are gathered;
    with ep 4 (edp 2) each GPU's 2 local experts are gathered too. By hand: attention 2*4096^2 + 2*4096*1024,
    router 4096*8; an expert 3*4096*14336 (SwiGLU); 16-bit; the buffer is the zero-3 minus zero-2 activations."""
    def act_gib(zero):
        return estimate({"model": "mixtral-8x7b", "training": {"global_batch": 256},
                         "cluster": {"gpu": "h100-sxm", "gpus": 8},
                         "plan": {"tp": 1, "pp": 1, "ep": ep, "zero": zero, "recompute": "full"}}
                        )["memory_breakdown_gib"]["activations"]
    attention_router = 2 * 4096 ** 2 + 2 * 4096 * 1024 + 4096 * 8
    local_experts = (8 // ep) * 3 * 4096 * 14336
    per_layer = attention_router + (local_experts if expert_layers_gathered else 0)
    assert (act_gib(3) - act_gib(2)) * 2 ** 30 == pytest.approx(2 * per_layer * 2, rel=1e-9)


@pytest.mark.parametrize("etp,shown", [(3, "(8*3)"), (None, "(8*4)")])
def test_ep_etp_rule_names_the_expert_tp_in_use(etp, shown):
    """The ep*etp rule prints the etp it checked (the plan's, or tp where none is given), not the letters 'etp'."""
    plan = {"tp": 4, "pp": 1, "ep": 8, "sequence_parallel": True, **({"etp": etp} if etp else {})}
    with pytest.raises(CosearchError) as err:
        estimate({"model": "qwen3-235b-a22b", "training": {"global_batch": 1024},
                  "cluster": {"gpu": "h100-sxm", "gpus": 16}, "plan": plan})
    assert err.value.field == "plan.ep" and shown in str(err.value), str(err.value)


def test_mla_up_projection_rerun_counts_in_hardware_flops():
    """plan.recompute_mla_up_proj reruns MLA's q and kv up-projections in the backward: hardware FLOPs add them.
    DeepSeek-V3 by hand: q_up 1536 x 128 heads x 192 (nope 128 + rope 64), kv_up 512 x 128 x (128 + 128), 2 FLOPs
    a weight and token, 61 layers; 1,024 sequences of 4,096 tokens a step."""
    sc = {"model": "deepseek-v3", "training": {"global_batch": 1024, "precision": "bf16"},
          "cluster": {"gpu": "h800", "gpus": 256},
          "plan": {"tp": 1, "pp": 16, "ep": 16, "recompute": "selective", "recompute_mla_up_proj": True}}
    r = estimate(sc)
    up_flops = 61 * 2 * (1536 * 128 * 192 + 512 * 128 * 256) * 1024 * 4096
    extra_tflops = up_flops / (r["step_time_s"] * 256) / 1e12
    assert r["hardware_tflops_per_gpu"] - r["model_tflops_per_gpu"] == pytest.approx(extra_tflops, rel=1e-9)


def test_all_to_all_overlap_needs_another_micro_batch_to_pair_with():
    """The overlap pairs one micro-batch's forward chunk with another's backward: with one micro-batch a step there
    is none (before, it hid 82 % of Mixtral's all-to-all at global batch 16 on 16 GPUs), and a step's first forward
    and last backward stay exposed: per micro-batch, exposure = (m-1)/m x paired + 1/m x unpaired."""
    def ep_per_mb(batch, overlap):
        r = estimate({"model": "mixtral-8x7b", "training": {"global_batch": batch}, "cluster": {"gpu": "h100-sxm", "gpus": 16},
                      "plan": {"tp": 1, "pp": 1, "ep": 8, "moe_a2a_overlap": overlap}})
        return r["breakdown_s"]["ep_comm"] / (batch // 16)
    unpaired = ep_per_mb(16, 0.0)
    assert ep_per_mb(16, 1.0) == pytest.approx(unpaired, rel=1e-12)
    paired = (ep_per_mb(64, 1.0) - 0.25 * unpaired) / 0.75     # m = 4
    assert paired < 0.5 * unpaired
    assert ep_per_mb(32, 1.0) == pytest.approx(0.5 * paired + 0.5 * unpaired, rel=1e-9)  # m = 2


@pytest.mark.parametrize("field", ["shared_ffn_hidden", "dense_ffn_hidden"])
def test_a_width_with_nothing_to_apply_to_is_refused(field):
    """shared_ffn_hidden without shared experts, or dense_ffn_hidden without dense layers, was ignored silently."""
    model = {**preset("mixtral-8x7b"), field: 4096}
    with pytest.raises(CosearchError) as err:
        parse_scenario({"model": model, "training": {"global_batch": 8}, "cluster": {"gpu": "h100-sxm", "gpus": 8}})
    assert err.value.field == f"model.{field}"


def test_capacity_below_the_mean_load_warns_that_tokens_are_dropped():
    """capacity_factor < 1 drops token copies even with balanced routing: the step is shorter for computing
    fewer of them, and estimate says so; dropless and capacity 1 (nothing dropped when balanced) stay silent."""
    sc = {"model": "mixtral-8x7b", "training": {"global_batch": 256}, "cluster": {"gpu": "h100-sxm", "gpus": 64},
          "plan": {"ep": 8, "zero": 1}}
    half = estimate({**sc, "plan": {**sc["plan"], "capacity_factor": 0.5}})
    dropless = estimate(sc)
    assert half["step_time_s"] < dropless["step_time_s"]
    [w] = [w for w in half["warnings"] if "capacity_factor" in w]
    assert "0.5 < 1" in w and "at least 50 % of the token copies are dropped" in w
    for plan in ({}, {"capacity_factor": 1.0}, {"capacity_factor": 1.25}):
        r = estimate({**sc, "plan": {**sc["plan"], **plan}})
        assert not any("capacity_factor" in w for w in r["warnings"])
