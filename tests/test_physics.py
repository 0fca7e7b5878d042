"""Hand-computed and published numbers for the model's physics, independent of the catalog."""
import numpy as np
import pytest

from cosearch import estimate
from cosearch.model import communication as comm
from cosearch.model import flops as fl
from cosearch.model import memory as mem


def test_gpt3_parameter_count_matches_paper():
    # 12*l*h^2 + V*h for GPT-3 175B: Narayanan et al. report 174.6B.
    n = fl.total_params(96, 12288, 96, 96, 49152, 0, 51200, 1)
    assert n == 12 * 96 * 12288**2 + 51200 * 12288
    assert n / 1e9 == pytest.approx(174.6, abs=0.05)


def test_model_flops_equals_6n_plus_attention():
    # PaLM (Chowdhery et al. 2022, App. B): 6N + 12*l*h*s per token with tied embeddings.
    l, h, s, V = 96, 12288, 2048, 51200
    n = fl.total_params(l, h, 96, 96, 4 * h, 0, V, 1)
    assert fl.model_flops_per_token(l, h, 96, 96, 4 * h, 0, V, s) == pytest.approx(6 * n + 12 * l * h * s, rel=1e-12)


def test_recompute_flops_match_megatron_eq3():
    # Eq. 3 of Narayanan et al. counts one extra forward of every layer (not of the logits).
    l, h, s, V, B = 96, 12288, 2048, 51200, 1536
    per_token = fl.model_flops_per_token(l, h, 96, 96, 4 * h, 0, V, s)
    layer_fwd = l * (fl.layer_matmul_flops_per_token(h, 96, 96, 4 * h, 0) + fl.attention_flops_per_token(h, s))
    assert (per_token + layer_fwd) * B * s == pytest.approx(fl.megatron_flops_per_iteration(B, s, l, h, V), rel=1e-12)


def test_gqa_and_gated_mlp_parameters_llama2_70b():
    # Llama 2 70B: 80 layers, h 8192, 64 heads, 8 KV heads, SwiGLU 28672, vocab 32000 untied -> 68.98B
    # (+ norms) reported as 70B; hand count: 80*(8192*(8192+2*1024) + 8192^2 + 3*8192*28672) + 2*32000*8192.
    n = fl.total_params(80, 8192, 64, 8, 28672, 1, 32000, 0)
    assert n == 80 * (8192 * (8192 + 2 * 1024) + 8192**2 + 3 * 8192 * 28672) + 2 * 32000 * 8192
    assert n / 1e9 == pytest.approx(68.98, abs=0.01)


def test_adam_bytes_per_parameter_and_zero_paper_figure1():
    # Rajbhandari et al. 2020, Fig. 1: 7.5B parameters, 64-way data parallel, K = 12.
    psi, nd = 7.5e9, 64
    base = sum(mem.model_state_bytes(psi, 0, nd, 0))
    assert base / psi == 16
    assert base / 1e9 == pytest.approx(120)
    assert sum(mem.model_state_bytes(psi, 1, nd, 0)) / 1e9 == pytest.approx(31.4, abs=0.05)
    assert sum(mem.model_state_bytes(psi, 2, nd, 0)) / 1e9 == pytest.approx(16.6, abs=0.05)
    assert sum(mem.model_state_bytes(psi, 3, nd, 0)) / 1e9 == pytest.approx(1.9, abs=0.05)


def test_optimizer_state_precisions_by_hand():
    # 1e9 parameters, no sharding: 16-bit weights and gradients (2 + 2 B) plus the optimizer states:
    # fp32 master + m + v 12 B; fp32 master + bf16 m, v 8 B (DeepSeek-V3 sec. 3.3.3); bf16 m, v only 4 B.
    for code, total in ((0, 16e9), (1, 12e9), (2, 8e9)):
        opt = mem.optimizer_bytes(np.float64(code))[0]
        assert sum(mem.model_state_bytes(1e9, 0, 1, 0, optimizer_bytes=opt)) == total
    # ZeRO-1 over 8 divides only the optimizer share: 4 + 8/8 = 5 B per parameter with bf16 moments
    opt = mem.optimizer_bytes(np.array([1.0]))[0]
    assert sum(mem.model_state_bytes(1e9, 1, 8, 0, optimizer_bytes=opt))[0] == pytest.approx(5e9)
    # Adam's traffic per owned parameter: 2(2+4+4+4), 2(2+4+2+2), read 4 x 2 B + write 3 x 2 B,
    # read 4 x 2 B + write 4 x 2 B (Apex's bf16 master, m, v and the bf16 weight)
    assert [mem.optimizer_bytes(np.float64(c))[1] for c in (0, 1, 2, 3)] == [28.0, 20.0, 14.0, 16.0]
    # the held bytes per code, on a mixed column: 12, 8, 4 and 6 (2 B each of Apex's master copy, m and v)
    assert list(mem.optimizer_bytes(np.array([0.0, 1.0, 2.0, 3.0]))[0]) == [12.0, 8.0, 4.0, 6.0]


def test_optimizer_states_change_memory_and_update_time_only():
    base = {"model": "llama3-8b", "training": {"global_batch": 64}, "cluster": {"gpu": "h100-sxm", "gpus": 8},
            "plan": {"zero": 1}}
    out = {o: estimate({**base, "training": {"global_batch": 64, "optimizer_states": o}})
           for o in ("fp32", "bf16_moments", "bf16", "bf16_master")}
    opt = [out[o]["memory_breakdown_gib"]["optimizer"] for o in ("fp32", "bf16_moments", "bf16", "bf16_master")]
    assert opt[0] / opt[1] == pytest.approx(12 / 8) and opt[0] / opt[2] == pytest.approx(12 / 4)
    assert opt[0] / opt[3] == pytest.approx(12 / 6)
    upd = [out[o]["breakdown_s"]["optimizer"] for o in ("fp32", "bf16_moments", "bf16", "bf16_master")]
    assert upd[0] / upd[1] == pytest.approx(28 / 20) and upd[0] / upd[2] == pytest.approx(28 / 14)
    assert upd[0] / upd[3] == pytest.approx(28 / 16)
    for o in ("bf16_moments", "bf16", "bf16_master"):  # nothing else moves
        assert out[o]["memory_breakdown_gib"]["weights"] == out["fp32"]["memory_breakdown_gib"]["weights"]
        assert out[o]["breakdown_s"]["compute"] == out["fp32"]["breakdown_s"]["compute"]


def test_ring_all_reduce_time_hand_computed():
    # 1 GB over 8 ranks at 100 GB/s: 2 * 7/8 * 1e9 / 1e11 = 17.5 ms, plus 6 latency steps (2*log2 8).
    assert comm.all_reduce_s(1e9, 8, 100e9, 0.0) == pytest.approx(17.5e-3)
    assert comm.all_reduce_s(1e9, 8, 100e9, 1e-5) == pytest.approx(17.5e-3 + 6e-5)
    assert comm.all_reduce_s(1e9, 1, 100e9, 1e-5) == 0.0
    assert comm.all_gather_s(1e9, 4, 100e9, 0.0) == pytest.approx(7.5e-3)


def test_default_ring_all_gather_latency_counts_intra_node_steps_at_nvlink_latency():
    # NCCL's tuning model (src/graph/tuning.cc): a ring all-gather over N ranks in n nodes takes N-1
    # steps, n-1 of them across the network; the N-n others stay on NVLink. 512 ranks at stride 1 in
    # 8-GPU domains (n = 64), 1 GB gathered, 50 GB/s NICs (8 per node: 400 GB/s < NVLink's 450 GB/s),
    # latencies 4 us (NVLink) and 10 us (network), 3 separate calls (one per layer):
    from cosearch.model import collectives as coll

    f = coll.Fabric(450e9, 50e9, 4e-6, 10e-6, 8.0)
    want = 511 / 512 * 1e9 / 400e9 + 3 * (448 * 4e-6 + 63 * 10e-6)
    assert coll.legacy_time_s("all_gather", 1e9, 512.0, 1.0, f, calls=3.0) == pytest.approx(want)
    # one rank per node (stride 8): every step crosses the network, at one NIC's rate
    want = 63 / 64 * 1e9 / 50e9 + 63 * 10e-6
    assert coll.legacy_time_s("all_gather", 1e9, 64.0, 8.0, f) == pytest.approx(want)
    # inside one domain: all steps on NVLink
    assert coll.legacy_time_s("all_gather", 1e9, 8.0, 1.0, f) == pytest.approx(7 / 8 * 1e9 / 450e9 + 7 * 4e-6)


def test_link_selection_nvlink_inside_node_network_across():
    nvl, net = 300e9, 25e9
    assert comm.group_bandwidth_Bps(8, 1, 8, nvl, net) == nvl            # TP=8 inside a DGX
    assert comm.group_bandwidth_Bps(16, 1, 8, nvl, net) == 8 * net       # TP=16 spans two nodes, 8 NICs each
    assert comm.group_bandwidth_Bps(64, 8, 8, nvl, net) == net           # DP with TP=8: one rank per node
    assert comm.group_bandwidth_Bps(64, 2, 8, nvl, net) == 4 * net       # DP with TP=2: 4 ranks per node


def test_activation_memory_matches_korthikanti_table2():
    # Korthikanti et al. 2022, eq. 1-2: sbh(34 + 5as/h) per layer; with TP t and SP: sbh(34/t + 5as/(ht)).
    s, b, h, a = 2048, 1, 12288, 96
    for t, sp in ((1, 0), (8, 0), (8, 1)):
        got, none = mem.layer_activation_bytes(s, s, b, h, a, h / t, 4 * h, 0, t, sp, 0, 1)  # K width per TP rank
        if sp or t == 1:
            want = s * b * h * (34 / t + 5 * a * s / (h * t))
        else:
            want = s * b * h * (10 + 24 / t + 5 * a * s / (h * t))
        assert got == pytest.approx(want) and none == got
    full, _ = mem.layer_activation_bytes(s, s, b, h, a, h / 8, 4 * h, 0, 8, 1, 2, 1)
    assert full == pytest.approx(2 * s * b * h / 8)


@pytest.mark.parametrize("attention", [0, 1])
def test_recompute_modes_order_activation_memory(attention):
    kw = dict(seq_local=4096, seq_full=4096, micro=2, hidden=8192, heads=64, kv_width=1024, ffn=28672, gated=1, tp=4, sp=1)
    by_mode = [mem.layer_activation_bytes(**kw, recompute=r, attention=attention)[0] for r in (0, 1, 2)]
    assert by_mode[2] < by_mode[1] < by_mode[0]


def test_inflight_layers_1f1b_and_interleaved():
    assert mem.inflight_layers(6, 16, 1, 64) == pytest.approx(96)         # p micro-batches of l/p layers
    assert mem.inflight_layers(6, 16, 1, 4) == pytest.approx(24)          # fewer micro-batches than stages
    assert mem.inflight_layers(12, 8, 2, 64) == pytest.approx(96 * (1 + 7 / 16))
    assert mem.inflight_layers(6, 16, 1, 64, rank=1) == pytest.approx(6 * 15)  # the second rank: one fewer


def test_embedding_and_loss_may_take_a_virtual_stage_each():
    # Megatron-Bridge's Llama 3.1 405B recipe: 126 layers on PP 16 x VP 8 = 128 virtual stages (the embedding
    # and the loss take one each): 8 layers (one per virtual stage) on the middle ranks, 7 on the first and last
    from cosearch.errors import CosearchError
    from cosearch.model.columns import broadcast_columns
    from cosearch.model.feasibility import check_scalar
    from cosearch.scenario import parse_scenario, scenario_columns
    assert [float(x) for x in mem.stage_layers(126, 16, 8)] == [8.0, 7.0, 7.0]
    sc = {"model": "llama3-405b", "training": {"global_batch": 2048}, "cluster": {"gpu": "gb300", "gpus": 256},
          "plan": {"tp": 4, "pp": 16, "interleave": 8, "microbatch": 1}}
    check_scalar(broadcast_columns(scenario_columns(parse_scenario(sc))))                  # 128 = 126 + 2: runs
    sc["plan"].update(pp=8, interleave=17)                               # 136 > 128: refused in one line
    with pytest.raises(CosearchError, match=r"pp\*interleave \(8\*17\) must not exceed model.layers \(126\) \+ 2"):
        check_scalar(broadcast_columns(scenario_columns(parse_scenario(sc))))


def test_uneven_pipeline_split_puts_the_short_stages_first_and_last():
    # Llama 3 405B: 126 layers on 16 stages -> 8 layers on 14 ranks, 7 on the first and the last
    # (Dubey et al. 2024, sec. 3.3.2). Even splits are unchanged.
    assert [float(x) for x in mem.stage_layers(126, 16, 1)] == [8.0, 7.0, 7.0]
    assert [float(x) for x in mem.stage_layers(127, 16, 1)] == [8.0, 7.0, 8.0]
    assert [float(x) for x in mem.stage_layers(96, 16, 1)] == [6.0, 6.0, 6.0]
    assert [float(x) for x in mem.stage_layers(126, 16, 4)] == [8.0, 7.0, 7.0]
    assert [float(x) for x in mem.stage_layers(126, 1, 1)] == [126.0, 126.0, 126.0]
    # peak stored layer-activations: first rank 7 x 16 = 112, second rank 8 x 15 = 120
    peak = max(mem.inflight_layers(7, 16, 1, 64), mem.inflight_layers(8, 16, 1, 64, rank=1))
    assert peak == pytest.approx(120)


def test_kernel_rates_follow_the_catalog_by_hand():
    """evaluate's rate chain on the H100 catalog entry, by hand: the GEMM formula's fitted eta is 0.707 where the
    largest GEMMs reach 0.80 (hardware.REFERENCE_FIT_ETA), so bf16 GEMMs run at peak x 0.707 x matmul_scale and
    fp8 GEMMs at the fp8 peak x 0.70 x 0.707/0.80 x matmul_scale, with 16-bit math staying at the bf16 rate;
    fused attention at flash_attention_relative of the 16-bit GEMM rate, FlashAttention-2 capped at its measured
    281.8 TFLOP/s (0.285 of the 16-bit peak), and HBM at hbm_efficiency of 3.35 TB/s."""
    from cosearch.model.columns import ATTENTION_CODES
    from cosearch.model.evaluate import kernel_rates
    from cosearch.model.profile import DEFAULT_PROFILE as P
    from cosearch.scenario import ClusterSpec, hardware_values

    def rates(precision, kind):
        cols = hardware_values(ClusterSpec(gpu="h100-sxm", gpus=8), precision)
        return kernel_rates({**cols, "precision": 1.0 if precision == "fp8" else 0.0,
                             "attention": float(ATTENTION_CODES[kind])}, P)

    bf16 = rates("bf16", "flash")
    assert bf16.gemm_Fps == pytest.approx(989.4e12 * 0.707 * P.matmul_scale)
    assert bf16.gemm16_Fps == pytest.approx(bf16.gemm_Fps)
    assert bf16.attn_Fps == pytest.approx(bf16.gemm16_Fps * min(P.flash_attention_relative, 1.0))
    assert bf16.hbm_Bps == pytest.approx(3.35e12 * P.hbm_efficiency)
    fp8 = rates("fp8", "flash")
    assert fp8.gemm_Fps == pytest.approx(1978.9e12 * 0.70 * (0.707 / 0.80) * P.matmul_scale)
    # attention and non-GEMM math stay 16-bit: half the fp8 peak (1978.9 / 2 = 989.45 against the bf16 989.4)
    assert fp8.gemm16_Fps == pytest.approx(bf16.gemm16_Fps, rel=1e-4)
    assert fp8.attn_Fps == pytest.approx(bf16.attn_Fps, rel=1e-4)
    fa2 = rates("bf16", "flash2")
    # FlashAttention-2: the 35 % forward cap times its measured forward + backward share (281.8 TFLOP/s on one H100)
    assert fa2.attn_Fps == pytest.approx(min(bf16.attn_Fps, 281.8e12))


@pytest.mark.parametrize("tp", [1, 2])
def test_eager_cross_entropy_holds_twelve_bytes_per_logit(tp):
    # training.cross_entropy: PyTorch's F.cross_entropy on fp32 logits keeps the fp32 log-softmax and, at its
    # backward, nll_loss's and log_softmax's fp32 gradients (12 B per logit) where the fused loss keeps 6 B;
    # only the last stage's activations move, by tokens x vocab/tp x 6 B. By hand: 2 x 8192 tokens, vocab 128,256.
    def run(ce):
        return estimate({"model": "llama3-8b", "training": {"global_batch": 64, "precision": "bf16", "cross_entropy": ce},
                         "cluster": {"gpu": "h100-sxm", "gpus": 8},
                         "plan": {"tp": tp, "pp": 1, "microbatch": 2, "zero": 3, "recompute": "full",
                                  "sequence_parallel": tp > 1}})
    fused, eager = run("fused"), run("eager")
    extra_gib = 2 * 8192 * 128_256 / tp * 6 / 2**30
    assert eager["memory_breakdown_gib"]["activations"] - fused["memory_breakdown_gib"]["activations"] == pytest.approx(extra_gib)
    assert eager["memory_gib"] - fused["memory_gib"] == pytest.approx(extra_gib)
    assert eager["step_time_s"] == fused["step_time_s"]  # memory only: its extra HBM passes (about 1 % of a step) are not charged
