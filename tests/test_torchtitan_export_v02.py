"""The torchtitan export in v0.2's layout (``cosearch export --format torchtitan --torchtitan-version 0.2``): the
keys torchtitan v0.2.0 to v0.2.2 define ([compile], [quantize.linear.float8], ``early_stop``, ``dtype``, the
``*_stage_less_layers`` weights and v0.2's ceil split), none that v0.2's config manager refuses, and a round trip
through the import to the same plan. Expected values worked out by hand."""
from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest
import yaml

from cosearch.cli import main
from cosearch.frameworks import export, torchtitan
from cosearch.frameworks.torchtitan import _KEYS, _per_rank, _split_keys
from cosearch.scenario import parse_scenario
from test_export import _same
from test_hostile_importers import _refuses

MODEL = {"layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn_hidden": 14336, "gated_mlp": True,
         "vocab": 128256, "seq_len": 8192, "tied_embeddings": False}
CLUSTER = {"gpu": "h100-sxm", "gpus": 64}
#: v0.1.0's keys of the tables read that torchtitan v0.2.0 to v0.2.2 dropped (their config/job_config.py: Training
#: has no compile, seed or deterministic; Parallelism no enable_compiled_autograd or pipeline_parallel_split_points),
#: so the config manager refuses them in a v0.2 TOML.
V010_ONLY = {"training": {"compile", "seed", "deterministic"},
             "parallelism": {"enable_compiled_autograd", "pipeline_parallel_split_points"}}
#: torchtitan v0.2's Float8Linear fields ([quantize.linear.float8]; the import reads enable_fsdp_float8_all_gather
#: and recipe_name of it).
FLOAT8_LINEAR = {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp", "recipe_name",
                 "filter_fqns", "emulate"}


def _scenario(training=None, layers=32, **plan):
    return parse_scenario({"model": dict(MODEL, layers=layers), "cluster": dict(CLUSTER),
                           "training": {"global_batch": 64, "precision": "bf16", "tokens": 64 * 8192 * 100.0,
                                        **(training or {})}, "plan": plan})


def _v02(sc):
    return torchtitan.export(sc, "0.2")


def _back(sc, text):
    return torchtitan.parse_toml(text, sc.model.model_dump(), sc.cluster.model_dump(exclude_none=True))


#: FSDP2 (zero 3) on 64 GPUs, fused, fp8, pure-bf16 optimizer states, per-op SAC.
FUSED_FP8_BF16 = _scenario({"precision": "fp8", "optimizer_states": "bf16"}, microbatch=1, zero=3, fsdp_overlap=1.0,
                           recompute="op")
#: DDP over 32 replicas of tp 2, eager (model and loss), fp8, full recompute stopping early.
EAGER_DDP_FULL = _scenario({"precision": "fp8", "fusion": "eager", "cross_entropy": "eager"}, tp=2,
                           sequence_parallel=True, microbatch=2, zero=0, recompute="full", recompute_early_stop=True)
#: 30 layers on pp 2 x interleave 3: 32 effective on 6 stages, no whole layers_per_stage (v0.1.0 refuses it).
INTERLEAVED_30 = _scenario(layers=30, tp=2, sequence_parallel=True, pp=2, interleave=3, microbatch=1, zero=1,
                           recompute="op")

EXPECTED = {
    "fused-fp8-bf16": (FUSED_FP8_BF16, {
        "parallelism": {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 64,
                        "fsdp_reshard_after_forward": "default", "tensor_parallel_degree": 1,
                        "enable_async_tensor_parallel": False, "pipeline_parallel_degree": 1,
                        "context_parallel_degree": 1},
        "training": {"global_batch_size": 64, "seq_len": 8192, "mixed_precision_param": "bfloat16",
                     "dtype": "bfloat16", "local_batch_size": 1, "steps": 100},
        "activation_checkpoint": {"mode": "selective", "selective_ac_option": "op"},
        "compile": {"enable": True, "components": ["model", "loss"]},
        "model": {"converters": ["quantize.linear.float8"]},
        # plan.fp8_param_gather unset (false): 16-bit weights gathered, as the plan is estimated
        "quantize": {"linear": {"float8": {"enable_fsdp_float8_all_gather": False}}},
    }),
    "eager-ddp-full": (EAGER_DDP_FULL, {
        "parallelism": {"data_parallel_replicate_degree": 32, "data_parallel_shard_degree": 1,
                        "tensor_parallel_degree": 2, "enable_async_tensor_parallel": False,
                        "pipeline_parallel_degree": 1, "context_parallel_degree": 1},
        "training": {"global_batch_size": 64, "seq_len": 8192, "mixed_precision_param": "bfloat16",
                     "local_batch_size": 2, "steps": 100},
        "activation_checkpoint": {"mode": "full", "early_stop": True},
        "compile": {"enable": False},
        "model": {"converters": ["quantize.linear.float8"]},
        # DDP: nothing sharded to gather in fp8
        "quantize": {"linear": {"float8": {"enable_fsdp_float8_all_gather": False}}},
    }),
    # v0.2's pipeline_llm: ceil((30 + 1 + 1) / 6) = 6 stages, 3 per rank (5 makes 7, 7 makes 5); the split of 32
    # on 6 stages is 6, 6, 5, 5, 5, 5 effective, 5, 6, 5, 5, 5, 4 layers, ranks 0 and 1 (stages s mod 2) 15 each,
    # as the model evaluates ceil(30 / 6) x 3 = 15
    "interleaved-30": (INTERLEAVED_30, {
        "parallelism": {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 16,
                        "fsdp_reshard_after_forward": "default", "tensor_parallel_degree": 2,
                        "enable_async_tensor_parallel": False, "pipeline_parallel_degree": 2,
                        "context_parallel_degree": 1, "pipeline_parallel_schedule": "Interleaved1F1B",
                        "pipeline_parallel_layers_per_stage": 6, "pipeline_parallel_microbatch_size": 1},
        "training": {"global_batch_size": 64, "seq_len": 8192, "mixed_precision_param": "bfloat16",
                     "local_batch_size": 4, "steps": 100},
        "activation_checkpoint": {"mode": "selective", "selective_ac_option": "op"},
        "compile": {"enable": True, "components": ["model", "loss"]},
    }),
}

#: Plans v0.2 writes, each read back: the three above, and those v0.1.0 refuses or writes alike.
PLANS = {
    **{name: sc for name, (sc, _) in EXPECTED.items()},
    # full recompute without early stop, eager: v0.2's early_stop = false (v0.1.0 refuses it)
    "eager-full-no-early-stop": _scenario({"fusion": "eager", "cross_entropy": "eager"}, microbatch=1, zero=2,
                                          recompute="full"),
    # a compiled loss with an eager model: components = ["loss"] (v0.1.0's one switch compiles both)
    "compiled-loss-only": _scenario({"fusion": "eager"}, microbatch=1, zero=3, fsdp_overlap=1.0, recompute="none"),
    # 32 layers on pp 4, 1F1B: the default ends split 34 as 8, 9, 8, 7 (refused); both weights 0 split 8 each
    "pp4-ends-0": _scenario(tp=2, sequence_parallel=True, pp=4, microbatch=1, zero=1, recompute="full",
                            recompute_early_stop=True),
    # what v0.1.0 writes too: ZB-V on 30 layers (torchtitan's default 2 stages per rank), HSDP, cp 2
    "zbv-30": _scenario(layers=30, tp=2, sequence_parallel=True, pp=4, interleave=2, schedule="zb-v", microbatch=1,
                        zero=0, recompute="op"),
    "hsdp": _scenario(tp=2, sequence_parallel=True, microbatch=2, zero=3, zero_group=8, fsdp_overlap=1.0,
                      recompute="op", training={"tokens": None}),
    "cp2-async-tp": _scenario(tp=4, cp=2, sequence_parallel=True, tp_comm_overlap=True, tp_overlap_passes="forward",
                              microbatch=1, zero=3, fsdp_overlap=1.0, recompute="full", recompute_early_stop=True),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_v02_tables_are_the_hand_written_ones(name):
    sc, expected = EXPECTED[name]
    text = _v02(sc)
    assert tomllib.loads(text) == expected
    assert text.startswith("# torchtitan v0.2.0 to v0.2.2 job config: cosearch export of 64 x h100-sxm\n")


@pytest.mark.parametrize("name", sorted(PLANS))
def test_v02_round_trip(name):
    sc = PLANS[name]
    _same(sc, _back(sc, _v02(sc)))


@pytest.mark.parametrize("name", sorted(PLANS))
def test_v02_writes_no_key_v02_refuses(name):
    """Every table and key written is one torchtitan v0.2 defines: the import's tables (``_KEYS``, v0.1.0's and
    v0.2's keys) less those v0.2 dropped, and [quantize.linear.float8]'s fields; nothing of v0.1.0's layout."""
    doc = tomllib.loads(_v02(PLANS[name]))
    assert set(doc) <= set(_KEYS) | {"quantize"}
    for table, body in doc.items():
        if table == "quantize":
            assert set(body) == {"linear"} and set(body["linear"]) == {"float8"}
            assert set(body["linear"]["float8"]) <= FLOAT8_LINEAR
            continue
        assert set(body) <= set(_KEYS[table]) - V010_ONLY.get(table, set()), (table, body)
    assert "compile" in doc and "float8" not in doc


def test_v02_parts_and_refusals_that_differ_from_v010():
    doc = tomllib.loads(_v02(PLANS["compiled-loss-only"]))
    assert doc["compile"] == {"enable": True, "components": ["loss"]}
    doc = tomllib.loads(_v02(PLANS["eager-full-no-early-stop"]))
    assert doc["activation_checkpoint"] == {"mode": "full", "early_stop": False}
    assert doc["compile"] == {"enable": False}
    par = tomllib.loads(_v02(PLANS["pp4-ends-0"]))["parallelism"]
    assert (par["pipeline_parallel_layers_per_stage"], par["pipeline_parallel_first_stage_less_layers"],
            par["pipeline_parallel_last_stage_less_layers"], par["pipeline_parallel_schedule"]) == (8, 0, 0, "1F1B")
    # v0.1.0's layout cannot express these plans: refused, as before
    for name, field in (("fused-fp8-bf16", "training.optimizer_states"), ("interleaved-30", "plan.pp"),
                        ("eager-full-no-early-stop", "plan.recompute_early_stop"),
                        ("compiled-loss-only", "training.cross_entropy"), ("pp4-ends-0", "plan.pp")):
        _refuses(lambda: export(PLANS[name], "torchtitan"), field)
    # and v0.2's cannot express these
    _refuses(lambda: _v02(_scenario({"optimizer_states": "bf16_moments"}, microbatch=1, zero=3, fsdp_overlap=1.0,
                                    recompute="op")), "training.optimizer_states", "allowed: fp32, bf16")
    # under torch.compile the partitioner recomputes only what the backward reads: no early_stop = false to write
    _refuses(lambda: _v02(_scenario(microbatch=1, zero=2, recompute="full")), "plan.recompute_early_stop",
             "torch.compile", "set it true")
    # 80 layers on pp 4 x interleave 5 (v0.1.0 refuses it): 82 effective make ceil(82 / n) = 21 or 17 stages for
    # n = 4 or 5, never 20; both ends at 0 make 80, 4 a stage on 20 stages, 20 layers a rank
    sc = _scenario(layers=80, tp=2, sequence_parallel=True, pp=4, interleave=5, microbatch=1, zero=1, recompute="op")
    par = tomllib.loads(_v02(sc))["parallelism"]
    assert {k: v for k, v in par.items() if "layers" in k} == {
        "pipeline_parallel_layers_per_stage": 4, "pipeline_parallel_first_stage_less_layers": 0,
        "pipeline_parallel_last_stage_less_layers": 0}
    _same(sc, _back(sc, _v02(sc)))


def test_v02_writes_v010s_split_wherever_v010_writes_one_and_reads_back():
    """Over 2..120 layers and pp 2..8: where v0.1.0's layout writes a split, v0.2's writes the same keys; the splits
    only v0.2 writes (its ceil rule, end weights 0) read back to the plan's stages per rank."""
    only_v02 = 0
    for schedule, v in (("1f1b", 1), ("interleaved", 2), ("interleaved", 3), ("zb-v", 2)):
        for layers in range(2, 121):
            for pp in range(2, 9):
                v010, _ = _split_keys(layers, pp, v, schedule)
                v02, _ = _split_keys(layers, pp, v, schedule, v02=True)
                if v010 is not None:
                    assert v02 == v010
                if v02 is None:
                    continue
                only_v02 += v010 is None
                first = v02.get("pipeline_parallel_first_stage_less_layers", 1)
                last = v02.get("pipeline_parallel_last_stage_less_layers", 1)
                assert _per_rank(v02, layers, pp, schedule, first, last) == v
    assert only_v02 > 100


def test_v010_export_is_the_default():
    sc = PLANS["zbv-30"]
    assert torchtitan.export(sc) == torchtitan.export(sc, "0.1") == export(sc, "torchtitan")
    assert torchtitan.export(sc).startswith("# torchtitan v0.1.0 job config")
    _refuses(lambda: torchtitan.export(sc, "0.3"), "--torchtitan-version", "0.1", "0.2")


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "cosearch", *args], capture_output=True, text=True)


def test_cli_torchtitan_version(tmp_path, capsys):
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(FUSED_FP8_BF16.model_dump(exclude_none=True)))
    assert main(["export", str(path), "--format", "torchtitan", "--torchtitan-version", "0.2"]) == 0
    assert capsys.readouterr().out == _v02(FUSED_FP8_BF16)
    eager = tmp_path / "eager.yaml"
    eager.write_text(yaml.safe_dump(PLANS["zbv-30"].model_dump(exclude_none=True)))
    assert main(["export", str(eager), "--format", "torchtitan"]) == 0
    v010 = capsys.readouterr().out
    assert main(["export", str(eager), "--format", "torchtitan", "--torchtitan-version", "0.1"]) == 0
    assert capsys.readouterr().out == v010 == export(PLANS["zbv-30"], "torchtitan")
    # bad input: one line naming the flag (and the allowed values), exit 2
    for args, words in ((["--format", "torchtitan", "--torchtitan-version", "0.3"], ("0.1", "0.2", "'0.3'")),
                        (["--format", "torchtitan", "--torchtitan-version", "v0.2"], ("0.1", "0.2")),
                        (["--format", "megatron", "--torchtitan-version", "0.2"], ("--format torchtitan only",))):
        r = _cli("export", str(path), *args)
        assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
        assert "--torchtitan-version" in r.stderr and all(w in r.stderr for w in words), r.stderr
    # v0.1.0 refuses pure-bf16 states, naming the field in one line
    r = _cli("export", str(path), "--format", "torchtitan")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "training.optimizer_states" in r.stderr
