"""plan.fp8_param_gather through the framework mappings: Megatron-LM's ``--fp8-param-gather`` (both ways), torchtitan's
``enable_fsdp_float8_all_gather`` in v0.1.0's ``[float8]`` and v0.2's ``[quantize.linear.float8]`` (both ways, as
torchtitan v0.1.0 to v0.2.2 apply it: tensorwise without recipe_name, data_parallel_shard_degree > 1) and NeMo's
``trainer.plugins.fp8_param_gather`` (export only: NeMo 25.04's bf16_with_fp8_mixed sets it true). Expected values
written by hand."""
from __future__ import annotations

import json
import logging
import tomllib

import pytest

from cosearch.cli import main
from cosearch.errors import CosearchError
from cosearch.frameworks import export, megatron, torchtitan
from cosearch.scenario import parse_scenario
from test_export import _same
from test_hostile_importers import _refuses

MODEL = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "gated_mlp": True,
         "vocab": 128256, "seq_len": 8192, "tied_embeddings": False}
CLUSTER = {"gpu": "h100-sxm", "gpus": 64}
#: A Megatron-LM command line of MODEL (tp 8, dp 8 on 64 GPUs), fp8 and the distributed optimizer.
MEGATRON = ("torchrun --nnodes 8 --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
            "--num-attention-heads 32 --group-query-attention --num-query-groups 8 --ffn-hidden-size 14336 --swiglu "
            "--vocab-size 128256 --seq-length 8192 --max-position-embeddings 8192 "
            "--untie-embeddings-and-output-weights --attention-dropout 0.0 --hidden-dropout 0.0 --micro-batch-size 1 "
            "--global-batch-size 64 --bf16 --fp8-format hybrid --tensor-model-parallel-size 8 --sequence-parallel "
            "--use-distributed-optimizer --overlap-grad-reduce")
NO_AC = '[activation_checkpoint]\nmode = "none"\n'


def _scenario(precision="fp8", **plan):
    return parse_scenario({"model": dict(MODEL), "cluster": dict(CLUSTER),
                           "training": {"global_batch": 64, "precision": precision, "tokens": 64 * 8192 * 100.0},
                           "plan": plan})


#: fp8, FSDP2 (zero 3) over all 64 GPUs, per-op SAC (torchtitan's), with and without fp8 weights.
FSDP_ON = _scenario(microbatch=1, zero=3, fsdp_overlap=1.0, recompute="op", fp8_param_gather=True)
FSDP_OFF = _scenario(microbatch=1, zero=3, fsdp_overlap=1.0, recompute="op")
#: fp8, tp 8 with the distributed optimizer (zero 1) over dp 8.
DISTOPT_ON = _scenario(tp=8, sequence_parallel=True, microbatch=1, zero=1, fp8_param_gather=True)
#: Megatron-FSDP (zero 3) over all 64 GPUs, no recompute (per-op SAC is torchtitan's), with and without fp8 weights.
MEGATRON_FSDP_ON = _scenario(microbatch=1, zero=3, fsdp_overlap=1.0, fp8_param_gather=True)
MEGATRON_FSDP_OFF = _scenario(microbatch=1, zero=3, fsdp_overlap=1.0)


def _flags(sc):
    return megatron.flags(sc)


def _back(sc, text):
    return torchtitan.parse_toml(text, sc.model.model_dump(), sc.cluster.model_dump(exclude_none=True))


# ------------------------------------------------------------------------------------------------ Megatron-LM
def test_megatron_import_reads_the_flag():
    assert megatron.parse_args(MEGATRON, CLUSTER).plan.fp8_param_gather is False
    on = megatron.parse_args(MEGATRON + " --fp8-param-gather", CLUSTER)
    assert (on.plan.fp8_param_gather, on.plan.zero, on.training.precision) == (True, 1, "fp8")
    # a switch: the word after it is not its value (the script name here), and the flags after it are read
    moved = megatron.parse_args(MEGATRON.replace("pretrain_gpt.py", "--fp8-param-gather pretrain_gpt.py"), CLUSTER)
    assert moved.plan.fp8_param_gather is True and moved.plan.tp == 8
    # Megatron-FSDP (zero 3) gathers the fp8 weights as well
    fsdp = megatron.parse_args(MEGATRON.replace("--use-distributed-optimizer", "--use-megatron-fsdp "
                                                "--data-parallel-sharding-strategy optim_grads_params")
                               + " --fp8-param-gather", CLUSTER)
    assert (fsdp.plan.zero, fsdp.plan.fp8_param_gather) == (3, True)


def test_megatron_export_writes_the_flag_with_the_plan():
    on, off = _flags(DISTOPT_ON), _flags(_scenario(tp=8, sequence_parallel=True, microbatch=1, zero=1))
    assert "--fp8-param-gather" in on and "--fp8-param-gather" not in off
    i = on.index("--use-distributed-optimizer")
    assert on[i:i + 2] == ["--use-distributed-optimizer", "--fp8-param-gather"]
    assert on.count("--use-distributed-optimizer") == 1 and on[on.index("--fp8-format") + 1] == "hybrid"
    # zero 3: Megatron-FSDP, with the distributed optimizer that validate_args asks of --fp8-param-gather
    fsdp = _flags(MEGATRON_FSDP_ON)
    i = fsdp.index("--use-megatron-fsdp")
    assert fsdp[i:i + 5] == ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params",
                             "--use-distributed-optimizer", "--fp8-param-gather"]
    plain = _flags(MEGATRON_FSDP_OFF)
    assert "--use-distributed-optimizer" not in plain and "--fp8-param-gather" not in plain
    assert "    --fp8-param-gather \\\n" in megatron.export(DISTOPT_ON)


@pytest.mark.parametrize("sc", [DISTOPT_ON, MEGATRON_FSDP_ON, MEGATRON_FSDP_OFF], ids=["distopt-on", "fsdp-on",
                                                                                      "fsdp-off"])
def test_megatron_round_trip_keeps_the_field(sc):
    cluster = sc.cluster.model_dump(exclude_none=True)
    text = "\n".join(line for line in megatron.export(sc).splitlines() if not line.startswith("#"))
    back = megatron.parse_args(text, cluster)
    assert back.plan.fp8_param_gather is sc.plan.fp8_param_gather
    _same(sc, back)


@pytest.mark.parametrize("args, words", [
    (MEGATRON.replace(" --fp8-format hybrid", "") + " --fp8-param-gather", ("--fp8-format", "bf16")),
    (MEGATRON.replace(" --use-distributed-optimizer", "") + " --fp8-param-gather", ("--use-distributed-optimizer",)),
    # Megatron-FSDP that shards nothing (no_shard) is no sharded optimizer either
    (MEGATRON.replace("--use-distributed-optimizer", "--use-megatron-fsdp --data-parallel-sharding-strategy no_shard")
     + " --fp8-param-gather", ("--use-distributed-optimizer",)),
])
def test_megatron_contradictions_are_one_line_errors(args, words):
    _refuses(lambda: megatron.parse_args(args, CLUSTER), "--fp8-param-gather", *words)


def test_megatron_contradiction_exits_2_from_the_cli(capsys):
    args = MEGATRON.replace(" --fp8-format hybrid", "") + " --fp8-param-gather"
    assert main(["estimate", "--megatron-args", args, "--gpu", "h100-sxm", "--gpus", "64"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --fp8-param-gather: without --fp8-format"), err


# ------------------------------------------------------------------------------------------------ torchtitan
#: The tables both layouts share for FSDP_ON / FSDP_OFF (64-way FSDP2, micro-batch 1, 100 steps of 64 x 8192).
PARALLELISM = {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 64,
               "fsdp_reshard_after_forward": "default", "tensor_parallel_degree": 1,
               "enable_async_tensor_parallel": False, "pipeline_parallel_degree": 1, "context_parallel_degree": 1}
TRAINING = {"global_batch_size": 64, "seq_len": 8192, "mixed_precision_param": "bfloat16", "local_batch_size": 1,
            "steps": 100}
AC = {"mode": "selective", "selective_ac_option": "op"}


@pytest.mark.parametrize("sc, value", [(FSDP_ON, True), (FSDP_OFF, False)], ids=["on", "off"])
def test_torchtitan_v01_table_holds_the_plans_value(sc, value):
    assert tomllib.loads(torchtitan.export(sc, "0.1")) == {
        "parallelism": PARALLELISM, "training": {**TRAINING, "compile": True}, "activation_checkpoint": AC,
        "model": {"converters": ["float8"]}, "float8": {"enable_fsdp_float8_all_gather": value}}


@pytest.mark.parametrize("sc, value", [(FSDP_ON, True), (FSDP_OFF, False)], ids=["on", "off"])
def test_torchtitan_v02_table_holds_the_plans_value(sc, value):
    assert tomllib.loads(torchtitan.export(sc, "0.2")) == {
        "parallelism": PARALLELISM, "training": TRAINING, "activation_checkpoint": AC,
        "compile": {"enable": True, "components": ["model", "loss"]},
        "model": {"converters": ["quantize.linear.float8"]},
        "quantize": {"linear": {"float8": {"enable_fsdp_float8_all_gather": value}}}}


#: Plans each layout writes, read back: FSDP2 with and without fp8 weights, pipelined FSDP2 (zero 1 over dp 4 of
#: tp 8 x pp 2), HSDP (shard 8 x replicate 8) and DDP (no key to set: fp8 weights need zero >= 1).
ROUND_TRIP = {
    "fsdp-on": FSDP_ON, "fsdp-off": FSDP_OFF,
    "pp-zero1-on": _scenario(tp=8, sequence_parallel=True, pp=2, microbatch=1, zero=1, recompute="op",
                             fp8_param_gather=True),
    "hsdp-on": _scenario(microbatch=1, zero=3, zero_group=8, fsdp_overlap=1.0, recompute="op",
                         fp8_param_gather=True),
    "ddp": _scenario(tp=8, sequence_parallel=True, microbatch=1, zero=0, recompute="op"),
}


@pytest.mark.parametrize("version", ["0.1", "0.2"])
@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
def test_torchtitan_round_trip_keeps_the_field(name, version):
    sc = ROUND_TRIP[name]
    back = _back(sc, torchtitan.export(sc, version))
    assert back.plan.fp8_param_gather is sc.plan.fp8_param_gather
    _same(sc, back)


def _read(text: str, model: str = "llama3-8b", gpus: int = 64):
    return torchtitan.parse_toml(text, model, {"gpu": "h100-sxm", "gpus": gpus})


V010_ON = NO_AC + '[model]\nconverters = ["float8"]\n[float8]\nenable_fsdp_float8_all_gather = true\n'
V02_ON = (NO_AC + '[model]\nconverters = ["quantize.linear.float8"]\n[compile]\nenable = false\n'
          '[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true\n')


def test_torchtitan_import_reads_the_key_where_torchtitan_applies_it():
    # shard degree -1: the remaining 64 GPUs, FSDP2 on
    for text in (V010_ON, V02_ON):
        assert _read(text).plan.fp8_param_gather is True
        assert _read(text.replace("= true", "= false")).plan.fp8_param_gather is False
        assert _read(text.replace("enable_fsdp_float8_all_gather = true", "")).plan.fp8_param_gather is False
    # each layout's converter reads its own table: v0.2's converter does not read v0.1.0's [float8]
    crossed = (NO_AC + '[model]\nconverters = ["quantize.linear.float8"]\n[compile]\nenable = false\n'
               '[float8]\nenable_fsdp_float8_all_gather = true\n')
    assert _read(crossed).plan.fp8_param_gather is False


@pytest.mark.parametrize("text", [
    # no fp8 converter: torchtitan builds no Float8Linear and reads no table (bf16, 16-bit weights)
    NO_AC + "[float8]\nenable_fsdp_float8_all_gather = true\n",
    NO_AC + "[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true\n",
    # DDP (replicate 64, shard 1): parallel_dims.dp_shard_enabled is false
    V010_ON + "[parallelism]\ndata_parallel_replicate_degree = 64\ndata_parallel_shard_degree = 1\n",
    # FSDP2 over the context-parallel ranks only (shard 1, cp 2): sharded, but dp_shard_enabled is still false
    V02_ON + "[parallelism]\ndata_parallel_shard_degree = 1\ntensor_parallel_degree = 8\ncontext_parallel_degree = 2\n"
             "[training]\nglobal_batch_size = 8\n",
])
def test_torchtitan_import_ignores_the_key_where_torchtitan_does(text, caplog):
    with caplog.at_level(logging.WARNING, logger="cosearch.frameworks.torchtitan"):
        sc = _read(text, gpus=64 if "context_parallel" not in text else 16)
    assert sc.plan.fp8_param_gather is False
    fp8 = "converters" in text
    assert sc.training.precision == ("fp8" if fp8 else "bf16")
    assert ("has no effect" in caplog.text) is fp8  # the shard-degree cases are logged


@pytest.mark.parametrize("text, field, words", [
    # torchtitan asserts: "enable_fsdp_float8_all_gather together with recipe_name is not supported"
    (V010_ON + 'recipe_name = "rowwise"\n', "float8.enable_fsdp_float8_all_gather", ("recipe_name", "'rowwise'")),
    (V02_ON + 'recipe_name = "tensorwise"\n', "quantize.linear.float8.enable_fsdp_float8_all_gather",
     ("recipe_name",)),
    (V010_ON.replace("= true", '= "true"'), "float8.enable_fsdp_float8_all_gather", ("true or false",)),
    (NO_AC + '[model]\nconverters = ["quantize.linear.float8"]\n[quantize]\nlinear = 5\n', "quantize.linear",
     ("table",)),
])
def test_torchtitan_import_refuses_what_torchtitan_refuses(text, field, words):
    _refuses(lambda: _read(text), field, *words)


def test_torchtitan_import_refuses_fp8_gathers_of_a_mixture_of_experts():
    """torchao gathers the experts' grouped-GEMM weights in bf16 (ScaledGroupedMMTensor.fsdp_pre_all_gather casts to
    the mixed-precision dtype), Float8Linear's only in fp8; cosearch holds every weight in one precision."""
    text = (NO_AC + '[model]\nconverters = ["quantize.linear.float8", "quantize.grouped_mm.float8"]\n'
            '[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true\n')
    _refuses(lambda: _read(text, "mixtral-8x7b"), "quantize.linear.float8.enable_fsdp_float8_all_gather",
             "mixture of experts", "bf16")
    assert _read(text.replace("= true", "= false"), "mixtral-8x7b").plan.fp8_param_gather is False


def test_torchtitan_export_refuses_fp8_weights_sharded_over_cp_only(tmp_path, capsys):
    """tp 8 x cp 2 on 16 GPUs, zero 3: torchtitan's shard degree is 1 (FSDP2 over cp), so its float8 all-gather stays
    off and the job would gather 16-bit weights."""
    plan = {"tp": 8, "cp": 2, "sequence_parallel": True, "microbatch": 1, "zero": 3, "fsdp_overlap": 1.0,
            "recompute": "op"}
    sc = parse_scenario({"model": dict(MODEL), "cluster": {"gpu": "h100-sxm", "gpus": 16},
                         "training": {"global_batch": 8, "precision": "fp8"},
                         "plan": {**plan, "fp8_param_gather": True}})
    for version in ("0.1", "0.2"):
        with pytest.raises(CosearchError) as err:
            torchtitan.export(sc, version)
        assert err.value.field == "plan.fp8_param_gather" and "data_parallel_shard_degree" in str(err.value)
    # the same plan without fp8 weights exports, the key false
    off = parse_scenario({**sc.model_dump(exclude_none=True), "plan": plan})
    assert tomllib.loads(torchtitan.export(off))["float8"] == {"enable_fsdp_float8_all_gather": False}
    # from the CLI: exit 2, one line
    path = tmp_path / "plan.yaml"  # JSON is YAML
    path.write_text(json.dumps({"model": MODEL, "cluster": {"gpu": "h100-sxm", "gpus": 16},
                                "training": {"global_batch": 8, "precision": "fp8"},
                                "plan": {**plan, "fp8_param_gather": True}}))
    capsys.readouterr()
    assert main(["export", str(path), "--format", "torchtitan"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: plan.fp8_param_gather: true with a data_parallel_shard"), err


def test_cli_export_of_a_contradictory_plan_exits_2(tmp_path, capsys):
    """fp8 weights in a bf16 plan: the scenario's own check, before any framework."""
    path = tmp_path / "plan.yaml"
    path.write_text("model: llama3-8b\ncluster: {gpu: h100-sxm, gpus: 64}\ntraining: {global_batch: 64}\n"
                    "plan: {microbatch: 1, zero: 3, fp8_param_gather: true}\n")
    for fmt in ("megatron", "torchtitan"):
        assert main(["export", str(path), "--format", fmt]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: plan.fp8_param_gather: needs training.precision fp8"), err


# ------------------------------------------------------------------------------------------------ NeMo
def test_nemo_states_the_plans_value_over_the_recipes():
    """NeMo 25.04's bf16_with_fp8_mixed sets fp8_param_gather = True: the export writes the plan's value after it."""
    on, off = export(DISTOPT_ON, "nemo"), export(_scenario(tp=8, sequence_parallel=True, microbatch=1, zero=1), "nemo")
    assert "    trainer.plugins=bf16_with_fp8_mixed \\\n    trainer.plugins.fp8_param_gather=true \\\n" in on
    assert "    trainer.plugins=bf16_with_fp8_mixed \\\n    trainer.plugins.fp8_param_gather=false \\\n" in off
    bf16 = export(_scenario("bf16", tp=8, sequence_parallel=True, microbatch=1, zero=1), "nemo")
    assert "trainer.plugins=bf16_mixed" in bf16 and "fp8_param_gather" not in bf16
