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
    want = _resolved(sc)  # routed_nodes_limit too: one expert group per NVLink domain of the EP group
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


def _step_s(sc) -> float:
    import cosearch
    return cosearch.estimate(sc)["step_time_s"]


def test_deepseek_v3_uneven_pp2_node_limited_export_keeps_the_step_time():
    """61 layers on pp 2 (first 31, last 30 beside the MTP module) and node-limited routing on 128 H800 (8-GPU
    NVLink domains, ep 64 at etp 1: 8 domains, so 8 expert groups, 4 of them per token) export, parse back and
    estimate the same step."""
    sc = parse_scenario({"model": "deepseek-v3", "training": {"global_batch": 1024, "precision": "bf16"},
                         "cluster": {"gpu": "h800", "gpus": 128},
                         "plan": {"tp": 1, "pp": 2, "ep": 64, "zero": 1, "moe_dispatcher": "deepep",
                                  "moe_a2a_overlap": 0.0, "moe_fp8_dispatch": False, "moe_grouped_gemm": "per_expert"}})
    text = megatron.export(sc)
    line = " ".join(text.split())
    assert "--decoder-first-pipeline-num-layers 31 \\ --decoder-last-pipeline-num-layers 30" in line
    assert "--moe-router-num-groups 8 \\ --moe-router-group-topk 4" in line
    assert "# decoder layers per pipeline stage: 31 (first), 30 (last, + 1 MTP)\n" in text
    back = megatron.parse_args(text, sc.cluster.model_dump(exclude_none=True))
    assert back.model.routed_nodes_limit == 4 and back.plan.moe_a2a_overlap == 0.0
    assert _step_s(back) == pytest.approx(_step_s(sc), rel=1e-9)


def test_routed_nodes_limit_within_one_nvlink_domain_is_left_out_and_an_inexpressible_one_refused():
    """On GB200 (72-GPU NVLink domains) an EP group of 64 sits in one domain: the limit is moot and no router group
    flag is written; ep 128 spans 128/72 domains, which Megatron's expert groups cannot express, so a binding limit
    (1 domain) is refused rather than dropped."""
    sc = _moe("deepseek-v3", 128, tp=1, pp=1, ep=64, zero=1, moe_dispatcher="deepep")
    sc = parse_scenario({**sc.model_dump(exclude_none=True), "cluster": {"gpu": "gb200", "gpus": 128}})
    toks = megatron.flags(sc)
    assert "--moe-router-num-groups" not in toks and "--moe-router-group-topk" not in toks
    back = megatron.parse_args(toks, sc.cluster.model_dump(exclude_none=True))
    assert back.model.routed_nodes_limit is None and _step_s(back) == pytest.approx(_step_s(sc), rel=1e-9)
    d = sc.model_dump(exclude_none=True)
    d["model"]["routed_nodes_limit"], d["cluster"]["gpus"] = 1, 256
    d["plan"].update(ep=128, pp=2)
    with pytest.raises(CosearchError) as err:
        megatron.flags(parse_scenario(d))
    assert err.value.field == "model.routed_nodes_limit" and "--moe-router-num-groups" in str(err.value)


def test_force_load_balancing_and_all_to_all_overlap_flags_map():
    sc = megatron.parse_args(BASE + "--num-experts 16 --moe-token-dispatcher-type alltoall --expert-model-parallel-size 4 "
                             "--moe-router-force-load-balancing --overlap-moe-expert-parallel-comm",
                             {"gpu": "h100-sxm", "gpus": 8})
    assert sc.training.moe_load_imbalance == 1.0  # routing forced uniform: the busiest EP rank holds the mean
    assert sc.plan.moe_a2a_overlap == 1.0  # Megatron-Core's 1F1B all-to-all overlap


def test_all_to_all_overlap_exports_as_the_megatron_switch():
    sc = _moe("qwen3-30b-a3b", 64, tp=1, pp=1, ep=8, zero=1, moe_a2a_overlap=1.0)
    toks = megatron.flags(sc)
    assert "--overlap-moe-expert-parallel-comm" in toks
    assert _resolved(megatron.parse_args(toks, sc.cluster.model_dump(exclude_none=True))) == _resolved(sc)


@pytest.mark.parametrize("plan, words", [
    ({"tp": 1, "pp": 1, "ep": 8, "moe_a2a_overlap": 0.5}, "on or off"),
    ({"tp": 1, "pp": 2, "ep": 8, "moe_a2a_overlap": 1.0}, "virtual pipeline stages"),  # Megatron-Core asserts VPP
    ({"tp": 1, "pp": 1, "ep": 1, "moe_a2a_overlap": 1.0}, "ep > 1"),
    ({"tp": 1, "pp": 1, "ep": 8, "moe_a2a_overlap": 1.0, "recompute": "full"}, "full recompute"),
])
def test_all_to_all_overlap_refusals_name_the_field(plan, words):
    with pytest.raises(CosearchError) as err:
        megatron.flags(_moe("qwen3-30b-a3b", 64, zero=1, **plan))
    assert err.value.field == "plan.moe_a2a_overlap" and words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("extra, flag, words", [
    ("--moe-token-dispatcher-type alltoall --moe-enable-deepep", "--moe-enable-deepep", "flex"),
    ("--moe-token-dispatcher-type alltoall --moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity",
     "--moe-pad-expert-input-to-capacity", "not modelled"),
])
def test_deepep_with_alltoall_and_capacity_padding_are_refused(extra, flag, words):
    with pytest.raises(CosearchError) as err:
        megatron.parse_args(BASE + "--num-experts 8 " + extra, {"gpu": "h100-sxm", "gpus": 8})
    assert err.value.field == flag and words in str(err.value) and "\n" not in str(err.value)


def test_moe_flags_not_read_are_logged(caplog):
    """Router numerics and fusion switches do not change the model: skipped, but named in one warning line;
    an exported command line (every MoE flag read) logs nothing."""
    with caplog.at_level("WARNING", logger="cosearch.frameworks.megatron"):
        megatron.parse_args(BASE + "--num-experts 8 --moe-token-dispatcher-type alltoall --moe-aux-loss-coeff 1e-3 "
                            "--moe-router-score-function sigmoid --moe-permute-fusion --expert-model-parallel-size 2",
                            {"gpu": "h100-sxm", "gpus": 8})
    (rec,) = [r for r in caplog.records if r.name == "cosearch.frameworks.megatron"]
    msg = rec.getMessage()
    assert "\n" not in msg and "--moe-aux-loss-coeff --moe-permute-fusion --moe-router-score-function" in msg
    assert "--expert-model-parallel-size" not in msg and "--moe-token-dispatcher-type" not in msg
    caplog.clear()
    sc = ROUND_TRIP["deepseek-v3-mla-deepep"]
    with caplog.at_level("WARNING", logger="cosearch.frameworks.megatron"):
        megatron.parse_args(megatron.flags(sc), sc.cluster.model_dump(exclude_none=True))
    assert not [r for r in caplog.records if r.name == "cosearch.frameworks.megatron"]
