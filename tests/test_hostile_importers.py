"""Hostile input to the importers (Hugging Face config.json, Megatron-LM arguments, torchtitan TOML):
every case is a one-line CosearchError naming the field, and returns at once.

Each test failed before the fix: a loop over 10**13 layers or a 10**10-element list (hf_moe.py,
megatron_moe.py), a read that blocked on a FIFO or /dev/zero (hf.py, planin.py), a RecursionError,
ZeroDivisionError, TypeError, ValueError, OverflowError, AttributeError or KeyError, or a value
silently accepted (``--attention-dropout nan``) or truncated (``local_batch_size = 1.5``).
Cases that hung or ate memory run in a fresh interpreter with a time limit and a capped address space.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from cosearch import hf
from cosearch.errors import CosearchError
from cosearch.frameworks import megatron, planin, torchtitan

ROOT = Path(__file__).resolve().parents[1]
MOE = ROOT / "tests" / "data" / "hf" / "moe"
CLUSTER = "{gpu: h100-sxm, gpus: 64}"
MEGATRON = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 --micro-batch-size 1 "
            "--vocab-size 32000 --swiglu --bf16 --ffn-hidden-size 4096 ")
EXPERTS = "--moe-token-dispatcher-type alltoall --num-experts 8 "
NO_AC = '[activation_checkpoint]\nmode = "none"\n'  # torchtitan's default (every second layer) is not modelled


def _cap_memory():
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def _cli_refuses(*args: str, field: str) -> None:
    """``cosearch ARGS`` in a fresh interpreter (20 s, 3 GiB) exits 2 with one ``error:`` line naming ``field``."""
    res = subprocess.run([sys.executable, "-m", "cosearch", *args], capture_output=True, text=True, timeout=20,
                         cwd=ROOT, preexec_fn=_cap_memory)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 2, res.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith(f"error: {field}"), res.stderr[-2000:]


def _refuses(call, field: str, *words: str) -> CosearchError:
    """``call()`` raises a one-line CosearchError naming ``field`` (and mentioning ``words``)."""
    with pytest.raises(CosearchError) as info:
        call()
    err = info.value
    assert err.field == field and "\n" not in str(err), str(err)
    assert all(w in str(err) for w in words), str(err)
    return err


def _scenario(tmp_path: Path, hf_config: str) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(json.dumps({"model": {"hf_config": hf_config}, "training": {"global_batch": 64},
                                "cluster": {"gpu": "h100-sxm", "gpus": 8}}))
    return str(path)


def _fifo(tmp_path: Path) -> str:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return str(path)


# ------------------------------------------------------------------------------- bug 1: layer count
@pytest.mark.parametrize("name", ["qwen3-30b-a3b", "deepseek-v3"])
def test_moe_config_with_absurd_layer_count_is_refused_before_any_per_layer_loop(tmp_path, name):
    """10**13 layers: hf_moe counted MoE layers one by one (qwen3_moe, deepseek), never finishing."""
    cfg = json.loads((MOE / name / "config.json").read_text())
    cfg["num_hidden_layers"] = 10**13
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _cli_refuses("estimate", _scenario(tmp_path, str(tmp_path)), field="model.hf_config")
    _refuses(lambda: hf.load_model(tmp_path), "model.hf_config", "num_hidden_layers", "100_000")


# ------------------------------------------------------------------------------ bug 2: MoE layer lists
@pytest.mark.parametrize("extra, field", [
    ("--moe-layer-freq '([1]*9999999999)'", "--moe-layer-freq"),                  # a 10**10-element list
    ("--moe-layer-freq 1", "--num-layers"),                                        # with 10**13 layers
    ("--window-size 127,0 --window-attn-skip-freq '([1]*9999999999)'", "--window-attn-skip-freq"),
], ids=["freq-repeat", "layers", "window-freq-repeat"])
def test_megatron_layer_patterns_are_counted_not_built(extra, field):
    args = MEGATRON + EXPERTS + extra
    if field == "--num-layers":
        args = args.replace("--num-layers 4", "--num-layers 9999999999999")
    _cli_refuses("estimate", "--megatron-args", args, "--cluster", CLUSTER, field=field)


# ------------------------------------------------------------------------- bug 3: FIFOs, devices, bytes
def test_hf_config_fifo_or_device_is_refused_without_blocking(tmp_path):
    for path in (_fifo(tmp_path), "/dev/zero"):
        _cli_refuses("estimate", _scenario(tmp_path, path), field="model.hf_config")


def test_torchtitan_toml_fifo_or_device_is_refused_without_blocking(tmp_path):
    for path in (_fifo(tmp_path), "/dev/zero"):
        _cli_refuses("estimate", "--torchtitan-toml", path, "--model", "llama3-8b", "--cluster", CLUSTER, field=path)


def _planin(**given) -> argparse.Namespace:
    args = {"scenario": None, "megatron_args": None, "torchtitan_toml": None,
            "model": "llama3-8b" if given.get("torchtitan_toml") else None, "cluster": CLUSTER, "gpu": None, "gpus": None,
            **given}
    return argparse.Namespace(**args)


def test_torchtitan_toml_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "job.toml"
    path.write_bytes(b"[parallelism]\ntensor_parallel_degree = 8\n# \xff\xfe\n")
    _refuses(lambda: planin.scenario_from_args(_planin(torchtitan_toml=str(path))), str(path), "UTF-8")


# ------------------------------------------------------------------------------- bug 4: deep JSON
def test_deeply_nested_hf_config_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text("[" * 100_000)
    _refuses(lambda: hf.load_model(tmp_path), "model.hf_config", "nested")


# ------------------------------------------------------------------------------- bug 5: torchtitan TOML
@pytest.mark.parametrize("text, field", [
    ("[parallelism]\ntensor_parallel_degree = 0\n", "parallelism.tensor_parallel_degree"),
    ("[parallelism]\ndata_parallel_replicate_degree = 0\n", "parallelism.data_parallel_replicate_degree"),
    ('[parallelism]\ntensor_parallel_degree = "x"\n', "parallelism.tensor_parallel_degree"),
    ("[parallelism]\ntensor_parallel_degree = inf\n", "parallelism.tensor_parallel_degree"),
    ("[parallelism]\ndata_parallel_shard_degree = -2\n", "parallelism.data_parallel_shard_degree"),
    ("parallelism = 5\n", "parallelism"),
    ("model = 3\n", "model"),
    ("[model]\nconverters = 5\n", "model.converters"),
    ("[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_layers_per_stage = 0\n",
     "parallelism.pipeline_parallel_layers_per_stage"),
    (NO_AC + "[training]\nsteps = 1e400\n", "training.steps"),
    ("[training]\nlocal_batch_size = 1.5\n", "training.local_batch_size"),       # was truncated to 1
    (NO_AC + '[training]\ncompile = "true"\n', "training.compile"),              # was read as false
    ("a = " + "[" * 100_000, "--torchtitan-toml"),
], ids=lambda x: x if x.count("\n") == 0 and len(x) < 60 else "toml")
def test_torchtitan_toml_bad_values_name_the_key(text, field):
    _refuses(lambda: torchtitan.parse_toml(text, "llama3-8b", {"gpu": "h100-sxm", "gpus": 64}), field)


PIPELINED = "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_layers_per_stage = 2\n" + NO_AC


@pytest.mark.parametrize("model, field", [([1, 2], "--model"), ({"hidden": 4096}, "model.layers")])
def test_torchtitan_model_must_be_a_mapping_with_layers(model, field):
    _refuses(lambda: torchtitan.parse_toml(PIPELINED, model, {"gpu": "h100-sxm", "gpus": 64}), field)


def test_torchtitan_minus_one_still_means_the_rest():
    """torchtitan's documented -1: data_parallel_shard_degree takes the remaining GPUs, global_batch_size
    is local batch x dp."""
    text = ("[parallelism]\ndata_parallel_shard_degree = -1\ntensor_parallel_degree = 8\n"
            "[training]\nlocal_batch_size = 2\nglobal_batch_size = -1\n" + NO_AC)
    sc = torchtitan.parse_toml(text, "llama3-8b", {"gpu": "h100-sxm", "gpus": 64})
    assert (sc.plan.tp, sc.plan.zero, sc.training.global_batch) == (8, 3, 2 * 8)


# ------------------------------------------------------------------------------- bug 6: Megatron-LM args
@pytest.mark.parametrize("args, field", [
    (MEGATRON + "--tensor-model-parallel-size 0", "--tensor-model-parallel-size"),
    (MEGATRON + "--pipeline-model-parallel-size 0 --num-layers-per-virtual-pipeline-stage 2",
     "--pipeline-model-parallel-size"),
    (MEGATRON + "--context-parallel-size -2", "--context-parallel-size"),
    (MEGATRON + "--num-distributed-optimizer-instances 0", "--num-distributed-optimizer-instances"),
    (MEGATRON + "--train-samples " + "9" * 400, "--train-samples"),
    (MEGATRON + "--data-path 'unbalanced", "--megatron-args"),
    (MEGATRON + "--attention-dropout nan", "--attention-dropout"),               # was accepted
    (MEGATRON + "--hidden-dropout 2", "--hidden-dropout"),
], ids=lambda x: "args" if x.startswith(MEGATRON) else x)
def test_megatron_bad_flags_name_the_flag(args, field):
    _refuses(lambda: megatron.parse_args(args, {"gpu": "h100-sxm", "gpus": 64}), field)


def test_megatron_torchrun_prefix_with_zero_processes():
    args = "torchrun --nproc-per-node 0 --nnodes 2 pretrain_gpt.py " + MEGATRON
    _refuses(lambda: megatron.parse_args(args, {"gpu": "h100-sxm"}), "--nproc-per-node")


@pytest.mark.parametrize("cluster, field", [
    ("{gpu: h100-sxm, gpus: abc}", "cluster.gpus"), ("{gpu: h100-sxm, gpus: .inf}", "cluster.gpus"),
    ("{gpu: h100-sxm, gpus: [8]}", "cluster.gpus"), ("{gpu: h100-sxm, gpus: null}", "cluster.gpus"),
    ("{gpu: h100-sxm, gpus: 0}", "cluster.gpus"), ("{gpu: h100", "--cluster"),
], ids=str)
def test_megatron_cluster_gpus_must_be_a_positive_integer(cluster, field):
    _refuses(lambda: planin.scenario_from_args(_planin(megatron_args=MEGATRON, cluster=cluster)), field)


@pytest.mark.parametrize("given, field", [
    ({"scenario": "examples/gpt3-175b.yaml", "model": None, "cluster": None, "gpus": 64}, "--gpus"),
    ({"scenario": "examples/gpt3-175b.yaml", "model": None, "cluster": None, "gpu": "h100-sxm"}, "--gpu"),
    ({"scenario": "examples/gpt3-175b.yaml", "model": None}, "--cluster"),
    ({"scenario": "examples/gpt3-175b.yaml", "cluster": None, "model": "llama3-8b"}, "--model"),
    ({"megatron_args": MEGATRON, "model": None, "gpus": 8}, "--gpus"),  # --cluster says 64
    ({"megatron_args": MEGATRON, "model": "llama3-8b"}, "--model"),
])
def test_launch_options_that_would_be_ignored_or_contradict_are_refused(given, field):
    """estimate SCENARIO --gpus 64 (or --gpu, --cluster, --model) ignored the option; --megatron-args with --gpus 8
    and --cluster '{gpus: 64}' silently took 8."""
    _refuses(lambda: planin.scenario_from_args(_planin(**given)), field)


def test_cluster_directory_and_json_model_file(tmp_path):
    """--cluster DIR said 'expects a mapping' (the path was parsed as inline YAML); --model m.json was taken for
    a preset name."""
    _refuses(lambda: planin.scenario_from_args(_planin(megatron_args=MEGATRON, cluster=str(tmp_path))), "--cluster",
             "is a directory")
    (tmp_path / "m.json").write_text('{"model": {"layers": 2, "hidden": 1024, "heads": 8, "ffn_hidden": 4096, '
                                     '"vocab": 32000, "seq_len": 2048}}')
    (tmp_path / "job.toml").write_text(NO_AC + "[training]\nlocal_batch_size = 1\nseq_len = 2048\n")
    sc = planin.scenario_from_args(_planin(torchtitan_toml=str(tmp_path / "job.toml"), model=str(tmp_path / "m.json"),
                                           torch_version=None))
    from cosearch.scenario import load_scenario
    assert load_scenario(sc).model.layers == 2
