"""Leftovers of the config readers: torchtitan TOML names checked as torchtitan checks them (a misspelt key or
table was skipped and the default estimated), values skipped the same way, the shared true/false check and the
``--cluster`` file test."""
from __future__ import annotations

import argparse

import pytest

from cosearch import hf
from cosearch.cli import main
from cosearch.errors import CosearchError
from cosearch.frameworks import planin, torchtitan
from test_hostile_importers import NO_AC  # torchtitan's default AC (every second layer) is not modelled
from test_hostile_importers import _refuses as refuses

H100_64 = {"gpu": "h100-sxm", "gpus": 64}
#: llama3-8b (32 layers) on pp 2 as torchtitan runs it: the embedding and the output count as a layer each, so
#: layers_per_stage 17 makes (32 + 2) / 17 = 2 stages, 16 layers on each rank (16 made 3 stages, which it refuses).
PIPELINED = "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_layers_per_stage = 17\n"

#: torchtitan v0.1.0's torchtitan/models/llama3/train_configs/llama3_8b.toml as shipped (every table), with
#: the plan cosearch models (per-op SAC).
SHIPPED = """# torchtitan Config.toml
[job]
dump_folder = "./outputs"
description = "Llama 3 8B training"

[profiling]
enable_profiling = true
save_traces_folder = "profile_trace"
profile_freq = 100

[metrics]
log_freq = 10
enable_tensorboard = true
save_tb_folder = "tb"

[model]
name = "llama3"
flavor = "8B"
tokenizer_path = "./assets/tokenizer/original/tokenizer.model"
# converters = ["float8"]

[optimizer]
name = "AdamW"
lr = 3e-4
eps = 1e-8

[lr_scheduler]
warmup_steps = 200

[training]
local_batch_size = 1
seq_len = 8192
max_norm = 1.0
steps = 1000
compile = false
dataset = "c4"

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
pipeline_parallel_degree = 1
context_parallel_degree = 1

[checkpoint]
enable_checkpoint = false
folder = "checkpoint"
interval = 500
last_save_model_only = true
export_dtype = "float32"
async_mode = "disabled"

[activation_checkpoint]
mode = "selective"
selective_ac_option = "op"

[float8]
enable_fsdp_float8_all_gather = false
precompute_float8_dynamic_scale_for_fsdp = false
filter_fqns = ["output"]
"""


def _refuses(text: str, field: str, *words: str, model: str = "llama3-8b") -> None:
    refuses(lambda: torchtitan.parse_toml(text, model, H100_64), field, *words)


# ------------------------------------------------------------------------ names: keys and tables
@pytest.mark.parametrize("text, field, hint", [
    ("[parallelism]\ntensor_paralel_degree = 8\n", "parallelism.tensor_paralel_degree", "tensor_parallel_degree"),
    ("[paralelism]\ntensor_parallel_degree = 8\n", "paralelism", "[parallelism]"),        # the whole table skipped
    ("[Training]\ncompile = true\n", "Training", "[training]"),
    ("[training]\ncomplie = true\n", "training.complie", "did you mean compile"),
    ("[training]\ntensor_parallel_degree = 8\n", "training.tensor_parallel_degree", "[parallelism]"),  # 2024 layout
    ('[activation_checkpoint]\nmod = "full"\n', "activation_checkpoint.mod", "mode"),
    ('[model]\nconverter = ["float8"]\n', "model.converter", "converters"),
    ("[compile]\nenabled = true\n", "compile.enabled", "enable"),
    ("[training]\ndtyp = \"bfloat16\"\n", "training.dtyp", "did you mean dtype"),  # v0.2's dtype (read), misspelt
], ids=lambda x: x.split("\n")[0] if "\n" in x else x)
def test_torchtitan_unknown_name_is_refused_with_the_closest_known(text, field, hint):
    """These read with the default (tp 1, eager, selective, bf16) before: the key or table was skipped."""
    _refuses(NO_AC + text if "activation_checkpoint" not in text else text, field, hint)


def test_torchtitan_typo_exits_2_naming_the_key(tmp_path, capsys):
    (tmp_path / "job.toml").write_text("[parallelism]\ntensor_paralel_degree = 8\n" + NO_AC)
    assert main(["estimate", "--torchtitan-toml", str(tmp_path / "job.toml"), "--model", "llama3-8b",
                 "--gpu", "h100-sxm", "--gpus", "64"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "parallelism.tensor_paralel_degree" in err and "tensor_parallel_degree" in err


def test_torchtitan_shipped_toml_and_foreign_tables_still_read():
    """Every table of a shipped TOML reads; a table far from torchtitan's names (a custom_args_module's) is left
    alone, as are the keys of tables not read."""
    sc = torchtitan.parse_toml(SHIPPED + "[liger_kernel]\nenable_fused_linear_cross_entropy = true\n[debug]\nseed = 1\n"
                               "[checkpoint.extra]\nanything = 1\n", "llama3-8b", H100_64)
    assert (sc.plan.tp, sc.plan.zero, sc.plan.recompute, sc.training.fusion) == (1, 3, "op", "eager")


# ------------------------------------------------------------------------ [compile] (later trees)
@pytest.mark.parametrize("table, fusion, loss", [
    ("enable = true\ncomponents = [\"model\", \"loss\"]\n", "fused", "fused"),
    ("enable = true\n", "fused", "fused"),                      # components default to both
    ("enable = true\ncomponents = [\"model\"]\n", "fused", "eager"),
    ("enable = false\ncomponents = [\"model\", \"loss\"]\n", "eager", "eager"),
])
def test_torchtitan_compile_table_is_read(table, fusion, loss):
    """torchtitan's later [compile] table was skipped: a compiled run was estimated eager."""
    sc = torchtitan.parse_toml(NO_AC + "[compile]\n" + table, "llama3-8b", H100_64)
    assert (sc.training.fusion, sc.training.cross_entropy) == (fusion, loss)


@pytest.mark.parametrize("text, field", [
    ("[training]\ncompile = true\n[compile]\nenable = true\n", "training.compile"),
    ('[compile]\nenable = true\nbackend = "aot_eager"\n', "compile.backend"),
    ('[compile]\nenable = true\ncomponents = ["model", "optimizer"]\n', "compile.components"),
    ('[compile]\nenable = "yes"\n', "compile.enable"),
])
def test_torchtitan_compile_table_bad_values(text, field):
    _refuses(NO_AC + text, field)


# ------------------------------------------------------------------------ values that were skipped
@pytest.mark.parametrize("text, field, model", [
    (PIPELINED + 'pipeline_parallel_schedule = "GPipe"\n', "parallelism.pipeline_parallel_schedule", "llama3-8b"),
    (PIPELINED + 'pipeline_parallel_schedule = "1F1B_typo"\n', "parallelism.pipeline_parallel_schedule", "llama3-8b"),
    ('[model]\nconverters = ["mx"]\n', "model.converters", "llama3-8b"),          # MXFP8 read as bf16
    ("[training]\nenable_cpu_offload = true\n", "training.enable_cpu_offload", "llama3-8b"),
    ("[parallelism]\nexpert_parallel_degree = 8\n", "parallelism.expert_parallel_degree", "mixtral-8x7b"),
    ('[training]\nmixed_precision_param = "bf16"\n', "training.mixed_precision_param", "llama3-8b"),
], ids=["gpipe", "typo", "mx", "cpu-offload", "ep", "param"])
def test_torchtitan_values_that_change_the_estimate_are_not_skipped(text, field, model):
    _refuses(NO_AC + text, field, model=model)


def test_torchtitan_schedule_names_ignore_case_as_pytorch():
    """PyTorch's get_schedule_class matches names without case: interleaved1f1b is Interleaved1F1B."""
    # without layers_per_stage torchtitan runs 2 stages per rank under a multi-stage schedule (8 made 5 stages)
    text = NO_AC + PIPELINED.replace("pipeline_parallel_layers_per_stage = 17\n", "") + \
        'pipeline_parallel_schedule = "interleaved1f1b"\n'
    sc = torchtitan.parse_toml(text, "llama3-8b", H100_64)
    assert (sc.plan.pp, sc.plan.interleave) == (2, 2)


def test_torchtitan_expert_degree_of_a_dense_model_is_harmless():
    sc = torchtitan.parse_toml(NO_AC + "[parallelism]\nexpert_parallel_degree = 8\n", "llama3-8b", H100_64)
    assert sc.plan.ep == 1


# ------------------------------------------------------------------------ shared helpers
@pytest.mark.parametrize("value", [1, 0, "true", "false", None, [True]])
def test_boolean_refuses_what_is_not_true_or_false(value):
    with pytest.raises(CosearchError, match="expects true or false"):
        hf.boolean(value, "x.y")
    assert hf.boolean(False, "x.y") is False


def test_hf_and_torchtitan_switches_share_the_check(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, '
                                          '"num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100, '
                                          '"max_position_embeddings": 128, "tie_word_embeddings": 1}')
    with pytest.raises(CosearchError, match="'tie_word_embeddings' expects true or false"):
        hf.load_model(tmp_path)
    _refuses(NO_AC + "[training]\ncompile = 1\n", "training.compile", "expects true or false")


def test_cluster_file_without_yaml_suffix_is_read_as_a_file(tmp_path):
    path = tmp_path / "cluster.txt"
    path.write_text("gpu: h100-sxm\ngpus: 64\n")
    args = argparse.Namespace(cluster=str(path), gpu=None, gpus=None)
    assert planin._cluster(args) == {"gpu": "h100-sxm", "gpus": 64}
    assert planin._cluster(argparse.Namespace(cluster="{gpu: h100-sxm, gpus: 8}", gpu=None, gpus=None))["gpus"] == 8


def test_model_file_without_yaml_suffix_is_read_as_a_file(tmp_path, capsys, monkeypatch):
    """--model told a file from a preset name by its suffix only: a suffixless model file (as --cluster already
    read) was taken for a preset name and refused ("unknown preset"). An existing file is read whatever its name;
    a directory is a one-line error naming --model; preset names and suffixed paths read as before."""
    import json

    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.toml").write_text(NO_AC + "[training]\nlocal_batch_size = 1\nseq_len = 2048\n")
    fields = {"layers": 2, "hidden": 1024, "heads": 8, "ffn_hidden": 4096, "vocab": 32000, "seq_len": 2048}
    (tmp_path / "mymodel").write_text(json.dumps({"model": fields}))      # a whole scenario's model section
    (tmp_path / "fields.cfg").write_text("layers: 2\nhidden: 1024\nheads: 8\nffn_hidden: 4096\nvocab: 32000\n")
    base = ["estimate", "--torchtitan-toml", "job.toml", "--gpu", "h100-sxm", "--gpus", "64", "--json"]
    for model in ("mymodel", str(tmp_path / "mymodel"), "fields.cfg"):
        assert main(base + ["--model", model]) == 0, model
        assert json.loads(capsys.readouterr().out)["scenario"]["model"]["layers"] == 2
    assert main(base + ["--model", "llama3-8b"]) == 0                     # a preset name
    assert json.loads(capsys.readouterr().out)["scenario"]["model"]["layers"] == 32
    (tmp_path / "llama3-8b").mkdir()    # a checkpoint folder named like the preset: the name stays the preset
    (tmp_path / "gpt3-1.3b").write_text(json.dumps({"model": fields}))   # so does a file of a preset's name
    for name, layers in (("llama3-8b", 32), ("gpt3-1.3b", 24)):
        assert main(base + ["--model", name]) == 0, name
        assert json.loads(capsys.readouterr().out)["scenario"]["model"]["layers"] == layers
    (tmp_path / "adir").mkdir()
    for model, words in (("adir", ("--model", "'adir' is a directory", "preset name")),
                         ("missing.yaml", ("missing.yaml",)),                # a YAML path that is not there
                         ("mymodle", ("unknown preset 'mymodle'",))):       # neither a file nor a preset
        assert main(base + ["--model", model]) == 2, model
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "Traceback" not in err and all(w in err for w in words), err
