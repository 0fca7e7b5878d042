"""Model fidelity on today's stacks: fp8 and dropout-free activation memory, the distributed optimizer
over data x context ranks, pipeline sends split over TP, and the published runs held in the repo.

Expectations are hand-computed from the cited formulas, or measured numbers from the published runs.
"""
from __future__ import annotations

import numpy as np
import pytest

import cosearch
from cosearch.model import memory as mem
from cosearch.validation import build_candidates, load_published_runs, validation_table

S, B, H, A, KV, F = 4096, 1, 8192, 64, 1024, 28672  # Llama-3 70B shapes, one sequence of 4k tokens


def test_dropout_free_layer_keeps_eight_sbh_replicated():
    # no dropout masks: 2 norm inputs + 2 norm outputs = 8 sbh 16-bit bytes replicated (Korthikanti's 10 - 2)
    kw = dict(seq_local=S, seq_full=S, micro=B, hidden=H, heads=A, kv_width=KV, ffn=F, gated=1, tp=1, sp=0,
              recompute=0, attention=0)
    with_drop, _ = mem.layer_activation_bytes(**kw, dropout=1)
    without, _ = mem.layer_activation_bytes(**kw, dropout=0)
    assert with_drop - without == pytest.approx(2 * S * B * H)
    sbh, sbf = S * B * H, S * B * F
    assert without == pytest.approx(8 * sbh + 2 * S * B * (H + 2 * KV) + 2 * sbh + 6 * sbf)


def test_fp8_saves_linear_inputs_in_one_byte():
    # TE keeps the fp8 copies of the QKV and fc1 inputs (norm outputs) and of the fc2 input; the
    # projection input gains a 1-byte copy beside the 16-bit attention output: -2sbh/tp_rep - sbf/tp + sbh/tp
    for tp, sp in ((1, 0), (4, 1), (4, 0)):
        kw = dict(seq_local=S, seq_full=S, micro=B, hidden=H, heads=A, kv_width=KV, ffn=F, gated=1, tp=tp, sp=sp,
                  recompute=0, attention=0, dropout=0)
        b16, _ = mem.layer_activation_bytes(**kw, fp8=0)
        b8, _ = mem.layer_activation_bytes(**kw, fp8=1)
        rep = tp if sp else 1
        assert b16 - b8 == pytest.approx(2 * S * H / rep + S * F / tp - S * H / tp)


def _scenario(**plan):
    return {"model": "llama3-70b", "training": {"global_batch": 64, "precision": "bf16"},
            "cluster": {"gpu": "h100-sxm", "gpus": 64},
            "plan": {"tp": 4, "pp": 4, "interleave": 5, "sequence_parallel": True, "zero": 1, **plan}}


def test_distributed_optimizer_shards_over_data_and_context_ranks():
    # 64 GPUs, tp 4, pp 4: dp*cp = 4 either way; the optimizer shard is 12 B x params / 4 in both plans
    a = cosearch.estimate(_scenario(cp=1))
    b = cosearch.estimate(_scenario(cp=2))
    assert b["dp"] == 2 and a["dp"] == 4
    assert a["memory_breakdown_gib"]["optimizer"] == pytest.approx(b["memory_breakdown_gib"]["optimizer"])
    w = a["memory_breakdown_gib"]["weights"]  # 2 B per parameter on this rank
    assert a["memory_breakdown_gib"]["optimizer"] == pytest.approx(w / 2 * 12 / 4)


def test_pipeline_sends_are_split_over_tensor_parallel_ranks():
    # Megatron's scatter/gather: each TP rank sends 1/tp of the boundary activation, SP or not
    on = cosearch.estimate(_scenario(sequence_parallel=True))
    off = cosearch.estimate(_scenario(sequence_parallel=False))
    assert on["breakdown_s"]["pp_comm"] == pytest.approx(off["breakdown_s"]["pp_comm"])


def test_tp_comm_overlap_hides_tensor_parallel_traffic():
    plain = cosearch.estimate(_scenario())
    overlapped = cosearch.estimate(_scenario(tp_comm_overlap=True))
    assert 0 < overlapped["breakdown_s"]["tp_comm"] < plain["breakdown_s"]["tp_comm"]
    assert overlapped["step_time_s"] < plain["step_time_s"]


def test_async_tp_hides_only_the_forward_collectives():
    # per layer and micro-batch: 2 reductions in the forward, 2 in the backward (+ 2 rerun under full recompute);
    # userbuffers hide 75 % (profile.tp_overlap) of each, PyTorch's async TP only of the forward's
    for rc, rerun in (("none", 0), ("full", 2)):
        plain = cosearch.estimate(_scenario(recompute=rc))["breakdown_s"]["tp_comm"]
        every = cosearch.estimate(_scenario(recompute=rc, tp_comm_overlap=True))["breakdown_s"]["tp_comm"]
        fwd = cosearch.estimate(_scenario(recompute=rc, tp_comm_overlap=True,
                                          tp_overlap_passes="forward"))["breakdown_s"]["tp_comm"]
        total = 4 + rerun
        assert every == pytest.approx(plain * 0.25)
        assert fwd == pytest.approx(plain * (2 * 0.25 + 2 + rerun) / total)
    # without tp_comm_overlap the scope changes nothing
    assert cosearch.estimate(_scenario(tp_overlap_passes="forward"))["step_time_s"] == pytest.approx(
        cosearch.estimate(_scenario())["step_time_s"])


def test_hardware_flops_count_selectively_recomputed_attention():
    # under selective recompute the attention core Q.K^T and A.V runs twice: hardware FLOPs exceed model
    # FLOPs by its forward, 4*s*h per token and layer (Korthikanti et al. 2022 report HFU above MFU)
    sc = {"model": "gpt3-175b", "training": {"global_batch": 1536, "attention": "standard", "dropout": True},
          "cluster": {"gpu": "a100-80gb", "gpus": 1024},
          "plan": {"tp": 8, "pp": 16, "recompute": "selective", "sequence_parallel": True}}
    r = cosearch.estimate(sc)
    ratio = r["hardware_tflops_per_gpu"] / r["model_tflops_per_gpu"]
    # attention core 4sh per token and layer, over the 3 x forward of model FLOPs
    m = cosearch.load_scenario(sc).model
    fwd = 2 * (12 * m.hidden**2) + 4 * m.seq_len * m.hidden + 2 * m.hidden * m.vocab / m.layers
    assert ratio == pytest.approx(1 + 4 * m.seq_len * m.hidden / (3 * fwd), rel=1e-3)
    assert ratio > 1.005


@pytest.fixture(scope="module")
def published():
    return validation_table(build_candidates(load_published_runs()))


def test_published_runs_live_in_the_repo_and_every_stated_plan_but_one_fits(published):
    assert len(published) >= 150
    fp8 = published[published["precision"] == "fp8"]
    assert len(fp8) >= 25
    # every run that states its plan is predicted to fit in memory (DeepSpeed ZeRO-3 530B at micro-batch 4
    # fits only with DeepSpeed's cap on live gathered parameters, not FSDP's two whole layers)
    assert published.loc[~published["fits"], "row_id"].tolist() == []


def test_published_accuracy_of_the_shipped_profile(published):
    # issue 10's median goal (<= 5 %; 4.7 % measured with FlashAttention-2's Hopper rate for the Triton
    # kernel); its p90 goal (<= 15 %) is not met, see README "Accuracy against published runs"
    err = published["error"].abs()
    assert err.median() <= 0.05
    fp8 = published.loc[published["precision"] == "fp8", "error"].abs()
    assert fp8.median() <= 0.08
    # the Llama 3.1 recipe runs in bf16 (DGX Cloud, 8-2,304 H100): within 6 % each, 4.5 % at the median
    # (the shared matmul constant moved from 0.902 to 0.912 when the MosaicML H100 rows got their
    # attention rate, the 128-GPU 8B row going from -4.5 % to -5.6 %; then to 0.916 when the NeMo 24.03-24.07
    # rows got their launcher's FlashAttention-2, the median going from 3.9 % to 4.2 %; then to 0.918 when
    # FlashAttention-2 got its measured forward + backward Hopper rate, the 128-GPU 8B row -5.6 -> -6.1 %)
    s7 = published[(published["source_id"] == "S7") & (published["precision"] == "bf16")]
    assert (s7["error"].abs() <= 0.065).all()
    assert s7["error"].abs().median() <= 0.045


def test_fp8_mfu_is_against_the_fp8_peak():
    # NVIDIA's recipes report fp8 MFU against the 1,979 TFLOP/s fp8 peak of an H100 (S7 rows: 36-45 %)
    r = cosearch.estimate({**_scenario(tp_comm_overlap=True), "training": {"global_batch": 64, "precision": "fp8"}})
    assert r["mfu"] == pytest.approx(r["model_tflops_per_gpu"] / 1978.9, rel=1e-9)
    assert 0.25 < r["mfu"] < 0.6


def test_explain_offers_tp_comm_overlap_when_tensor_parallel():
    from cosearch.explain import rank_changes

    sc = cosearch.load_scenario(_scenario(pp=8, interleave=5))
    ranked = {e["label"]: e for e in rank_changes(sc)}
    entry = ranked["tp_comm_overlap false -> true"]
    assert entry["gain"] > 0.02  # hides most of the TP traffic of a TP-4 plan


def test_deepspeed_live_parameter_cap_shrinks_zero3_gather_buffers():
    # GPT 530B layer: 12 h^2 = 5.03e9 parameters; FSDP gathers the current and the next layer (2 x 2 B x
    # 5.03e9 = 18.75 GiB), DeepSpeed at most max(1e9, the 1.68e9-parameter fc1 weight) = 3.13 GiB
    sc = {"model": {"layers": 105, "hidden": 20480, "heads": 128, "vocab": 51200, "seq_len": 2048},
          "training": {"global_batch": 640, "attention": "standard", "dropout": True},
          "cluster": {"gpu": "a100-80gb", "gpus": 640}, "plan": {"zero": 3, "recompute": "full"}}
    fsdp = cosearch.estimate(sc)["memory_breakdown_gib"]["activations"]
    ds = cosearch.estimate({**sc, "plan": {**sc["plan"], "zero3_live_params": 1e9}})["memory_breakdown_gib"]["activations"]
    h, f = 20480, 4 * 20480
    assert fsdp - ds == pytest.approx((2 * 12 * h * h - h * f) * 2 / 2**30, rel=1e-6)


def test_held_out_blackwell_dense_runs():
    # Megatron-Bridge's dense Llama rows on B200/GB200/GB300/H100 (fp8), never used in a fit: every stated
    # plan fits, and the shipped model is within 8 % at the median (6.5 % measured; README "Held-out")
    from cosearch.validation import BRIDGE_DENSE_PATH

    t = validation_table(build_candidates(load_published_runs(BRIDGE_DENSE_PATH)))
    assert len(t) >= 25 and {"b200", "gb200", "gb300", "h100-sxm"} <= set(t["gpu"])
    assert t["fits"].all()
    assert t["error"].abs().median() <= 0.08


def test_held_out_long_context_runs_fit_and_keep_their_stated_plans():
    # NeMo's long-sequence table (Llama 2 7B fp8, 4k-1M tokens, CP 1-32 on H100): every stated plan fits in
    # 80 GB, and the step time the FLOP rate gives grows with the attention's s^2 share (non-causal count)
    from cosearch.validation import LONG_CONTEXT_PATH

    t = validation_table(build_candidates(load_published_runs(LONG_CONTEXT_PATH)))
    assert len(t) == 9 and t["fits"].all()
    assert list(t["cp"]) == [1, 1, 1, 2, 2, 4, 8, 16, 32] and t["seq_len"].is_monotonic_increasing
    # 4M tokens per step on seq/1k GPUs: 12*s*h*L attention FLOPs per token grow with s while the GPUs grow with it
    per_token_gpu_s = t["measured_step_s"] * t["gpus"] / 4194304
    assert per_token_gpu_s.is_monotonic_increasing
    # that container's launcher ran FlashAttention-2 (NVTE_FUSED_ATTN=0): held out, every row within 15 % and the
    # median within 8 % (at the cuDNN rate they were -10 % at 4k to -34 % at 1M). FA2's rate is the one measured
    # at 8k tokens, and the kernel runs faster on longer sequences: from -1 % at 4k the rows go to +10..+12 % at
    # 512k-1M (README, held-out long sequences); the spread stays under 15 points
    assert t["error"].abs().max() <= 0.15
    assert t["error"].abs().median() <= 0.08
    assert abs(t["error"].iloc[-1] - t["error"].iloc[0]) <= 0.15


def test_fsdp_overlap_is_a_plan_knob_defaulting_to_the_profile():
    from cosearch.model.profile import DEFAULT_PROFILE

    def step(gbs, fo=None):
        plan = {"zero": 3, "microbatch": 1, **({} if fo is None else {"fsdp_overlap": fo})}
        return cosearch.estimate({"model": "llama3-8b", "training": {"global_batch": gbs, "precision": "bf16"},
                                  "cluster": {"gpu": "h100-sxm", "gpus": 16}, "plan": plan})["step_time_s"]

    assert step(32) == step(32, DEFAULT_PROFILE.fsdp_overlap)       # unset: the profile's value
    assert step(32, 1.0) <= step(32, 0.5) < step(32, DEFAULT_PROFILE.fsdp_overlap) < step(32, 0.0)  # never slower
    # with no overlap every micro-batch pays its gathers and reduce-scatter; with full overlap only the
    # first layer's gather stays exposed (8B's compute per micro-batch far exceeds its FSDP traffic), so
    # the saving is the same per micro-batch: twice the micro-batches, twice the saving
    assert step(64, 0.0) - step(64, 1.0) == pytest.approx(2 * (step(32, 0.0) - step(32, 1.0)), rel=1e-9)


def test_prefetching_fsdp_stacks_by_name():
    from cosearch._cells import prefetching_fsdp

    assert prefetching_fsdp("megatron-fsdp (fsdp = 1)", "megatron-bridge / megatron-core (nemo 26.02)")
    assert prefetching_fsdp("fsdp2", "pytorch")
    assert prefetching_fsdp("fsdp", "torchtitan (pytorch fsdp2)")
    assert not prefetching_fsdp("fsdp full_shard", "composer/llm-foundry (pytorch fsdp, triton/flash attention, alibi)")
    assert not prefetching_fsdp("deepspeed zero-3", "deepspeed")


# --- full recompute stopped early (PyTorch >= 2.1 non-reentrant checkpoint, torchtitan; JAX remat) -----------
L1, H1, F1, TOK1 = 24, 2048, 8192, 4 * 2048  # a 1.3B GPT on one H100, micro-batch 4 x 2048 tokens


def _one_gpu(gpus=1, **plan):
    return {"model": {"layers": L1, "hidden": H1, "heads": 16, "ffn_hidden": F1, "vocab": 50304, "seq_len": 2048},
            "training": {"global_batch": 4, "precision": "bf16", "attention": "flash"},
            "cluster": {"gpu": "h100-sxm", "gpus": gpus}, "plan": {"microbatch": 4, **plan}}


def test_recompute_stopped_early_skips_each_layers_fc2_gemm():
    from cosearch import hardware
    from cosearch.model.profile import DEFAULT_PROFILE as P

    full = cosearch.estimate(_one_gpu(recompute="full"))
    early = cosearch.estimate(_one_gpu(recompute="full", recompute_early_stop=True))
    # hand: fc2 is [tok x f] @ [f x h], compute-bound here: t0 + 2*tok*f*h / (peak x eta x matmul_scale)
    rate = hardware.peak_tflops("h100-sxm", "bf16") * 1e12 * hardware.gpu("h100-sxm")["matmul_efficiency"] * P.matmul_scale
    fc2_s = P.gemm_overhead_s + 2.0 * TOK1 * F1 * H1 / rate
    assert full["breakdown_s"]["recompute"] - early["breakdown_s"]["recompute"] == pytest.approx(L1 * fc2_s, rel=1e-9)
    assert full["step_time_s"] - early["step_time_s"] == pytest.approx(L1 * fc2_s, rel=1e-9)  # nothing else moves
    assert early["memory_gib"] == full["memory_gib"]
    # hardware FLOPs: the recomputed forward lacks fc2's 2*h*f per token and layer
    tokens = 4 * 2048
    hw_full = full["hardware_tflops_per_gpu"] * full["step_time_s"]
    hw_early = early["hardware_tflops_per_gpu"] * early["step_time_s"]
    assert (hw_full - hw_early) * 1e12 == pytest.approx(L1 * 2.0 * H1 * F1 * tokens, rel=1e-9)
    # measured on one H100 (PyTorch 2.11, eager, torch.utils.checkpoint(use_reentrant=False)): a full-recompute
    # step of this model costs 1.200x the plain step (experiments/results/gpu/step_h100.csv, gpt-1.3b mb 4)
    plain = cosearch.estimate(_one_gpu(recompute="none"))
    assert early["step_time_s"] / plain["step_time_s"] == pytest.approx(1.200, abs=0.02)
    assert full["step_time_s"] / plain["step_time_s"] > 1.25   # a whole rerun layer costs more


@pytest.mark.parametrize("rc", ["none", "selective"])
def test_early_stop_changes_nothing_without_full_recompute(rc):
    a = cosearch.estimate(_one_gpu(recompute=rc))
    b = cosearch.estimate(_one_gpu(recompute=rc, recompute_early_stop=True))
    assert (a["step_time_s"], a["memory_gib"], a["hardware_tflops_per_gpu"]) == \
        (b["step_time_s"], b["memory_gib"], b["hardware_tflops_per_gpu"])


@pytest.mark.parametrize("sp, rerun_share", [(False, 0.5), (True, 0.75)])
def test_early_stop_skips_the_tensor_parallel_reduction_after_fc2(sp, rerun_share):
    # per layer and micro-batch: 2 all-reduces forward, 2 backward, 2 more for a rerun forward; stopped early the
    # rerun loses the all-reduce after fc2 (1 of 2), under SP its reduce-scatter (half of 1 of 2 pairs)
    tp = {rc: cosearch.estimate(_one_gpu(gpus=2, tp=2, sequence_parallel=sp, recompute=rc))["breakdown_s"]["tp_comm"]
          for rc in ("none", "full")}
    early = cosearch.estimate(_one_gpu(gpus=2, tp=2, sequence_parallel=sp, recompute="full",
                                       recompute_early_stop=True))["breakdown_s"]["tp_comm"]
    assert tp["full"] > tp["none"] > 0
    assert (early - tp["none"]) / (tp["full"] - tp["none"]) == pytest.approx(rerun_share, rel=1e-9)


def test_moe_layers_rerun_their_experts_when_stopped_early():
    # the combine weights the experts' output by the router's probabilities and saves it: nothing is skipped
    sc = {"model": "mixtral-8x7b", "training": {"global_batch": 256, "precision": "bf16"},
          "cluster": {"gpu": "h100-sxm", "gpus": 64},
          "plan": {"tp": 2, "pp": 4, "ep": 8, "sequence_parallel": True, "zero": 1, "recompute": "full"}}
    a = cosearch.estimate(sc)
    b = cosearch.estimate({**sc, "plan": {**sc["plan"], "recompute_early_stop": True}})
    assert a["step_time_s"] == b["step_time_s"] and a["hardware_tflops_per_gpu"] == b["hardware_tflops_per_gpu"]
