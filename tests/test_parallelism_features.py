"""Hybrid sharding, context parallelism, grouped-query attention, fp8 and NVL72 domains."""
import numpy as np
import pytest

from cosearch import CosearchError, estimate
from cosearch.model import evaluate


def _llama(**plan):
    base = {"tp": 1, "pp": 1, "microbatch": 1, "recompute": "full", "zero": 3}
    base.update(plan)
    return {"model": "llama3-70b", "training": {"global_batch": 512, "tokens": 1e12},
            "cluster": {"gpu": "h100-sxm", "gpus": 64}, "plan": base}


def test_hybrid_sharding_shards_states_over_the_group_only():
    full = estimate(_llama())
    hsdp = estimate(_llama(zero_group=8))
    m = full["memory_breakdown_gib"], hsdp["memory_breakdown_gib"]
    params = full["params"]
    # 16 bytes/parameter over 64 GPUs vs over 8 GPUs
    assert (m[0]["weights"] + m[0]["gradients"] + m[0]["optimizer"]) * 2**30 == pytest.approx(16 * params / 64, rel=0.02)
    assert (m[1]["weights"] + m[1]["gradients"] + m[1]["optimizer"]) * 2**30 == pytest.approx(16 * params / 8, rel=0.02)
    # the gathers stay on NVLink inside a node: less exposed communication than sharding over 64
    assert hsdp["breakdown_s"]["dp_comm"] < full["breakdown_s"]["dp_comm"]


def test_context_parallel_splits_activations_and_exchanges_kv():
    long = {"model": {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "gated_mlp": True,
                      "vocab": 128256, "seq_len": 65536, "tied_embeddings": False},
            "training": {"global_batch": 64}, "cluster": {"gpu": "h100-sxm", "gpus": 64},
            "plan": {"tp": 8, "cp": 1, "recompute": "selective", "sequence_parallel": True, "zero": 1}}
    one = estimate(long)
    two = estimate({**long, "plan": {**long["plan"], "cp": 2}})
    act1, act2 = one["memory_breakdown_gib"]["activations"], two["memory_breakdown_gib"]["activations"]
    assert act2 == pytest.approx(act1 / 2, rel=0.1)
    assert one["breakdown_s"]["cp_comm"] == 0


def test_cp_exchange_hidden_behind_long_attention_but_not_short():
    base = dict(layers=8.0, hidden=4096.0, heads=32.0, kv_heads=8.0, ffn_hidden=14336.0, gated_mlp=1.0, vocab=32000.0,
                global_batch=8.0, peak_tflops=989.0, matmul_efficiency=0.7, hbm_gib=80.0, hbm_tbps=3.35, nvlink_gbps=450.0,
                nvlink_domain=8.0, gpus_per_node=8.0, network_gbps=25.0, power_w=700.0, price_usd_per_gpu_hour=3.0,
                gpus=16.0, tp=8.0, cp=2.0, sequence_parallel=1.0)
    out = evaluate(dict(base, seq_len=np.array([2048.0, 131072.0])))
    per_token = out["time_cp_comm_s"] / np.array([2048.0, 131072.0])
    assert per_token[0] > 0           # short sequences: the K/V exchange over a slow network shows
    assert per_token[1] < per_token[0]  # long sequences: attention work hides more of it


def test_gqa_shrinks_kv_weights_and_activations():
    mha = estimate(_llama(tp=8))
    sc = _llama(tp=8)
    sc["model"] = {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 64, "ffn_hidden": 28672, "gated_mlp": True,
                   "vocab": 128256, "seq_len": 8192, "tied_embeddings": False}
    no_gqa = estimate(sc)
    assert mha["params"] < no_gqa["params"]
    assert mha["params"] == pytest.approx(70.55e9, rel=0.01)   # Llama 3 70B: 70.6B


def test_fp8_faster_than_bf16_on_h100_and_rejected_on_a100():
    sc = _llama(tp=8, zero=1)
    bf16 = estimate(sc)
    fp8 = estimate({**sc, "training": {**sc["training"], "precision": "fp8"}})
    assert fp8["breakdown_s"]["compute"] < bf16["breakdown_s"]["compute"]
    assert fp8["breakdown_s"]["compute"] > 0.5 * bf16["breakdown_s"]["compute"]  # never the full 2x
    a100 = {**sc, "training": {**sc["training"], "precision": "fp8"}, "cluster": {"gpu": "a100-80gb", "gpus": 64}}
    with pytest.raises(CosearchError, match="fp8 is not supported on a100-80gb"):
        estimate(a100)


def test_nvl72_domain_keeps_tp16_on_nvlink():
    sc = {"model": "llama3-405b", "training": {"global_batch": 1024}, "cluster": {"gpu": "gb200", "gpus": 1152},
          "plan": {"tp": 16, "pp": 9, "recompute": "full", "sequence_parallel": True, "zero": 1}}
    nvl72 = estimate(sc)
    nvl8 = estimate({**sc, "cluster": {**sc["cluster"], "nvlink_domain": 8}})
    assert nvl72["breakdown_s"]["tp_comm"] < 0.5 * nvl8["breakdown_s"]["tp_comm"]
