"""The torchtitan TOML import on torchtitan v0.2.0 to v0.2.2, the last releases that take a job TOML: the keys they
added to the tables read are read where they change the estimate ([quantize] fp8 converters, pure-bf16 ``dtype``,
``early_stop``), refused where the model cannot express them (memory-budget checkpointing, explicit or heavily
weighted pipeline splits, MX), accepted where they leave the estimate as it is; misspelt, they are still refused."""
from __future__ import annotations

import pytest

from cosearch import estimate
from cosearch.cli import main
from cosearch.frameworks import torchtitan

from test_readers_leftovers import H100_64, NO_AC, PIPELINED, _refuses

#: pytorch/torchtitan torchtitan/models/llama3/train_configs/llama3_8b_varlen.toml
#: @7201df9ff3611dd7238d06758b975f643f5ef305 as shipped (a v0.2.1+ tree: [compile], [quantize.linear.float8],
#: [checkpoint] enable, [validation] enable, [debug] seed).
SHIPPED_V02 = """# NOTE: this toml config is a preset for 64 A100 GPUs.

[job]
dump_folder = "./outputs"
description = "Llama 3 8B training"

[profiling]
enable_profiling = true
save_traces_folder = "varlen_profile_trace"
profile_freq = 100

[metrics]
log_freq = 10
enable_tensorboard = true
save_tb_folder = "tb"

[model]
name = "llama3"
flavor = "8B_varlen"
hf_assets_path = "./assets/hf/Llama-3.1-8B"
# converters = ["float8"]

[optimizer]
name = "AdamW"
lr = 3e-4
eps = 1e-8

[lr_scheduler]
warmup_steps = 200  # lr scheduler warm up

[training]
local_batch_size = 1
seq_len = 8192
max_norm = 1.0  # grad norm clipping
steps = 1000
dataset = "c4"

[parallelism]
data_parallel_replicate_degree = 1
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
pipeline_parallel_degree = 1
context_parallel_degree = 1

[checkpoint]
enable = false
folder = "checkpoint"
interval = 500
last_save_model_only = true
export_dtype = "float32"
async_mode = "disabled" # ["disabled", "async", "async_with_pinned_mem"]

[compile]
enable=false
components = ["model", "loss"]

[activation_checkpoint]
mode = "selective"  # ["none", "selective", "full"]
selective_ac_option = "op"  # "int" = ac every positive int layer or 'op', ac based on ops policy

[quantize.linear.float8]
enable_fsdp_float8_all_gather = false
precompute_float8_dynamic_scale_for_fsdp = false
filter_fqns = ["output"]

[validation]
enable = false
dataset = "c4_validation"
freq = 500
steps = 1200 # Recommend value for c4_validation with world-size=8 and seq_len=8192

[debug]
seed = 42
"""

#: The same file adapted: fp8 switched on the v0.2 way (the shipped comment still names v0.1.0's converter).
FP8_V02 = SHIPPED_V02.replace('# converters = ["float8"]', 'converters = ["quantize.linear.float8"]')


def _read(text: str, model="llama3-8b"):
    return torchtitan.parse_toml(text, model, H100_64)


def test_a_shipped_v02_toml_reads():
    """Every table of a shipped v0.2 TOML reads ([quantize] and [debug] are known tables, not read)."""
    sc = _read(SHIPPED_V02)
    assert (sc.plan.tp, sc.plan.pp, sc.plan.cp, sc.plan.zero, sc.plan.microbatch) == (1, 1, 1, 3, 1)
    assert (sc.plan.recompute, sc.training.fusion, sc.training.cross_entropy) == ("op", "eager", "eager")
    assert (sc.training.precision, sc.training.optimizer_states) == ("bf16", "fp32")
    assert (sc.model.seq_len, sc.training.global_batch, sc.training.tokens) == (8192, 64, 1000 * 64 * 8192.0)


def test_v02_fp8_converter_reads_as_fp8_as_v010s_did():
    """converters = ["quantize.linear.float8"] is v0.2's name of v0.1.0's "float8": the same fp8 scenario, faster than
    the bf16 one (the shipped file with it was refused: "expects [] or ["float8"]"); a [quantize.linear.float8]
    section alone switches nothing on, as in torchtitan."""
    fp8 = _read(FP8_V02)
    assert fp8.training.precision == "fp8"
    v010 = _read(NO_AC + '[model]\nconverters = ["float8"]\n')
    v02 = _read(NO_AC + '[model]\nconverters = ["quantize.linear.float8"]\n[compile]\nenable = false\n')
    assert v010.model_dump() == v02.model_dump()
    assert estimate(fp8)["step_time_s"] < estimate(_read(SHIPPED_V02))["step_time_s"]


@pytest.mark.parametrize("converters, precision", [
    ('["quantize.linear.float8", "quantize.grouped_mm.float8"]', "fp8"),
    ("[]", "bf16"),
])
def test_moe_fp8_needs_the_experts_and_the_dense_layers(converters, precision):
    text = NO_AC + f"[model]\nconverters = {converters}\n"
    assert _read(text, "mixtral-8x7b").training.precision == precision
    # a dense model has no grouped GEMMs: the grouped converter alone leaves it in bf16
    assert _read(NO_AC + '[model]\nconverters = ["quantize.grouped_mm.float8"]\n').training.precision == "bf16"


@pytest.mark.parametrize("text, words", [
    ('[model]\nconverters = ["quantize.linear.float8"]\n', "fp8 on the dense layers only"),
    ('[model]\nconverters = ["float8"]\n', "fp8 on the dense layers only"),       # v0.1.0 left the experts in bf16
    ('[model]\nconverters = ["quantize.grouped_mm.float8"]\n', "fp8 on the experts only"),
])
def test_moe_fp8_on_part_of_the_gemms_is_refused(text, words):
    _refuses(NO_AC + text, "model.converters", words, model="mixtral-8x7b")


def test_moe_fp8_of_the_trees_between_releases_reads():
    """Between v0.1.0 and v0.2 the float8 converter took the experts with [float8] moe_fqns_prototype."""
    text = NO_AC + '[model]\nconverters = ["float8"]\n[float8]\nmoe_fqns_prototype = ["experts"]\n'
    assert _read(text, "mixtral-8x7b").training.precision == "fp8"


@pytest.mark.parametrize("converters", ['["quantize.linear.mx"]', '["quantize.grouped_mm.mx"]', '["quantize.float8"]',
                                        '["mx"]', '"quantize.linear.float8"'])
def test_mx_and_unknown_converters_are_refused(converters):
    _refuses(NO_AC + f"[model]\nconverters = {converters}\n", "model.converters", "quantize.linear.float8", "MX")


def test_pure_bf16_dtype_is_the_bf16_optimizer_states():
    """[training] dtype = "bfloat16" keeps weights, gradients and Adam's states in bf16 with no fp32 master: less
    memory than mixed precision. It was refused as a key v0.1.0 lacks."""
    mixed = _read(SHIPPED_V02.replace('dataset = "c4"', 'dataset = "c4"\ndtype = "float32"'))
    pure = _read(SHIPPED_V02.replace('dataset = "c4"', 'dataset = "c4"\ndtype = "bfloat16"'))
    assert (mixed.training.optimizer_states, pure.training.optimizer_states) == ("fp32", "bf16")
    assert mixed.model_dump() == _read(SHIPPED_V02).model_dump()
    assert estimate(pure)["memory_gib"] < estimate(mixed)["memory_gib"]
    _refuses(NO_AC + '[training]\ndtype = "float16"\n', "training.dtype", "float32 or bfloat16")


FULL = '[activation_checkpoint]\nmode = "full"\n'


@pytest.mark.parametrize("text, early", [
    (FULL, True),                                                       # v0.1.0: PyTorch's default, early stop
    (FULL + "[compile]\nenable = false\n", False),                      # v0.2: early_stop defaults to false
    (FULL + "early_stop = true\n[compile]\nenable = false\n", True),
    (FULL + "early_stop = false\n", False),
    (FULL + "early_stop = false\n[compile]\nenable = true\n", True),    # compiled: only what the backward reads
    (FULL + '[model]\nhf_assets_path = "./assets"\n', False),           # any v0.2 name: v0.2's default
    (FULL + "[debug]\nseed = 1\n", False),
])
def test_early_stop_of_full_recompute_follows_the_version(text, early):
    assert _read(text).plan.recompute_early_stop is early


def test_early_stop_only_concerns_full_recompute():
    sc = _read('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "op"\nearly_stop = true\n')
    assert (sc.plan.recompute, sc.plan.recompute_early_stop) == ("op", False)
    _refuses(FULL + 'early_stop = "yes"\n', "activation_checkpoint.early_stop")


def test_memory_budget_checkpointing_is_refused():
    _refuses('[activation_checkpoint]\nmode = "memory_budget"\nmemory_budget = 0.3\n[compile]\nenable = true\n',
             "activation_checkpoint.mode", "memory_budget", "not modelled", "use none, selective")


@pytest.mark.parametrize("text, field, words", [
    (PIPELINED + 'module_fqns_per_model_part = [["tok_embeddings", "layers.0"], ["layers.1", "norm", "output"]]\n',
     "parallelism.module_fqns_per_model_part", ("explicit stage split",)),
    (PIPELINED + 'pipeline_parallel_split_points = ["layers.16"]\n', "parallelism.pipeline_parallel_split_points",
     ("explicit stage split",)),
    (PIPELINED + "pipeline_parallel_first_stage_less_layers = 2\n",
     "parallelism.pipeline_parallel_first_stage_less_layers", ("2:", "first stage", "use 0 or 1")),
    (PIPELINED + "pipeline_parallel_last_stage_less_layers = 4\n",
     "parallelism.pipeline_parallel_last_stage_less_layers", ("last stage",)),
    (PIPELINED + "pipeline_parallel_last_stage_less_layers = -1\n",
     "parallelism.pipeline_parallel_last_stage_less_layers", ("an integer in 0..",)),
])
def test_pipeline_splits_the_model_does_not_evaluate_are_refused(text, field, words):
    _refuses(NO_AC + text, field, *words)


def test_pipeline_split_keys_within_the_model_split_or_without_pipelining_read():
    base = _read(NO_AC + PIPELINED)  # 16 layers on each rank
    # the weights count in torchtitan's split (v0.2 pipeline_llm): both ends 0 make 32 effective layers, 16 a stage;
    # the output 0 makes 33, ceil(33 / 17) = 2 stages of 17 and 16 effective, 16 transformer layers on each
    for weights, lps in (("first_stage_less_layers = 0\npipeline_parallel_last_stage_less_layers = 0", 16),
                         ("first_stage_less_layers = 1\npipeline_parallel_last_stage_less_layers = 0", 17)):
        text = PIPELINED.replace("= 17", f"= {lps}") + f"pipeline_parallel_{weights}\n"
        assert _read(NO_AC + text).model_dump() == base.model_dump()
    # the embedding 0 with the output 1 (33 effective): 17 layers on rank 0 and 15 on rank 1, where the model
    # evaluates 16 and 16 (this case read as the base before the weights counted)
    _refuses(NO_AC + PIPELINED + "pipeline_parallel_first_stage_less_layers = 0\n",
             "parallelism.pipeline_parallel_layers_per_stage", "17 layers on pipeline rank 0",
             "cosearch evaluates at 16")
    flat = NO_AC + '[parallelism]\nmodule_fqns_per_model_part = [["layers.0"]]\npipeline_parallel_split_points = ' \
        '["layers.1"]\npipeline_parallel_first_stage_less_layers = 5\n'
    assert _read(flat).model_dump() == _read(NO_AC).model_dump()


#: v0.2's keys that leave the estimate as it is (with a value other than the default where there is one).
NEUTRAL = {
    "parallelism": {"pipeline_parallel_expert_parallel_overlap": "false", "context_parallel_load_balancer": '"ptrr"',
                    "expert_tensor_parallel_degree": "1", "expert_parallel_comm_backend": '"deepep"'},
    "training": {"debug_moe_force_load_balance": "true"},
    "activation_checkpoint": {"memory_budget": "0.3", "visualize_memory_budget_pareto": "true",
                              "preserve_rng_state": "false", "determinism_check": '"none"', "debug": "true"},
    "model": {"hf_assets_path": '"./assets/hf/Llama-3.1-8B"'},
}


@pytest.mark.parametrize("table, key", [(t, k) for t, keys in NEUTRAL.items() for k in keys])
def test_v02_keys_that_leave_the_estimate_are_accepted(table, key):
    ac = '[activation_checkpoint]\nmode = "full"\n'
    base = f"{ac}[{table}]\n" if table != "activation_checkpoint" else ac
    text = base + f"{key} = {NEUTRAL[table][key]}\n"
    if table == "activation_checkpoint":
        base = base + "debug = false\n"  # a v0.2 name in both: the same (v0.2) early-stop default
    else:
        base, text = base + "[debug]\n", text + "[debug]\n"
    assert _read(text).model_dump() == _read(base).model_dump()
    # [training.dataloader], v0.2.1's nested table, is host-side data loading
    loader = _read(FULL + "[debug]\n[training.dataloader]\nnum_workers = 4\npin_memory = true\n")
    assert loader.model_dump() == _read(FULL + "[debug]\n").model_dump()


@pytest.mark.parametrize("text, field, hint", [
    ('[activation_checkpoint]\nmode = "full"\nearly_stpo = true\n', "activation_checkpoint.early_stpo",
     "did you mean early_stop"),
    ('[training]\nd_type = "bfloat16"\n', "training.d_type", "did you mean dtype"),
    ("[parallelism]\nmodule_fqns_per_model_parts = []\n", "parallelism.module_fqns_per_model_parts",
     "did you mean module_fqns_per_model_part"),
    ("[parallelism]\npipeline_parallel_first_stage_less_layer = 0\n",
     "parallelism.pipeline_parallel_first_stage_less_layer", "pipeline_parallel_first_stage_less_layers"),
    ('[parallelism]\ncontext_parallel_load_balance = "headtail"\n', "parallelism.context_parallel_load_balance",
     "context_parallel_load_balancer"),
    ('[activation_checkpoint]\nmode = "full"\nmemory_budgets = 0.5\n', "activation_checkpoint.memory_budgets",
     "memory_budget"),
    ("[quantise.linear.float8]\nfilter_fqns = []\n", "quantise", "[quantize]"),       # the whole table skipped
    ("[debugs]\nseed = 1\n", "debugs", "[debug]"),
    ("[compiel]\nenable = true\n", "compiel", "[compile]"),
])
def test_misspelt_v02_names_are_still_refused(text, field, hint):
    _refuses(NO_AC + text if "activation_checkpoint" not in text else text, field, hint, "v0.2.2")


def test_misspelt_v02_key_exits_2_naming_the_key(tmp_path, capsys):
    (tmp_path / "job.toml").write_text(FP8_V02.replace("[activation_checkpoint]", "[activation_checkpoint]\n"
                                                                                   "early_stpo = true"))
    assert main(["estimate", "--torchtitan-toml", str(tmp_path / "job.toml"), "--model", "llama3-8b",
                 "--gpu", "h100-sxm", "--gpus", "64"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "activation_checkpoint.early_stpo" in err and "early_stop" in err
    (tmp_path / "job.toml").write_text(FP8_V02)
    assert main(["estimate", "--torchtitan-toml", str(tmp_path / "job.toml"), "--model", "llama3-8b",
                 "--gpu", "h100-sxm", "--gpus", "64", "--json"]) == 0
