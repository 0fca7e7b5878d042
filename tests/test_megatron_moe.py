"""Megatron-LM MoE / MLA flags in (issue 15): exported MoE flags parse back to the same scenario, and
hand-written flags map as Megatron-LM core_r0.14.0 defines them."""
from __future__ import annotations

import pytest

from cosearch.errors import CosearchError
from cosearch.frameworks import megatron
from cosearch.frameworks.megatron_moe import layer_pattern
from cosearch.scenario import parse_scenario


def _moe(model: str, gpus: int, **plan) -> object:
    # tokens 2^40: a whole number of sequences, so --train-samples gives them back exactly
    return parse_scenario({"model": model, "training": {"global_batch": 1024, "precision": "bf16", "tokens": 2.0**40},
                           "cluster": {"gpu": "h100-sxm", "gpus": gpus}, "plan": plan})


ROUND_TRIP = {
    "mixtral-ep8-etp1-capacity": _moe("mixtral-8x7b", 256, tp=2, pp=4, ep=8, etp=1, sequence_parallel=True, zero=1,
                                      capacity_factor=1.25),
    "deepseek-v3-mla-deepep": _moe("deepseek-v3", 512, tp=2, pp=1, ep=64, etp=1, sequence_parallel=True, zero=1,
                                   moe_dispatcher="deepep", recompute="selective"),
    "qwen3-head-dim": _moe("qwen3-30b-a3b", 64, tp=1, pp=2, ep=8, zero=1),
    "llama4-maverick-dense-layers": _moe("llama4-maverick", 512, tp=4, pp=4, ep=32, etp=1, sequence_parallel=True,
                                         zero=1),
    "llama4-scout-shared": _moe("llama4-scout", 128, tp=4, pp=2, ep=16, sequence_parallel=True, zero=1),
    "gpt-oss-120b": _moe("gpt-oss-120b", 128, tp=1, pp=1, ep=32, zero=1),
}


def _resolved(sc) -> dict:
    """The scenario with every default the model fills in made explicit (widths, attention kind, etp),
    so that two spellings of one architecture compare equal: DeepSeek's preset names its dense width
    ffn_hidden and its expert width expert_ffn_hidden, the flags give the expert width as
    --moe-ffn-hidden-size and the dense one as --ffn-hidden-size."""
    d = sc.model_dump()
    m, pl = d["model"], d["plan"]
    fe = m["expert_ffn_hidden"] or m["ffn_hidden"]
    m["resolved_widths"] = (fe, (m["dense_ffn_hidden"] or m["ffn_hidden"]) if m["dense_layers"] else None,
                            m["shared_experts"] * (m["shared_ffn_hidden"] or fe))
    for key in ("ffn_hidden", "expert_ffn_hidden", "dense_ffn_hidden", "shared_ffn_hidden", "shared_experts"):
        m.pop(key)
    m["attention"] = m["attention"] or ("gqa" if m["kv_heads"] < m["heads"] else "mha")
    pl["etp"] = pl["etp"] or pl["tp"]
    pl["dp"] = pl["dp"] or sc.cluster.gpus // (pl["tp"] * pl["pp"] * pl["cp"])
    return d


@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
def test_exported_moe_flags_parse_back_to_the_same_scenario(name):
    sc = ROUND_TRIP[name]
    cluster = sc.cluster.model_dump(exclude_none=True)
    back = megatron.parse_args(megatron.flags(sc), cluster)
    want = _resolved(sc)
    if sc.model.routed_nodes_limit:  # not exported (the model has no expert-group count for --moe-router-num-groups)
        want["model"]["routed_nodes_limit"] = None
    assert _resolved(back) == want
    text = "\n".join(line for line in megatron.export(sc).splitlines() if not line.startswith("#"))
    assert _resolved(megatron.parse_args(text, cluster)) == want  # torchrun prefix, quoted --moe-layer-freq


BASE = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --micro-batch-size 1 "
        "--vocab-size 32000 --swiglu --bf16 --ffn-hidden-size 4096 --sequence-parallel ")


def test_hand_written_moe_flags_and_megatron_defaults():
    """Defaults of core_r0.14.0: --moe-router-topk 2, --moe-ffn-hidden-size = --ffn-hidden-size,
    --expert-tensor-parallel-size = tp; --moe-layer-freq 2 makes layers 0 and 2 of 4 MoE (i % 2 == 0),
    so 2 dense layers of the --ffn-hidden-size width; a shared size of 3 x 512 is 3 shared experts."""
    sc = megatron.parse_args(BASE + "--num-experts 16 --moe-token-dispatcher-type alltoall --moe-layer-freq 2 "
                             "--tensor-model-parallel-size 2 --expert-model-parallel-size 4 --moe-grouped-gemm",
                             {"gpu": "h100-sxm", "gpus": 8})
    m = sc.model
    assert (m.experts, m.top_k, m.ffn_hidden, m.dense_layers, m.dense_ffn_hidden) == (16, 2, 4096, 2, 4096)
    assert (sc.plan.ep, sc.plan.etp, sc.plan.moe_dispatcher, sc.plan.capacity_factor) == (4, None, "alltoall", None)
    assert sc.plan.moe_grouped_gemm == "per_expert"  # TE GroupedLinear: one cuBLASLt launch per local expert
    sc = megatron.parse_args(BASE + "--num-experts 64 --moe-router-topk 6 --moe-ffn-hidden-size 512 "
                             "--moe-shared-expert-intermediate-size 1536 --moe-token-dispatcher-type flex "
                             "--moe-enable-deepep --moe-router-num-groups 8 --moe-router-group-topk 3 "
                             "--multi-latent-attention --kv-lora-rank 256 --moe-expert-capacity-factor 1.5 "
                             "--kv-channels 192",  # slime's GLM-4.7 script passes --kv-channels beside MLA: ignored
                             {"gpu": "h100-sxm", "gpus": 8})
    m = sc.model
    assert (m.experts, m.top_k, m.ffn_hidden, m.shared_experts, m.shared_ffn_hidden) == (64, 6, 512, 3, None)
    assert (m.attention, m.q_lora_rank, m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim) == (
        "mla", 0, 256, 128, 64, 128)  # Megatron defaults for the ranks not given
    assert (m.routed_nodes_limit, sc.plan.moe_dispatcher, sc.plan.capacity_factor, m.head_dim) == (3, "deepep", 1.5, None)


def test_layer_pattern_forms():
    assert layer_pattern("([0]*3+[1]*5)", 8) == [0, 0, 0, 1, 1, 1, 1, 1]
    assert layer_pattern("'([1]*4)'", 4) == [1] * 4  # as quoted in shell scripts
    assert layer_pattern("[0,1]*2", 4) == [0, 1, 0, 1]
    assert layer_pattern("[0]*1+[1]*3", 4) == [0, 1, 1, 1]  # unparenthesised, as slime's GLM-4.7 script
    assert layer_pattern(3, 7) == [1, 0, 0, 1, 0, 0, 1]


@pytest.mark.parametrize("extra, flag, words", [
    ("--num-experts 8", "--moe-token-dispatcher-type", "allgather"),
    ("--num-experts 8 --moe-token-dispatcher-type allgather", "--moe-token-dispatcher-type", "not modelled"),
    ("--num-experts 8 --moe-token-dispatcher-type flex", "--moe-token-dispatcher-type", "without --moe-enable-deepep"),
    ("--num-experts 8 --moe-token-dispatcher-type alltoall --moe-layer-freq '([0]*3+[1]*2)'", "--moe-layer-freq",
     "lists 5 layers"),
    ("--num-experts 8 --moe-token-dispatcher-type alltoall --moe-layer-freq 'range(4)'", "--moe-layer-freq", "expects"),
    ("--num-experts 8 --moe-token-dispatcher-type alltoall --moe-layer-freq '[0]*4'", "--moe-layer-freq", "no layer"),
    ("--expert-model-parallel-size 2", "--expert-model-parallel-size", "without --num-experts"),
])
def test_moe_flag_refusals_name_the_flag(extra, flag, words):
    with pytest.raises(CosearchError) as err:
        megatron.parse_args(BASE + extra, {"gpu": "h100-sxm", "gpus": 8})
    assert err.value.field == flag and words in str(err.value) and "\n" not in str(err.value)
