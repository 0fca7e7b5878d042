"""plan.recompute op: torchtitan's per-op selective activation checkpointing (hand-computed memory and
recompute time, its place between selective and full, and the published torchtitan runs it was built for)."""
from __future__ import annotations

import copy

import pytest

import cosearch
from cosearch._cells import _recompute, attention_kernel, gpu_id
from cosearch.errors import CosearchError
from cosearch.model import memory as mem
from cosearch.model.layer import op_sac_recompute_s


def test_op_sac_activations_hand_computed():
    # Llama 3 8B block, micro-batch 2 of 8192 tokens, no TP: kept are the block input (h), wq's output (h),
    # wv's (kv 1024), the attention output (h), w1's (f 14336) and w2's (h): 31,744 16-bit values per token
    kept, none = mem.layer_activation_bytes(8192, 8192, 2, 4096, 32, 1024, 14336, 1, 1, 0, 1.5, 0, dropout=0.0)
    assert kept == 2 * 8192 * 2 * (4096 * 4 + 1024 + 14336)
    # TP 2 with sequence parallelism: the input and w2's reduce-scattered output are split over the sequence,
    # q, the attention output and w1's output over the heads / columns; kv_width is already per rank (512)
    kept_tp, _ = mem.layer_activation_bytes(8192, 8192, 2, 4096, 32, 512, 14336, 1, 2, 1, 1.5, 0, dropout=0.0)
    assert kept_tp == 2 * 8192 * 2 * (2048 + 2 * 2048 + 512 + 7168 + 2048)
    # a GeLU MLP saves no w2 output (its w2 is the second, rerun matmul of the MLP)
    kept_gelu, _ = mem.layer_activation_bytes(2048, 2048, 1, 1024, 16, 1024, 4096, 0, 1, 0, 1.5, 0, dropout=0.0)
    assert kept_gelu == 2 * 2048 * (1024 + 2 * 1024 + 1024 + 4096)
    assert kept < none


def test_op_sac_recompute_matmuls_hand_computed():
    # compute-bound (HBM effectively infinite, no launch overhead): wk, wo and w3 rerun,
    # 2 * tokens * h * (kv + h + f) FLOPs; a GeLU MLP reruns w2 (h x f), the same count
    tok, h, kv, f, rate = 16384.0, 4096.0, 1024.0, 14336.0, 1e15
    want = 2.0 * tok * h * (kv + h + f) / rate
    assert op_sac_recompute_s(tok, h, h, f, kv, 1.0, rate, 1e30, 0.0, 2.0) == pytest.approx(want, rel=1e-12)
    assert op_sac_recompute_s(tok, h, h, f, kv, 0.0, rate, 1e30, 0.0, 2.0) == pytest.approx(want, rel=1e-12)


def _run(model, rc, mb):
    sc = {"model": model, "training": {"global_batch": 64, "precision": "bf16"},
          "cluster": {"gpu": "h100-sxm", "gpus": 8}, "plan": {"zero": 3, "microbatch": mb, "recompute": rc}}
    return cosearch.estimate(copy.deepcopy(sc))


@pytest.mark.parametrize("model", ["llama3-8b", "gpt3-1.3b"])
@pytest.mark.parametrize("mb", [1, 2, 4])
def test_op_sits_between_selective_and_full(model, mb):
    r = {rc: _run(model, rc, mb) for rc in ("none", "selective", "op", "full")}
    mems = [r[k]["memory_gib"] for k in ("none", "selective", "op", "full")]
    assert mems == sorted(mems, reverse=True) and mems[1] > mems[2] > mems[3]
    assert r["selective"]["step_time_s"] < r["op"]["step_time_s"] < r["full"]["step_time_s"]
    # the rerun matmuls count as hardware FLOPs, not model FLOPs
    assert r["op"]["hardware_tflops_per_gpu"] > r["op"]["model_tflops_per_gpu"]
    assert r["op"]["model_tflops_per_gpu"] * r["op"]["step_time_s"] == pytest.approx(
        r["none"]["model_tflops_per_gpu"] * r["none"]["step_time_s"], rel=1e-9)


def test_op_is_refused_for_moe_layers():
    sc = {"model": "mixtral-8x7b", "training": {"global_batch": 64, "precision": "bf16"},
          "cluster": {"gpu": "h100-sxm", "gpus": 64}, "plan": {"ep": 8, "recompute": "op"}}
    with pytest.raises(CosearchError) as err:
        cosearch.estimate(sc)
    assert err.value.field == "plan.recompute" and "none, selective, full" in str(err.value)


def test_torchtitan_cells():
    assert _recompute("selective, torchtitan per-op SAC: saves matmul outputs", "S30") == "op"
    assert _recompute("selective (core_attn)", "S20") == "selective"
    # PyTorch SDPA's flash backend is FlashAttention-2 (not cuDNN on H100, pytorch/pytorch#142132)
    assert attention_kernel("torchtitan (PyTorch FSDP2, torch.compile per block, SDPA; Dec 2024)", False) == "flash2"
    assert attention_kernel("Megatron-Bridge / Megatron-Core (NeMo 26.02)", False) == "flash"
    assert gpu_id("H100 SXM 96GB HBM2e (Grand Teton, 500 W power limit)") == ("h100-sxm", {
        "hbm_gib": 96.0, "hbm_tbps": 2.4, "power_limit_w": 500.0})
    assert gpu_id("H100-SXM-80GB (DGX H100)") == ("h100-sxm", {})


def test_torchtitan_held_out_rows_build_and_h200_memory_matches_the_published_peak():
    # the 34 torchtitan rows all become scenarios; on H200 (32 and 64 GPUs, FSDP, per-op SAC, float8) the
    # model's memory is within 5 % of the peak the source logged (47.96 and 46.97 GiB)
    from cosearch.validation import TORCHTITAN_PATH, build_candidates, load_published_runs, validation_table

    c = build_candidates(load_published_runs(TORCHTITAN_PATH))
    assert not c.skipped and len(c.rows) == 34
    t = validation_table(c).set_index("row_id")
    assert (t.loc[[501, 504, 505, 511, 541], "recompute"] == "op").all()
    assert t.loc[541, "memory_gib"] == pytest.approx(47.96, rel=0.05)
    assert t.loc[542, "memory_gib"] == pytest.approx(46.97, rel=0.05)


def test_fsdp_shards_over_the_context_parallel_ranks_too():
    # the cp ranks hold the same parameters, so FSDP shards over dp x cp (torchtitan's dp_shard_cp mesh): at the
    # same tokens per GPU, FSDP 8 x CP 1, 2 x 4... take the same memory; a stated zero_group (a group of dp
    # ranks) keeps the states replicated over cp: 2 x more here (dp 4, cp 2)
    from cosearch.presets import preset

    def run(cp, zero_group=None):
        model = {k: v for k, v in preset("llama3-8b").items() if k not in ("params_b_reported", "source")}
        model["seq_len"] = 8192 * cp
        plan = {"zero": 3, "cp": cp, "microbatch": 1, "recompute": "full", "recompute_early_stop": True,
                **({"zero_group": zero_group} if zero_group else {})}
        return cosearch.estimate({"model": model, "training": {"global_batch": 8 // cp, "precision": "bf16"},
                                  "cluster": {"gpu": "h100-sxm", "gpus": 8}, "plan": plan})["memory_gib"]

    assert run(1) == pytest.approx(run(2)) == pytest.approx(run(8))
    assert run(2, zero_group=4) > run(2) + 10.0
