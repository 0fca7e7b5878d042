"""Plans out as framework launch arguments (cosearch.frameworks, `cosearch export`) and Megatron-LM /
torchtitan launches back in (`cosearch estimate --megatron-args / --torchtitan-toml`)."""
import json
import subprocess
import sys

import optuna
import pytest

from cosearch import CosearchError, estimate
from cosearch.cli import main
from cosearch.frameworks import deepspeed, export, megatron, torchtitan
from cosearch.scenario import parse_scenario

#: DeepSpeed config keys as the DeepSpeed source defines them (verified with the code search in
#: issue 15, deepspeedai/DeepSpeed):
#: - top level: deepspeed/runtime/constants.py @088be892c7499b4f4925d6a31da1e399a19aec20 (every
#:   ds_config.json key constant there), plus ``zero_optimization`` (ZERO_OPTIMIZATION,
#:   deepspeed/runtime/zero/config.py) and ``activation_checkpointing`` (ACT_CHKPT,
#:   deepspeed/runtime/activation_checkpointing/config.py);
#: - ``zero_optimization``: the JSON names (field names and ``alias=`` names) of DeepSpeedZeroConfig
#:   in deepspeed/runtime/zero/config.py @1b88ac366fc922254d56abda5cf6b1f266556d19;
#: - ``offload_optimizer`` / ``offload_param``: DeepSpeedZeroOffloadOptimizerConfig /
#:   DeepSpeedZeroOffloadParamConfig in deepspeed/runtime/zero/offload_config.py
#:   @1978617c691b2c992a17902975187ef8d61176fa;
#: - ``fp16`` / ``bf16``: FP16_* / BFLOAT16_* constants in deepspeed/runtime/constants.py;
#: - ``activation_checkpointing``: ACT_CHKPT_* constants of
#:   deepspeed/runtime/activation_checkpointing/config.py (the search showed the text, not the commit).
#: Removed from the earlier list, written from memory: ``grad_hooks`` (no such ZeRO field in the
#: source), ``flops_profiler`` and ``data_efficiency`` (real sections, but defined outside the files
#: checked here; the exporter emits neither).
DEEPSPEED_KEYS = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "optimizer", "scheduler",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "steps_per_print", "sparse_gradients", "bf16",
    "fp16", "amp", "gradient_clipping", "graph_harvesting", "communication_data_type", "seq_parallel_comm_data_type",
    "prescale_gradients", "gradient_predivide_factor", "disable_allgather", "dump_state", "vocabulary_size",
    "wall_clock_breakdown", "memory_breakdown", "eigenvalue", "progressive_layer_drop", "checkpoint", "data_types",
    "dataloader_drop_last", "sparse_attention", "use_data_before_expert_parallelism", "zero_optimization",
    "activation_checkpointing",
}
DEEPSPEED_SUBKEYS = {
    "zero_optimization": {
        "stage", "contiguous_gradients", "reduce_scatter", "reduce_bucket_size", "use_multi_rank_bucket_allreduce",
        "allgather_partitions", "allgather_bucket_size", "overlap_comm", "load_from_fp32_weights",
        "elastic_checkpoint", "offload_param", "offload_optimizer", "zenflow", "sub_group_size", "cpu_offload_param",
        "cpu_offload_use_pin_memory", "cpu_offload", "stage3_prefetch_bucket_size",
        "stage3_param_persistence_threshold", "stage3_model_persistence_threshold", "stage3_max_live_parameters",
        "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
        "stage3_module_granularity_threshold", "stage3_use_all_reduce_for_fetch_params",
        "stage3_allgather_sequential", "stage3_partition_stream_chunk_size",
        "stage3_gather_fp16_weights_on_model_save", "ignore_unused_parameters", "legacy_stage1",
        "round_robin_gradients", "zero_hpz_partition_size", "zero_quantized_weights",
        "zero_quantized_nontrainable_weights", "zero_quantized_gradients", "zeropp_loco_param", "mics_shard_size",
        "mics_hierarchical_params_gather", "memory_efficient_linear", "pipeline_loading_checkpoint",
        "override_module_apply", "log_trace_cache_warnings", "enable_sanity_checks",
        "save_muon_momentum_buffer_in_memory", "leaf_module"},
    "offload_optimizer": {"device", "nvme_path", "buffer_count", "pin_memory", "pipeline_read", "pipeline_write",
                          "fast_init", "ratio", "super_offload", "convert_grad_on_cpu", "cpuadam_cores_perc"},
    "offload_param": {"device", "nvme_path", "buffer_count", "buffer_size", "max_in_cpu", "pin_memory"},
    "fp16": {"enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
             "consecutive_hysteresis", "min_loss_scale", "fused_mode"},
    "bf16": {"enabled", "immediate_grad_update"},
    "activation_checkpointing": {"partition_activations", "number_checkpoints", "contiguous_memory_optimization",
                                 "synchronize_checkpoint_boundary", "profile", "cpu_checkpointing"},
}


LLAMA_70B = {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn_hidden": 28672, "gated_mlp": True,
             "vocab": 128256, "seq_len": 8192, "tied_embeddings": False}


def scenario(model=None, training=None, cluster=None, **plan):
    return parse_scenario({
        "model": model or dict(LLAMA_70B),
        "training": {"global_batch": 512, "precision": "bf16", "tokens": 512 * 8192 * 1000.0, **(training or {})},
        "cluster": cluster or {"gpu": "h100-sxm", "gpus": 256},
        "plan": plan,
    })


ROUND_TRIP = {
    "gqa-swiglu-interleave-selective": scenario(tp=8, pp=4, interleave=5, microbatch=1, recompute="selective",
                                                sequence_parallel=True, zero=1, tp_comm_overlap=True),
    "cp-fp8-full": scenario(training={"precision": "fp8"}, tp=4, pp=2, cp=2, microbatch=2, recompute="full",
                            sequence_parallel=True, zero=1),
    "gpt3-tied-dropout-standard": parse_scenario({
        "model": "gpt3-175b", "training": {"global_batch": 1536, "precision": "fp16", "dropout": True,
                                           "attention": "standard"},
        "cluster": {"gpu": "a100-80gb", "gpus": 1024},
        "plan": {"tp": 8, "pp": 16, "interleave": 2, "microbatch": 1, "overlap_grad_reduce": False}}),
    # Megatron-FSDP prefetches its gathers: the plan states fsdp_overlap 1 (unset, the profile's, is refused)
    "fsdp-hybrid": scenario(tp=2, zero=3, zero_group=16, microbatch=1, recompute="full", sequence_parallel=True,
                            fsdp_overlap=1.0),
    "zero2-ddp-no-tokens": scenario(training={"tokens": None}, tp=1, zero=2, microbatch=2),
    "distopt-instances": scenario(tp=8, pp=2, zero=1, zero_group=4, sequence_parallel=True),
}


def _same(a, b):
    da, db = a.model_dump(), b.model_dump()
    for d, sc in ((da, a), (db, b)):  # dp: explicit or derived, the same number
        d["plan"]["dp"] = sc.plan.dp or sc.cluster.gpus // (sc.plan.tp * sc.plan.pp * sc.plan.cp)
    assert da == db


@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
def test_megatron_flags_round_trip(name):
    sc = ROUND_TRIP[name]
    cluster = sc.cluster.model_dump(exclude_none=True)
    _same(sc, megatron.parse_args(megatron.flags(sc), cluster))
    # the full exported text (torchrun prefix, continuations, comment) parses too
    text = "\n".join(line for line in megatron.export(sc).splitlines() if not line.startswith("#"))
    _same(sc, megatron.parse_args(text, cluster))


def test_megatron_flag_names_and_values():
    toks = megatron.flags(ROUND_TRIP["gqa-swiglu-interleave-selective"])
    line = " ".join(toks)
    for expected in ("--tensor-model-parallel-size 8", "--pipeline-model-parallel-size 4",
                     "--num-layers-per-virtual-pipeline-stage 4", "--context-parallel-size 1",
                     "--group-query-attention --num-query-groups 8", "--swiglu", "--ffn-hidden-size 28672",
                     "--untie-embeddings-and-output-weights", "--recompute-granularity selective",
                     "--sequence-parallel", "--use-distributed-optimizer", "--tp-comm-overlap", "--overlap-grad-reduce",
                     "--micro-batch-size 1", "--global-batch-size 512", "--seq-length 8192", "--bf16"):
        assert expected in line
    full = " ".join(megatron.flags(ROUND_TRIP["cp-fp8-full"]))
    assert "--fp8-format hybrid" in full and "--context-parallel-size 2" in full
    assert "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1" in full


def test_megatron_parse_defaults_and_torchrun_world_size():
    sc = megatron.parse_args("torchrun --nproc-per-node 8 --nnodes 4 pretrain_gpt.py --num-layers 24 --hidden-size 2048 "
                             "--num-attention-heads 16 --seq-length 4096 --micro-batch-size 2 --vocab-size 50304 "
                             "--swiglu --bf16 --data-path /data/x --lr 3e-4 --tensor-model-parallel-size 2",
                             {"gpu": "h100-sxm"})
    assert sc.cluster.gpus == 32 and sc.cluster.gpus_per_node == 8
    assert sc.model.ffn_hidden == int(4 * 2048 * 2 / 3 / 64) * 64  # Megatron's SwiGLU default
    assert sc.model.kv_heads == 16 and sc.training.dropout is True  # Megatron default dropout 0.1
    assert sc.training.global_batch == 2 * 16  # micro x dp
    assert sc.plan.tp == 2 and sc.plan.zero == 0 and sc.plan.overlap_grad_reduce is False


@pytest.mark.parametrize("args, field", [
    ("--hidden-size 8 --num-attention-heads 1 --seq-length 8 --micro-batch-size 1 --vocab-size 8 --bf16", "--num-layers"),
    ("--num-layers 2 --hidden-size 8 --num-attention-heads 1 --seq-length 8 --micro-batch-size 1 --bf16", "--vocab-size"),
    ("--num-layers 2 --hidden-size 8 --num-attention-heads 1 --seq-length 8 --micro-batch-size 1 --vocab-size 8", "--bf16"),
    ("--num-layers 2 --hidden-size 8 --num-attention-heads 1 --seq-length 8 --micro-batch-size 1 --vocab-size 8 --bf16 "
     "--num-experts 8", "--moe-token-dispatcher-type"),  # Megatron's default allgather dispatcher is not modelled
])
def test_megatron_parse_refusals_name_the_flag(args, field):
    with pytest.raises(CosearchError) as err:
        megatron.parse_args(args, {"gpu": "h100-sxm", "gpus": 8})
    assert err.value.field == field and "\n" not in str(err.value)


def _walk_keys(cfg, section="top"):
    allowed = DEEPSPEED_KEYS if section == "top" else DEEPSPEED_SUBKEYS[section]
    assert set(cfg) <= allowed, set(cfg) - allowed
    for k, v in cfg.items():
        if isinstance(v, dict):
            _walk_keys(v, k)


@pytest.mark.parametrize("plan", [
    # without ZeRO DeepSpeed all-reduces after the backward: the plan states no overlap (true is refused)
    {"zero": 0, "microbatch": 4, "overlap_grad_reduce": False}, {"zero": 1, "microbatch": 1}, {"zero": 2, "microbatch": 2, "recompute": "full"},
    {"zero": 3, "microbatch": 1, "offload": "optimizer+weights"}, {"zero": 2, "microbatch": 2, "offload": "optimizer"},
])
def test_deepspeed_json_keys_documented_and_batch_arithmetic(plan):
    sc = scenario(cluster={"gpu": "h100-sxm", "gpus": 64}, **plan)
    cfg = json.loads(export(sc, "deepspeed"))
    _walk_keys(cfg)
    dp = 64
    assert cfg["train_batch_size"] == cfg["train_micro_batch_size_per_gpu"] * cfg["gradient_accumulation_steps"] * dp
    assert cfg["train_batch_size"] == 512 and cfg["zero_optimization"]["stage"] == plan["zero"]
    assert cfg["bf16"]["enabled"] is True and cfg["fp16"]["enabled"] is False


@pytest.mark.parametrize("fmt, sc, field", [
    ("deepspeed", scenario(tp=8), "plan.tp"),
    ("deepspeed", scenario(pp=2), "plan.pp"),
    ("deepspeed", scenario(cp=2), "plan.cp"),
    ("deepspeed", scenario(zero=3, zero_group=8), "plan.zero_group"),
    ("megatron", scenario(pp=4, zero=3), "plan.zero"),
    ("megatron", scenario(pp=4, interleave=3), "plan.interleave"),
    ("megatron", scenario(tp=8, tp_collective="ring"), "plan.tp_collective"),
    ("megatron", scenario(tp=8, offload="optimizer"), "plan.offload"),
    ("megatron", scenario(tp=3), "plan"),
    ("megatron", scenario(training={"global_batch": 100}), "training.global_batch"),
    ("nemo", scenario(zero=3), "plan.zero"),
    ("torchtitan", scenario(zero=1), "plan.zero"),
    # under pipelining FSDP2 keeps parameters and gradients whole until the last micro-batch: zero 3 is not what runs
    ("torchtitan", scenario(pp=4, zero=3, recompute="op"), "plan.zero"),
    ("torchtitan", scenario(tp=8, zero=3), "plan.sequence_parallel"),
    ("torchtitan", scenario(training={"precision": "fp16"}, zero=3), "training.precision"),
    # async TP needs torch.compile: an eager plan would be estimated with an overlap torchtitan never runs
    ("torchtitan", scenario(training={"fusion": "eager"}, tp=8, zero=3, sequence_parallel=True, tp_comm_overlap=True,
                            tp_overlap_passes="forward"), "plan.tp_comm_overlap"),
    # async TP hides the forward's collectives only; TE userbuffers (Megatron-Core, NeMo) every pass's
    ("torchtitan", scenario(tp=8, zero=3, sequence_parallel=True, tp_comm_overlap=True), "plan.tp_overlap_passes"),
    ("megatron", scenario(tp=8, sequence_parallel=True, tp_comm_overlap=True, tp_overlap_passes="forward"),
     "plan.tp_overlap_passes"),
    # full recompute must say how it ends: Megatron/NeMo/DeepSpeed rerun the whole layer, torchtitan stops early
    ("torchtitan", scenario(zero=3, recompute="full"), "plan.recompute_early_stop"),
    # per-op SAC (op) is torchtitan's; Megatron's selective (attention core) is not
    ("torchtitan", scenario(zero=3, recompute="selective"), "plan.recompute"),
    ("megatron", scenario(tp=8, recompute="op"), "plan.recompute"),
    ("nemo", scenario(tp=8, zero=1, recompute="op"), "plan.recompute"),
    ("deepspeed", scenario(zero=3, recompute="op"), "plan.recompute"),
    ("megatron", scenario(tp=8, recompute="full", recompute_early_stop=True), "plan.recompute_early_stop"),
    ("nemo", scenario(tp=8, zero=1, recompute="full", recompute_early_stop=True), "plan.recompute_early_stop"),
    ("deepspeed", scenario(zero=3, recompute="full", recompute_early_stop=True), "plan.recompute_early_stop"),
])
def test_refused_plans_name_the_field(fmt, sc, field):
    with pytest.raises(CosearchError) as err:
        export(sc, fmt)
    assert err.value.field == field and "\n" not in str(err.value) and err.value.message


def test_nemo_overrides():
    text = export(ROUND_TRIP["gqa-swiglu-interleave-selective"], "nemo")
    for expected in ("trainer.strategy.tensor_model_parallel_size=8", "trainer.strategy.pipeline_model_parallel_size=4",
                     "trainer.strategy.virtual_pipeline_model_parallel_size=5", "trainer.strategy.sequence_parallel=true",
                     "optim.config.use_distributed_optimizer=true", "data.global_batch_size=512",
                     "model.config.num_query_groups=8", "model.config.gated_linear_unit=true",
                     "model.config.recompute_granularity=selective", "trainer.num_nodes=32", "trainer.devices=8"):
        assert expected in text


#: torchtitan counts the embedding and the output as a layer each: 78 layers are 80 effective, 4 a stage on pp 4 x
#: interleave 5 (80 layers are 82: no pp x interleave above 2 divides them but 41 and 82).
LLAMA_78 = dict(LLAMA_70B, layers=78)


@pytest.mark.parametrize("model, plan", [
    (LLAMA_78, {"tp": 8, "pp": 4, "interleave": 5, "microbatch": 1, "zero": 1, "recompute": "op",
                "sequence_parallel": True}),
    # torchtitan's default split (2 stages per rank, no layers_per_stage): 40 layers on each rank, as the model's
    (LLAMA_70B, {"tp": 8, "pp": 2, "interleave": 2, "microbatch": 1, "zero": 1, "recompute": "op",
                 "sequence_parallel": True}),
    # HSDP without cp: torchtitan's HSDP groups under cp hold context-parallel ranks (cp 2 here is refused)
    (LLAMA_70B, {"tp": 2, "microbatch": 2, "zero": 2, "zero_group": 16, "recompute": "full", "sequence_parallel": True,
                 "recompute_early_stop": True}),
    (LLAMA_70B, {"microbatch": 1, "zero": 0, "recompute": "none"}),
])
def test_torchtitan_toml_round_trip(model, plan):
    import tomllib

    sc = scenario(model=dict(model), **plan)
    text = export(sc, "torchtitan")
    doc = tomllib.loads(text)
    par = doc["parallelism"]
    assert par["tensor_parallel_degree"] * par["pipeline_parallel_degree"] * par["context_parallel_degree"] * \
        par["data_parallel_replicate_degree"] * par["data_parallel_shard_degree"] == 256
    back = torchtitan.parse_toml(text, dict(model), sc.cluster.model_dump(exclude_none=True))
    _same(sc, back)


def test_torchtitan_fsdp_under_pipelining_reads_and_writes_as_zero_1():
    import tomllib

    # 256 GPUs, TP 8 x PP 4: 8 data-parallel ranks, all of them FSDP2 shards (78 layers: torchtitan's split of
    # 80 layers on pp 4 puts 21 on rank 1, which the model evaluates at 20)
    par = tomllib.loads(export(scenario(model=dict(LLAMA_78), tp=8, pp=4, microbatch=1, zero=1, recompute="op",
                                        sequence_parallel=True), "torchtitan"))["parallelism"]
    assert (par["data_parallel_shard_degree"], par["data_parallel_replicate_degree"]) == (8, 1)
    # whatever the reshard policy, PyTorch's pipelining keeps the stage whole until its last micro-batch
    cluster = {"gpu": "h100-sxm", "gpus": 256}
    for policy in ("default", "always", "never"):
        text = (f'[parallelism]\ntensor_parallel_degree = 8\npipeline_parallel_degree = 4\n'
                f'pipeline_parallel_microbatch_size = 1\nfsdp_reshard_after_forward = "{policy}"\n'
                f'[training]\nlocal_batch_size = 64\n[activation_checkpoint]\nmode = "full"\n')
        assert torchtitan.parse_toml(text, dict(LLAMA_78), cluster).plan.zero == 1
    flat = text.replace("pipeline_parallel_degree = 4", "pipeline_parallel_degree = 1")
    assert torchtitan.parse_toml(flat, dict(LLAMA_70B), cluster).plan.zero == 2   # "never" without pipelining


def test_torchtitan_compile_is_the_fusion():
    import tomllib

    for fusion, compiled in (("fused", True), ("eager", False)):
        # the loss compiles with the model: eager torchtitan runs PyTorch's fp32 cross-entropy
        sc = scenario(training={"fusion": fusion, "cross_entropy": fusion}, microbatch=1, zero=3, recompute="op",
                      fsdp_overlap=1.0)  # FSDP2 prefetches
        text = export(sc, "torchtitan")
        assert tomllib.loads(text)["training"]["compile"] is compiled
        _same(sc, torchtitan.parse_toml(text, dict(LLAMA_70B), sc.cluster.model_dump(exclude_none=True)))
    with pytest.raises(CosearchError, match="training.cross_entropy"):
        export(scenario(training={"fusion": "eager"}, microbatch=1, zero=3, recompute="op"), "torchtitan")


def test_torchtitan_async_tp_without_compile_reads_as_no_overlap():
    import tomllib

    sc = scenario(tp=8, zero=3, sequence_parallel=True, tp_comm_overlap=True, tp_overlap_passes="forward",
                  microbatch=1, recompute="op", fsdp_overlap=1.0)
    doc = tomllib.loads(export(sc, "torchtitan"))
    assert doc["parallelism"]["enable_async_tensor_parallel"] is True and doc["training"]["compile"] is True
    cluster = sc.cluster.model_dump(exclude_none=True)
    back = torchtitan.parse_toml(export(sc, "torchtitan"), dict(LLAMA_70B), cluster)
    assert back.plan.tp_comm_overlap and back.plan.tp_overlap_passes == "forward"
    # the same job with compile switched off: torchtitan ignores the async-TP flag, so the plan has no overlap
    eager = export(sc, "torchtitan").replace("compile = true", "compile = false")
    back = torchtitan.parse_toml(eager, dict(LLAMA_70B), cluster)
    assert back.training.fusion == "eager" and back.plan.tp_comm_overlap is False and back.plan.tp_overlap_passes == "all"


# ------------------------------------------------------------------------------------------- CLI
def _cli(*args):
    return subprocess.run([sys.executable, "-m", "cosearch", *args], capture_output=True, text=True)


def test_cli_export_and_estimate_from_megatron_args(tmp_path, capsys):
    assert main(["export", "examples/gpt3-175b.yaml", "--format", "megatron", "--out", str(tmp_path / "m.sh")]) == 0
    text = (tmp_path / "m.sh").read_text()
    assert text.startswith("# Megatron-LM") and "--tensor-model-parallel-size 8" in text
    capsys.readouterr()
    assert main(["estimate", "--megatron-args", text.split("\n", 1)[1], "--gpu", "a100-80gb", "--json"]) == 0
    via_args = json.loads(capsys.readouterr().out)
    assert main(["estimate", "examples/gpt3-175b.yaml", "--json"]) == 0
    direct = json.loads(capsys.readouterr().out)
    assert via_args["step_time_s"] == pytest.approx(direct["step_time_s"])
    for fmt in ("nemo", "megatron"):
        assert main(["export", "examples/gpt3-175b.yaml", "--format", fmt]) == 0


def test_cli_estimate_torchtitan_and_cluster_snippet(tmp_path, capsys):
    sc = scenario(tp=8, zero=3, sequence_parallel=True, fsdp_overlap=1.0)  # FSDP2 prefetches
    (tmp_path / "job.toml").write_text(export(sc, "torchtitan"))
    (tmp_path / "model.yaml").write_text(json.dumps({"model": LLAMA_70B}))
    assert main(["estimate", "--torchtitan-toml", str(tmp_path / "job.toml"), "--model", str(tmp_path / "model.yaml"),
                 "--cluster", "{gpu: h100-sxm, gpus: 256}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"]["plan"]["zero"] == 3


def test_cli_exit_codes(tmp_path):
    r = _cli("export", "examples/gpt3-175b.yaml", "--format", "deepspeed")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "plan.tp" in r.stderr
    r = _cli("export", "--format", "megatron")
    assert r.returncode == 2 and "scenario" in r.stderr
    r = _cli("export", "examples/gpt3-175b.yaml", "--format", "slurm")
    assert r.returncode == 2
    r = _cli("estimate", "--megatron-args", "--num-layers 2", "--gpu", "h100-sxm", "--gpus", "8")
    assert r.returncode == 2 and "--hidden-size" in r.stderr
    r = _cli("estimate", "examples/gpt3-175b.yaml", "--megatron-args", "--num-layers 2")
    assert r.returncode == 2
    r = _cli("export", "examples/gpt3-175b.yaml", "--format", "megatron")
    assert r.returncode == 0 and "--use-distributed-optimizer" in r.stdout


def test_cli_export_study_row(tmp_path, capsys):
    sys.path.insert(0, "tests")
    from _studies import make_study

    journal = tmp_path / "s.journal"
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(journal)))
    make_study(storage, "st", n_trials=60)
    from cosearch.cli.export import study_scenario
    from cosearch.study import load_study, pareto_front

    front = pareto_front(load_study("st", str(journal)))
    assert len(front)
    done = 0
    for rank in range(1, len(front) + 1):
        try:
            expected = export(study_scenario("st", str(journal), rank, None), "megatron")
        except CosearchError:
            continue  # a plan Megatron cannot express
        capsys.readouterr()
        assert main(["export", "--study", "st", "--storage", str(journal), "--rank", str(rank), "--format",
                     "megatron"]) == 0
        assert capsys.readouterr().out == expected
        done += 1
    assert done
    with pytest.raises(CosearchError, match="--rank"):
        study_scenario("st", str(journal), len(front) + 1, None)


def test_deepspeed_export_carries_the_live_parameter_cap():
    sc = parse_scenario({"model": "gpt3-13b", "training": {"global_batch": 64},
                                 "cluster": {"gpu": "a100-80gb", "gpus": 16},
                                 "plan": {"zero": 3, "zero3_live_params": 1e9}})
    cfg = export(sc, "deepspeed")
    cfg = json.loads(cfg) if isinstance(cfg, str) else cfg
    assert cfg["zero_optimization"]["stage3_max_live_parameters"] == 1_000_000_000


def test_live_parameter_cap_is_refused_outside_deepspeed():
    sc = parse_scenario({"model": "gpt3-13b", "training": {"global_batch": 64},
                         "cluster": {"gpu": "a100-80gb", "gpus": 16},
                         "plan": {"zero": 3, "zero3_live_params": 1e9}})
    with pytest.raises(CosearchError, match="zero3_live_params"):
        export(sc, "torchtitan")


def test_optimizer_states_export_round_trip_and_refusals():
    base = {"model": "llama3-8b", "cluster": {"gpu": "h100-sxm", "gpus": 8}, "plan": {"zero": 1}}
    sc = parse_scenario({**base, "training": {"global_batch": 64, "optimizer_states": "bf16_moments"}})
    toks = megatron.flags(sc)
    i = toks.index("--use-precision-aware-optimizer")
    assert toks[i + 1:i + 5] == ["--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
    assert megatron.parse_args(toks, {"gpu": "h100-sxm", "gpus": 8}).training.optimizer_states == "bf16_moments"
    assert "--use-precision-aware-optimizer" not in megatron.flags(parse_scenario({**base, "training": {"global_batch": 64}}))
    mixed = toks[:i] + ["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16"] + toks[i + 5:]
    with pytest.raises(CosearchError, match="exp-avg-dtype"):  # one moment in fp32: neither mode the model has
        megatron.parse_args(mixed, {"gpu": "h100-sxm", "gpus": 8})
    pure = parse_scenario({**base, "training": {"global_batch": 64, "optimizer_states": "bf16"}})
    for fn in (megatron.flags, deepspeed.config):
        with pytest.raises(CosearchError, match="training.optimizer_states.*allowed"):
            fn(pure)


def test_torchtitan_attention_follows_the_jobs_pytorch(tmp_path, capsys):
    """SDPA's kernel is the installed PyTorch's choice: cuDNN (``flash``) from 2.11 on Hopper/Blackwell,
    FlashAttention-2 (``flash2``) before. The export states which PyTorch its estimate assumed; the import
    takes the job's version (default: a current release)."""
    for attention, version in (("flash", None), ("flash", "2.11.0+cu130"), ("flash2", "2.6.0")):
        sc = scenario(training={"attention": attention}, microbatch=1, zero=3, recompute="op", fsdp_overlap=1.0)
        text = export(sc, "torchtitan")
        assert ("(FlashAttention-2)" in text) == (attention == "flash2")
        back = torchtitan.parse_toml(text, dict(LLAMA_70B), sc.cluster.model_dump(exclude_none=True),
                                     torch_version=version)
        _same(sc, back)
    # the same TOML read for PyTorch 2.6 and for today's: only the attention kernel differs, and it is slower
    cluster = {"gpu": "h100-sxm", "gpus": 256}
    old = torchtitan.parse_toml(text, dict(LLAMA_70B), cluster, torch_version="2.6")
    new = torchtitan.parse_toml(text, dict(LLAMA_70B), cluster)
    assert (old.training.attention, new.training.attention) == ("flash2", "flash")
    assert estimate(old)["step_time_s"] > estimate(new)["step_time_s"]
    with pytest.raises(CosearchError) as err:
        torchtitan.parse_toml(text, dict(LLAMA_70B), cluster, torch_version="latest")
    assert err.value.field == "--torch-version"
    (tmp_path / "job.toml").write_text(text)
    (tmp_path / "model.yaml").write_text(json.dumps({"model": LLAMA_70B}))
    args = ["estimate", "--torchtitan-toml", str(tmp_path / "job.toml"), "--model", str(tmp_path / "model.yaml"),
            "--cluster", "{gpu: h100-sxm, gpus: 256}", "--json"]
    capsys.readouterr()
    assert main(args + ["--torch-version", "2.6"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"]["training"]["attention"] == "flash2"
    assert main(["estimate", "examples/gpt3-175b.yaml", "--torch-version", "2.6"]) == 2


def test_export_warns_when_the_plan_does_not_fit(tmp_path, capsys):
    """A plan that cannot fit is still exported as asked, with a warning line on stderr (it was silent)."""
    import yaml

    for gpus, tp, warned in ((8, 8, True), (64, 8, False)):
        f = tmp_path / f"s{gpus}.yaml"
        f.write_text(yaml.safe_dump({"model": "gpt3-175b", "training": {"global_batch": 64},
                                     "cluster": {"gpu": "h100-sxm", "gpus": gpus}, "plan": {"tp": tp, "pp": gpus // tp}}))
        assert main(["export", str(f), "--format", "megatron"]) == 0
        out, err = capsys.readouterr()
        assert out.startswith("# Megatron-LM")
        assert ("warning: DOES NOT FIT" in err) == warned, err
