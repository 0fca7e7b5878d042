"""Exports that ran a different plan than the one estimated (found by fuzzing the exporters): each export
either writes a launch that re-imports as the same plan, with the same memory and step time, or refuses
with a one-line error naming the scenario field."""
import itertools
import random
import tomllib

import pytest

from cosearch import CosearchError, estimate
from cosearch.frameworks import export, megatron, torchtitan
from cosearch.scenario import parse_scenario

H100_8 = {"gpu": "h100-sxm", "gpus": 8}


def _scenario(plan, training=None, model="llama3-8b", cluster=H100_8, global_batch=64):
    return parse_scenario({"model": model, "training": {"global_batch": global_batch, "precision": "bf16",
                                                        **(training or {})},
                           "cluster": dict(cluster), "plan": plan})


def _reimport(sc, fmt):
    """The scenario the exported launch of ``sc`` reads back as (Megatron-LM flags or a torchtitan TOML)."""
    text = export(sc, fmt)
    cluster = sc.cluster.model_dump(exclude_none=True)
    if fmt == "megatron":
        return megatron.parse_args("\n".join(x for x in text.splitlines() if not x.startswith("#")), cluster)
    # the job's PyTorch sets SDPA's kernel: FlashAttention-2 before 2.11, cuDNN (flash) after
    return torchtitan.parse_toml(text, sc.model.model_dump(), cluster,
                                 torch_version="2.6" if sc.training.attention == "flash2" else None)


def _plan(sc):
    """The plan fields, with dp derived and the ones the model ignores at this zero stage dropped: a zero_group
    without ZeRO or equal to dp x cp (the default group), an fsdp_overlap below ZeRO-3."""
    d = sc.plan.model_dump()
    d["dp"] = sc.plan.dp or sc.cluster.gpus // (sc.plan.tp * sc.plan.pp * sc.plan.cp)
    if d["zero"] == 0 or d["zero_group"] == d["dp"] * d["cp"]:
        d["zero_group"] = None
    if d["zero"] < 3:
        d["fsdp_overlap"] = None
    return d


def _kernels(sc):
    return {k: getattr(sc.training, k) for k in ("attention", "fusion", "cross_entropy", "dropout")}


def assert_same_plan(sc, back):
    """The re-imported plan, kernels, memory and step time are the original's."""
    assert _plan(back) == _plan(sc)
    assert _kernels(back) == _kernels(sc)
    a, b = estimate(sc), estimate(back)
    assert b["memory_gib"] == pytest.approx(a["memory_gib"], rel=1e-12)
    assert b["step_time_s"] == pytest.approx(a["step_time_s"], rel=1e-12)


def assert_refused(sc, fmt, field):
    with pytest.raises(CosearchError) as err:
        export(sc, fmt)
    assert err.value.field == field and "\n" not in str(err.value) and err.value.message


# ------------------------------------------------------------- bug 1: a sharding group equal to dp under cp
ZG_EQ_DP_CP = {"tp": 1, "cp": 2, "zero": 1, "zero_group": 4}  # 8 GPUs: dp 4, the model shards over 4 dp ranks


@pytest.mark.parametrize("fmt, plan", [
    ("megatron", ZG_EQ_DP_CP),                                            # wrote the optimizer over dp x cp = 8
    ("megatron", {**ZG_EQ_DP_CP, "zero_group": 2}),                        # 2 instances of 4 ranks holding cp
    ("torchtitan", {**ZG_EQ_DP_CP, "zero": 3, "fsdp_overlap": 1.0}),       # FSDP2 over dp_shard_cp = 8
    ("nemo", ZG_EQ_DP_CP),                                                 # the distributed optimizer over 8
])
def test_zero_group_under_context_parallelism_is_refused(fmt, plan):
    # Megatron-Core's instances slice the dp-with-cp group and torchtitan's HSDP shards over dp_shard x cp: a group
    # of data-parallel ranks replicated over cp (the model's zero_group) is not a launch these frameworks run
    assert_refused(_scenario(plan), fmt, "plan.zero_group")


@pytest.mark.parametrize("fmt", ["megatron", "torchtitan"])
def test_default_sharding_group_under_context_parallelism_round_trips(fmt):
    plan = {"tp": 1, "cp": 2, "zero": 3, "fsdp_overlap": 1.0} if fmt == "torchtitan" else {"tp": 1, "cp": 2, "zero": 1}
    sc = _scenario(plan)
    assert_same_plan(sc, _reimport(sc, fmt))


def test_megatron_instances_under_context_parallelism_are_refused_on_import():
    flags = megatron.flags(_scenario({"tp": 1, "cp": 2, "zero": 1}))
    with pytest.raises(CosearchError) as err:  # read as zero_group = dp / 2 = 2: half the sharding Megatron runs
        megatron.parse_args(flags + ["--num-distributed-optimizer-instances", "2"], H100_8)
    assert err.value.field == "--num-distributed-optimizer-instances" and "context" in err.value.message


def test_torchtitan_hsdp_under_context_parallelism_is_refused_on_import():
    text = ("[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = 2\n"
            "context_parallel_degree = 2\n[training]\nlocal_batch_size = 1\nglobal_batch_size = 64\n"
            "[activation_checkpoint]\nmode = \"none\"\n")
    with pytest.raises(CosearchError) as err:  # read as zero_group 2: torchtitan shards over dp_shard x cp = 4
        torchtitan.parse_toml(text, "llama3-8b", H100_8)
    assert err.value.field == "parallelism.data_parallel_replicate_degree"


# ------------------------------------------------------------ bug 2: torchtitan's FSDP2 mesh holds cp
#: pp 2: torchtitan counts the embedding and the output as a layer each, and splits 80 + 2 layers on pp 8 as 10, 11,
#: 10 x 5, 9 (11 where the model evaluates 10: refused); on pp 2 as 40 and 40 (layers_per_stage 41)
PP_CP = {"tp": 1, "pp": 2, "cp": 2, "microbatch": 2, "recompute": "op", "zero": 1}


def test_torchtitan_sharding_over_cp_only_round_trips():
    # 4 B200, pp 2 x cp 2: dp 1, so data_parallel_shard_degree = 1; torchtitan still shards over cp
    sc = _scenario(PP_CP, model="llama3-70b", cluster={"gpu": "b200", "gpus": 4}, global_batch=8)
    par = tomllib.loads(export(sc, "torchtitan"))["parallelism"]
    assert (par["data_parallel_shard_degree"], par["context_parallel_degree"]) == (1, 2)
    back = _reimport(sc, "torchtitan")  # was zero 0 (at pp 8 on 16 B200: 183.4 GiB, does not fit, vs 129.7)
    assert back.plan.zero == 1
    assert_same_plan(sc, back)


def test_torchtitan_reads_shard_degree_1_with_cp_as_fsdp():
    text = ("[parallelism]\ndata_parallel_replicate_degree = 1\ndata_parallel_shard_degree = 1\n"
            "context_parallel_degree = 8\n[training]\nlocal_batch_size = 1\n[activation_checkpoint]\nmode = \"none\"\n")
    back = torchtitan.parse_toml(text, "llama3-8b", H100_8)
    assert (back.plan.zero, back.plan.zero_group, back.plan.fsdp_overlap) == (3, None, 1.0)


@pytest.mark.parametrize("pp", [1, 2])
def test_torchtitan_zero_0_with_cp_is_refused(pp):
    # replicate = dp, shard = 1 runs FSDP2 over the cp ranks (fsdp_enabled = dp_shard > 1 or cp > 1)
    assert_refused(_scenario({"tp": 1, "pp": pp, "cp": 2, "zero": 0, "recompute": "op"}), "torchtitan", "plan.zero")


# ------------------------------------------------------------ bug 3: fields an export cannot express
@pytest.mark.parametrize("fmt, training, field", [
    ("megatron", {"attention": "flash2"}, "training.attention"),    # was --attention-backend flash
    ("megatron", {"attention": "triton"}, "training.attention"),
    ("megatron", {"fusion": "eager"}, "training.fusion"),
    ("megatron", {"cross_entropy": "eager"}, "training.cross_entropy"),
    ("nemo", {"attention": "standard"}, "training.attention"),
    ("nemo", {"attention": "flash2"}, "training.attention"),
    ("nemo", {"fusion": "eager"}, "training.fusion"),
    ("nemo", {"cross_entropy": "eager"}, "training.cross_entropy"),
    ("deepspeed", {"attention": "standard"}, "training.attention"),
    ("deepspeed", {"fusion": "eager"}, "training.fusion"),
    ("deepspeed", {"cross_entropy": "eager"}, "training.cross_entropy"),
    ("deepspeed", {"dropout": True}, "training.dropout"),
    ("torchtitan", {"attention": "standard"}, "training.attention"),
    ("torchtitan", {"attention": "triton"}, "training.attention"),
])
def test_training_kernels_a_framework_does_not_run_are_refused(fmt, training, field):
    plan = {"zero": 3, "fsdp_overlap": 1.0, "recompute": "op"} if fmt == "torchtitan" else {"zero": 1}
    assert_refused(_scenario(plan, training), fmt, field)


MPT = {"model": "mpt-70b", "cluster": {"gpu": "a10g", "gpus": 64}, "global_batch": 64}
#: pp 2: mpt-70b's 80 layers + embedding + output split 40 and 40 (on pp 4 torchtitan puts 21 on rank 1, refused)
MPT_PLAN = {"tp": 2, "pp": 2, "recompute": "op", "sequence_parallel": True, "zero": 1}


@pytest.mark.parametrize("plan, training, field", [
    ({**MPT_PLAN, "overlap_grad_reduce": False}, {}, "plan.overlap_grad_reduce"),  # FSDP2/DDP always overlap
    (MPT_PLAN, {"attention": "standard"}, "training.attention"),                   # torchtitan runs SDPA
])
def test_torchtitan_refuses_what_it_cannot_express(plan, training, field):
    sc = _scenario(plan, training, **MPT)
    assert_refused(sc, "torchtitan", field)
    assert_same_plan(_scenario(MPT_PLAN, **MPT), _reimport(_scenario(MPT_PLAN, **MPT), "torchtitan"))


def test_deepspeed_without_zero_does_not_overlap_the_gradient_reduction():
    assert_refused(_scenario({"zero": 0}), "deepspeed", "plan.overlap_grad_reduce")
    assert export(_scenario({"zero": 0, "overlap_grad_reduce": False}), "deepspeed")


@pytest.mark.parametrize("fmt, overlap, field", [
    ("megatron", None, "plan.fsdp_overlap"),     # Megatron-FSDP prefetches: the profile's overlap is not what runs
    ("torchtitan", None, "plan.fsdp_overlap"),   # so does FSDP2
    ("torchtitan", 0.5, "plan.fsdp_overlap"),
    ("deepspeed", 1.0, "plan.fsdp_overlap"),     # DeepSpeed ZeRO-3 runs at the profile's overlap
])
def test_zero3_overlap_is_the_frameworks(fmt, overlap, field):
    plan = {"zero": 3, "recompute": "op" if fmt == "torchtitan" else "none",
            **({} if overlap is None else {"fsdp_overlap": overlap})}
    assert_refused(_scenario(plan), fmt, field)


@pytest.mark.parametrize("fmt", ["megatron", "torchtitan"])
def test_zero3_with_prefetch_round_trips(fmt):
    sc = _scenario({"zero": 3, "fsdp_overlap": 1.0, "recompute": "op" if fmt == "torchtitan" else "none"})
    back = _reimport(sc, fmt)
    assert back.plan.fsdp_overlap == 1.0
    assert_same_plan(sc, back)


# ------------------------------------------------------------ every export: same plan or a refusal
def _grid():
    """A seeded sample of plans and kernels on 8 H100 (llama3-8b), the fuzzing that found the faults above."""
    axes = {"tp": (1, 2), "pp": (1, 2), "cp": (1, 2), "zero": (0, 1, 2, 3), "zero_group": (None, 2, 4),
            "fsdp_overlap": (None, 1.0), "recompute": ("none", "op", "full"), "overlap_grad_reduce": (True, False),
            "attention": ("flash", "standard", "triton", "flash2"), "fusion": ("fused", "eager"),
            "cross_entropy": ("fused", "eager")}
    rows = list(itertools.product(*axes.values()))
    return [dict(zip(axes, r)) for r in random.Random(15).sample(rows, 3000)]


@pytest.mark.parametrize("fmt", ["megatron", "torchtitan"])
def test_every_export_runs_the_estimated_plan_or_refuses(fmt):
    training_keys = ("attention", "fusion", "cross_entropy")
    exported = 0
    for row in _grid():
        plan = {k: v for k, v in row.items() if k not in training_keys and v is not None}
        plan.update(sequence_parallel=row["tp"] > 1,
                    recompute_early_stop=row["recompute"] == "full" and fmt == "torchtitan")
        if plan.get("zero_group") and plan["zero_group"] > 8 // (row["tp"] * row["pp"] * row["cp"]):
            continue  # not a plan of 8 GPUs
        sc = _scenario(plan, {k: row[k] for k in training_keys})
        try:
            estimate(sc)
        except CosearchError:
            continue  # a plan the model itself refuses (cp with unfused attention)
        try:
            back = _reimport(sc, fmt)
        except CosearchError as err:
            assert err.field.startswith(("plan", "training")) and "\n" not in str(err), (row, err)
            continue
        assert_same_plan(sc, back)
        exported += 1
    assert exported >= 40
