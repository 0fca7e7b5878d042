"""The cells of published-run tables a validation reads (cosearch._cells): GPU names, ZeRO stages, precisions,
software eras; each case written by hand from the text a source uses. And the contract that one row the model
cannot take is left out with its reason instead of stopping the validation."""
from __future__ import annotations

import pandas as pd
import pytest

from cosearch._cells import (_recompute, attention_kernel, cross_entropy_of, container_release, container_year, gpu_id, hybrid_shard_group,
                             legacy_megatron, megatron_core_stack, optimizer_states, pipeline_split_default,
                             pipelined_zero, precision_of, source_year, recomputes_mla_up_proj, tp_overlap_passes,
                             zero_stage)
from cosearch.validation import (MODERN_PATH, TORCHTITAN_PATH, _architecture, build_candidates, load_published_runs,
                                 row_scenarios, stated_peak_memory_gib, validation_table)


@pytest.mark.parametrize("text, gid, over", [
    ("H100-SXM-80GB (DGX H100)", "h100-sxm", {}),
    ("H100 PCIe 80GB", "h100-pcie", {}),
    ("H200-SXM-141GB (HGX H200)", "h200", {}),
    ("H800 (8 per node, NVLink/NVSwitch, InfiniBand)", "h800", {}),
    ("GB200 (GB200 NVL72)", "gb200", {}),          # not b200
    ("B200 (DGX B200)", "b200", {}),
    ("GB300 (DGX-GB300, GB300 NVL72)", "gb300", {}),
    ("B300 (DGX B300)", "b300", {}),
    ("AMD Instinct MI300X (8x per node)", "mi300x", {}),
    ("MI325X", "mi325x", {}),
    ("AMD MI355X", "mi355x", {}),
    ("NVIDIA L40S", "l40s", {}),
    ("A100-SXM4-80GB (DGX A100, Selene)", "a100-80gb", {"network_gbps": 200.0}),
    ("A100-SXM4-40GB (1600 Gbps RoCE)", "a100-40gb", {"network_gbps": 200.0}),
    ("A800-SXM4-80GB", "a100-80gb", {"nvlink_gbps": 200.0}),
    ("V100-SXM3-32GB (DGX-2H)", "v100-32gb", {"gpus_per_node": 16, "nvlink_domain": 16}),
    ("GH200 Grace Hopper Superchip (96 GB HBM3)", "h200",
     {"hbm_gib": 96.0, "hbm_tbps": 4.0, "gpus_per_node": 4, "nvlink_domain": 4}),
    ("TPU v5p", None, {}),
])
def test_gpu_names(text, gid, over):
    assert gpu_id(text) == (gid, over)


@pytest.mark.parametrize("text, core, stage", [
    ("ZeRO-1", False, 1), ("ZeRO stage 2", False, 2), ("zero3", False, 3),
    ("ZeRO-3 (DeepSpeed), no model parallelism", False, 3), ("FSDP FULL_SHARD", False, 3),
    ("FSDP2 (fully_shard)", False, 3), ("SHARD_GRAD_OP", False, 2), ("HYBRID_SHARD (8-GPU shard groups)", False, 3),
    ("distributed optimizer (ZeRO-1)", True, 1), ("Megatron-FSDP (FSDP = 1)", True, 3),
    ("DDP", True, 0), ("nan", True, 1), ("nan", False, 0),
])
def test_zero_stages(text, core, stage):
    assert zero_stage(text, core) == stage


def test_hybrid_shard_groups():
    assert hybrid_shard_group("HYBRID_SHARD (8-GPU shard groups)") == 8
    assert hybrid_shard_group("HSDP, shard group of 16") == 16
    assert hybrid_shard_group("HSDP") is None and hybrid_shard_group("FSDP FULL_SHARD") is None


@pytest.mark.parametrize("text, gpu, prec", [
    ("fp8-mx (MXFP8)", "b200", "fp8"), ("fp8-cs (per-tensor current scaling)", "h100-sxm", "fp8"),
    ("bf16 with float8 linears (torchao)", "h100-sxm", "fp8"), ("NVFP4", "gb300", "fp8"),
    ("bf16 (AMP)", "a100-80gb", "bf16"), ("mixed precision (fp16 era)", "v100-32gb", "fp16"),
    ("fp16", "a100-40gb", "fp16"), ("not stated (bf16 inferred)", "h800", "bf16"),
])
def test_precisions(text, gpu, prec):
    assert precision_of(text, gpu) == prec


def test_source_years_and_megatron_eras():
    assert source_year("Narayanan et al., SC'21 (arXiv 2104.04473)") == 2021
    assert source_year("Korthikanti et al., Reducing Activation Recomputation (arXiv 2205.05198)") == 2022
    assert source_year("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md") is None
    assert legacy_megatron("S1", "", "megatron-lm")  # a known 2021 source
    assert legacy_megatron("S99", "Korthikanti et al. 2022", "megatron-lm")
    assert legacy_megatron("S99", "Smith et al., MT-NLG (arXiv 2201.11990)", "megatron-deepspeed")
    assert not legacy_megatron("S99", "NeMo performance summary 2024", "nemo 24.07 (megatron-core)")
    assert not legacy_megatron("S99", "", "megatron-lm")  # no year: taken as today's Megatron


def test_model_families():
    assert _architecture("Llama 3.1 405B") == (True, False)
    assert _architecture("Nemotron-4 340B") == (False, False)
    assert _architecture("Gemma 2 27B") == (True, True)
    assert _architecture("Mistral 7B") == (True, False)
    assert _architecture("BLOOM 176B") == (False, True)
    assert _architecture("GPT-3 175B") == (False, True)


def _modern_row(**changes) -> pd.Series:
    row = pd.read_csv(MODERN_PATH).iloc[0].copy()
    for k, v in changes.items():
        row[k] = v
    return row


def test_stack_facts_of_pytorch_native_and_jax_rows():
    titan = row_scenarios(_modern_row(framework="torchtitan (PyTorch FSDP2)", dp_sharding="FSDP2"))[0]["plan"]
    assert titan["zero"] == 3 and titan["fsdp_overlap"] == 1.0
    jax = row_scenarios(_modern_row(framework="MaxText (JAX/XLA)", dp_sharding="FSDP"))[0]["plan"]
    assert jax["zero"] == 3 and jax["fsdp_overlap"] == 1.0
    hsdp = row_scenarios(_modern_row(framework="PyTorch FSDP", dp_sharding="HYBRID_SHARD"))[0]["plan"]
    assert hsdp["zero"] == 3 and hsdp["zero_group"] == 8  # one DGX H100 node, the catalog's gpus_per_node
    legacy = row_scenarios(_modern_row(framework="Megatron-LM", source="Korthikanti et al. 2022 (arXiv 2205.05198)",
                                       source_id="S99"))[0]
    assert legacy["training"]["attention"] == "standard" and legacy["plan"]["overlap_grad_reduce"] is False


def test_optimizer_states_and_attention_kernels_of_a_stack():
    assert optimizer_states("FSDP2 (fully_shard over 8 data-parallel ranks)", "NeMo AutoModel (PyTorch FSDP2)") == "bf16"
    assert optimizer_states("distributed optimizer (ZeRO-1), BF16 optimizer states", "Megatron-Core + TE") == "bf16_moments"
    assert optimizer_states("FSDP2", "torchtitan (PyTorch FSDP2)") == "fp32"      # fp32 master weights
    assert optimizer_states("distributed optimizer", "Megatron-Bridge / Megatron-Core") == "fp32"
    assert optimizer_states("ZeRO-1", "HAI-LLM (DeepSeek in-house)") == "bf16_moments"  # DeepSeek-V3 sec. 3.3.3
    # NeMo 1.x's Apex optimizer with optim.dtype bf16 keeps its master copy in bf16 too (6 B, not 8)
    apex = "distributed optimizer (Apex distributed_fused_adam, bf16 optimizer state)"
    assert optimizer_states(apex, "NeMo 24.07 (Megatron-Core)") == "bf16_master"
    assert optimizer_states("distributed optimizer (Apex distributed_fused_adam)", "NeMo 24.07") == "fp32"
    # NeMo AutoModel is NeMo's PyTorch-native library: none of Megatron-Core's defaults apply to it
    assert not megatron_core_stack("NeMo AutoModel (PyTorch FSDP2 + expert parallel)")
    assert megatron_core_stack("NeMo (Megatron-Core), alltoall dispatcher")
    assert attention_kernel("NeMo AutoModel (TE; DeepEP dispatcher, FlexAttention)", False) == "flash2"
    assert attention_kernel("Composer/llm-foundry (PyTorch FSDP, Triton/Flash attention, ALiBi)", False) == "triton"
    assert attention_kernel("Megatron-LM", True) == "standard"
    assert attention_kernel("Megatron-Core + TE", False) == "flash"
    # TE's cuDNN attention switched off by the recipe: the flash-attn package (FlashAttention-2) runs
    assert attention_kernel("NeMo 24.09 (Megatron-Core, TE; NVTE_FUSED_ATTN=0)", False) == "flash2"
    assert attention_kernel("NeMo 24.09 (Megatron-Core, TE; NVTE_FUSED_ATTN=1)", False) == "flash"
    # a stated setting wins over the launcher-era container rule (24.03-24.07 ran FA2 unless told otherwise)
    assert attention_kernel("NeMo 24.05 (Megatron-Core, TE)", False) == "flash2"
    assert attention_kernel("NeMo 24.05 (Megatron-Core, TE; NVTE_FUSED_ATTN=1)", False) == "flash"


def test_nemo_containers_whose_launcher_turned_cudnn_attention_off_run_flashattention2():
    # NeMo-Framework-Launcher pinned nemo:24.03.01 with NVTE_FUSED_ATTN=0 until PRs #384/#422 (Aug 2024)
    assert container_release("NeMo 24.03.01 (Megatron-Core, Transformer Engine)") == (24, 3)
    assert container_release("NeMo 24.x (Megatron-Core, TE)") == (24, 0)
    assert container_release("Megatron-Core + TE") is None
    assert container_year("Megatron-Bridge / Megatron-Core (NeMo 26.02)") == 2026
    for framework in ("NeMo 24.03.01 (Megatron-Core, Transformer Engine)", "NeMo 24.05", "NeMo 24.07 (Megatron-Core)"):
        assert attention_kernel(framework, False) == "flash2", framework
    for framework in ("NeMo 23.11", "NeMo 24.09 (Megatron-Core)", "NeMo 24.x (Megatron-Core, TE)",
                      "Megatron-Bridge / Megatron-Core (NeMo 26.02)", "PyTorch 24.05 (torchtitan)"):
        assert attention_kernel(framework, False) == "flash", framework


def test_one_odd_row_is_left_out_with_its_reason():
    df = pd.read_csv(MODERN_PATH).head(3).copy()
    df.loc[1, "gpu_type"] = "TPU v5p"
    c = build_candidates(df)
    assert list(c.rows.row_id) == [df.row_id[0], df.row_id[2]]
    assert c.skipped == [{"row_id": df.row_id[1], "reason": "unknown gpu_type 'TPU v5p': not in the GPU catalog"}]
    assert len(validation_table(c)) == 2


def test_moe_model_named_without_expert_columns_takes_its_preset():
    # a table in the dense columns naming Mixtral 8x7B: 8 experts, top-2, 32 layers (mistralai config.json)
    blank = dict.fromkeys(("n_layers", "hidden_size", "n_heads", "n_kv_heads", "ffn_hidden_size", "vocab_size"),
                          float("nan"))
    m = row_scenarios(_modern_row(model="Mixtral 8x7B (instruct)", **blank))[0]["model"]
    assert (m["experts"], m["top_k"], m["layers"], m["hidden"], m["kv_heads"], m["vocab"]) == (8, 2, 32, 4096, 8, 32000)
    # cells the table states win over the preset's
    assert row_scenarios(_modern_row(model="Mixtral 8x7B", **dict(blank, n_kv_heads=16)))[0]["model"]["kv_heads"] == 16
    dense = row_scenarios(_modern_row())[0]["model"]
    assert "experts" not in dense  # a dense Llama row is untouched


def test_unstated_recompute_is_tuned_on_every_stack_and_async_tp_overlaps():
    row = _modern_row(framework="torchtitan (async TP)", recompute=float("nan"), dp_sharding="FSDP2")
    cands = row_scenarios(row)
    assert {c["plan"]["recompute"] for c in cands} == {"none", "selective", "full"}
    assert all(c["plan"]["tp_comm_overlap"] for c in cands) and cands[0]["plan"]["tp"] > 1
    # PyTorch's async TP hides the forward's collectives only; Transformer Engine's userbuffers every pass's
    assert {c["plan"]["tp_overlap_passes"] for c in cands} == {"forward"}
    nemo = row_scenarios(_modern_row(framework="NeMo 24.09 (Megatron-Core, TE)", recompute="full"))[0]["plan"]
    assert nemo["tp_comm_overlap"] and "tp_overlap_passes" not in nemo  # the model's default: every pass


@pytest.mark.parametrize("framework, passes", [
    ("torchtitan (async TP)", "forward"), ("torchtitan", "forward"), ("PyTorch FSDP2 + async_tp", "forward"),
    ("NeMo 24.07 (Megatron-Core)", "all"), ("Megatron-LM", "all"), ("DeepSpeed", "all"),
])
def test_tensor_parallel_overlap_passes_of_a_stack(framework, passes):
    # one fact for the validation (row_scenarios above) and the exporters (frameworks._common.layout)
    assert tp_overlap_passes(framework) == passes


def test_step_time_from_megatron_flop_rate_of_any_source():
    # S1 row 1 (1.7B, 32 GPUs, batch 512, 137 TFLOP/s/GPU) read under another source id that cites the formula:
    # F = 96 B s l h^2 (1 + s/6h + V/16lh) / (TFLOP/s x GPUs), the same step time
    from cosearch.validation import DEFAULT_PATH, measured_step_time_s
    s1 = pd.read_csv(DEFAULT_PATH).iloc[0]
    other = s1.copy()
    other["source_id"] = "S99"
    assert measured_step_time_s(other) == pytest.approx(measured_step_time_s(s1))
    other["flops_convention"] = "model FLOPs as reported"
    assert measured_step_time_s(other) is None


def test_a_table_missing_columns_reads_what_it_states():
    # another source's export: no row_id, no time columns, no MoE columns; every row still predicted
    df = pd.read_csv(MODERN_PATH).head(4).drop(columns=["row_id", "iteration_time_s", "notes", "other_metrics"])
    c = build_candidates(df)
    assert list(c.rows.row_id) == [1, 2, 3, 4] and not c.skipped   # tokens/s/GPU gives the step time
    assert list(validation_table(c)["measured_from"]) == ["stated time or throughput"] * 4


@pytest.mark.parametrize("convention, source, framework, causal", [
    ("", "", "Megatron-Bridge / Megatron-Core (NeMo 26.02)", True),    # Megatron's counter halves causal attention
    ("", "", "NeMo 24.07 (Megatron-Core)", False),                     # before 2025 it did not
    ("", "MaxText README (2025)", "MaxText (JAX)", True),              # MaxText PR #1988, July 2025
    ("", "torchtitan (2025)", "torchtitan", False),                    # 6N + 12*L*h*s
    ("6N + attention with causal mask", "", "", True),
    ("non-causal 12*L*d*s", "", "NeMo 26.02", False),
])
def test_causal_flops_counts(convention, source, framework, causal):
    from cosearch._cells import causal_flops_count
    assert causal_flops_count(convention, source, framework) is causal


@pytest.mark.parametrize("path_name, keep, tolerance", [
    ("MODERN_PATH", ("tflops_per_gpu",), 0.002),          # NeMo 24.07 / DGX Cloud: Model TFLOP/sec/GPU
    ("MODERN_PATH", ("mfu_pct",), 0.002),                 # MFU against 989 (bf16) / 1979 (fp8) TFLOP/s
    ("BRIDGE_DENSE_PATH", ("tflops_per_gpu",), 0.002),    # Bridge 25.09-26.02: causal count
    ("DEFAULT_PATH", ("mfu_pct",), 0.012),                # MosaicML: 6N + 12*L*d*s
])
def test_step_time_from_a_stated_flop_rate_alone(path_name, keep, tolerance):
    # A row that states only a FLOP rate or MFU: the model's own model-FLOPs count over that rate gives the same
    # step time as the source's own tokens/s (an independent stated quantity), within the rounding of the tables.
    import numpy as np
    import cosearch.validation as v
    df = pd.read_csv(getattr(v, path_name))
    df = df[df.source_id != "S1"] if path_name == "DEFAULT_PATH" else df
    df = df[df[keep[0]].notna() & (df.tokens_per_s.notna() | df.tokens_per_s_per_gpu.notna())]
    rate_cols = {"tflops_per_gpu", "mfu_pct", "aggregate_pflops"} - set(keep)
    stated = validation_table(build_candidates(df))
    only_rate = build_candidates(df.drop(columns=["iteration_time_s", "tokens_per_s", "tokens_per_s_per_gpu",
                                                  *rate_cols]))
    derived = validation_table(only_rate)
    assert len(derived) == len(stated) >= 10 and not only_rate.skipped
    assert set(derived.measured_from) == {"model FLOPs count over the stated FLOP rate"}
    ratio = derived.measured_step_s.to_numpy() / stated.measured_step_s.to_numpy()
    assert np.all(np.abs(ratio - 1.0) < tolerance)


def test_a_hardware_flop_rate_is_not_taken_for_model_flops():
    row = _modern_row(iteration_time_s=float("nan"), tokens_per_s=float("nan"), tokens_per_s_per_gpu=float("nan"),
                      mfu_pct=float("nan"), tflops_per_gpu=150.0,
                      flops_convention="teraFLOP/s per GPU, INCLUDES recompute forward (HFU-like)")
    c = build_candidates(pd.DataFrame([row]))
    assert c.skipped[0]["reason"] == "no stated step time, throughput or FLOP rate to derive one from"


@pytest.mark.parametrize("framework, early", [
    ("torchtitan (PyTorch FSDP2)", True),        # torch.utils.checkpoint(use_reentrant=False): early stop (PyTorch >= 2.1)
    ("MaxText (JAX)", True),                     # jax.checkpoint: the rerun forward keeps what the backward reads
    ("NeMo 24.x (Megatron-Core, TE)", False),    # Megatron's reentrant CheckpointFunction reruns the layer
    ("Composer/llm-foundry (PyTorch FSDP, Triton/Flash attention, ALiBi)", False),  # 2023 tables, before PyTorch 2.1
])
def test_full_recompute_stops_early_on_pytorch_native_and_jax_stacks(framework, early):
    plan = row_scenarios(_modern_row(framework=framework, recompute="full", dp_sharding="FSDP2"))[0]["plan"]
    assert plan["recompute"] == "full" and plan.get("recompute_early_stop", False) is early


def test_selective_cells_name_their_modules():
    # (cell, plan.recompute, plan.recompute_mla_up_proj): the activation function or attention core listed
    # -> selective; only norms and MLA up-projections listed -> none, with the up-projections rerun
    cases = [("selective (norm, act)", "selective", False), ("selective (core_attn)", "selective", False),
             ("selective (mla_up_proj)", "none", True), ("selective (mlp, moe_act)", "selective", False),
             ("selective (RMSNorm and MLA up-projections recomputed; Sec. 3.2.3)", "none", True),
             ("selective (mlp of the dense layers, MLA up_proj)", "selective", True),
             ("selective", "selective", False), ("full (activation_checkpointing: true in the recipe)", "full", False)]
    for cell, mode, up in cases:
        assert (_recompute(cell, "S22"), recomputes_mla_up_proj(cell)) == (mode, up), cell


@pytest.mark.parametrize("framework, loss", [
    ("torchtitan (PyTorch FSDP2, eager, SDPA; spring 2024)", "eager"),   # loss_fn outside torch.compile
    ("torchtitan (PyTorch FSDP2, torch.compile per block, SDPA; Dec 2024)", "eager"),  # compile per block only
    ("torchtitan (PyTorch FSDP2, torch.compile per block, SDPA; June 2025)", "fused"),
    ("NeMo 24.07 (Megatron-Core)", "fused"),  # vocab-parallel cross-entropy, gradient in place
])
def test_cross_entropy_of_a_stack(framework, loss):
    assert cross_entropy_of(framework) == loss


def test_torchtitan_memory_within_its_stated_reserved_peak():
    # torchtitan's tables state PyTorch's max reserved memory per GPU (the caching allocator's slack on top of the
    # tensors): on the FSDP-only rows the model's peak sits at most 15 % under it and never 5 % over. Without the
    # eager cross-entropy's fp32 gradient pair (12 B per logit, not 6) the 8B rows sat 21-39 % under.
    runs = load_published_runs(TORCHTITAN_PATH)
    stated = stated_peak_memory_gib(runs)
    rows = runs[runs["row_id"].map(stated).notna() & (runs["tp"] == 1) & (runs["pp"] == 1)]
    table = validation_table(build_candidates(rows))
    ratio = table["memory_gib"].to_numpy() / table["row_id"].map(stated).to_numpy()
    assert len(ratio) >= 10 and ((ratio > 0.85) & (ratio < 1.05)).all(), ratio


def test_pytorch_pipelining_keeps_fsdp_whole_and_splits_into_as_many_micro_batches_as_stages():
    titan = "torchtitan (PyTorch FSDP2, torch.distributed.pipelining; Dec 2024) schedule 1F1B"
    # FSDP2 under PyTorch's pipelining: parameters and gradients stay whole until the last micro-batch (zero 1)
    assert [pipelined_zero(z, pp, titan) for z, pp in ((3, 8), (2, 8), (3, 1), (0, 8))] == [1, 1, 3, 0]
    assert pipelined_zero(3, 8, "Megatron-FSDP (Megatron-Core)") == 3
    # torchtitan's defaults: micro-batches = pipeline stages, 2 stages per rank for a multi-stage schedule
    assert pipeline_split_default(titan, 8, None, 32) == (1, 4)              # 32 sequences / 8 stages
    assert pipeline_split_default(titan + " Interleaved 1F1B", 8, None, 32) == (2, 2)  # / 16 stages
    assert pipeline_split_default(titan, 8, 4, 64) == (4, 2)                # a stated split: 32 stages
    assert pipeline_split_default(titan, 8, None, 12) is None               # 12 sequences do not split 8 ways
    assert pipeline_split_default(titan, 1, None, 32) is None
    assert pipeline_split_default("NeMo 24.07 (Megatron-Core)", 8, None, 32) is None


def test_torchtitan_405b_pipeline_rows_run_torchtitans_split_and_sharding():
    # Llama 3.1 405B, FSDP 8 x TP 8 x PP 8, local batch 32 (torchtitan's Dec 2024 table 5): the default split is 8
    # micro-batches of 4 under 1F1B, 16 of 2 under Interleaved 1F1B (2 stages per rank), and FSDP runs as zero 1.
    runs = load_published_runs(TORCHTITAN_PATH)
    table = validation_table(build_candidates(runs[runs["row_id"].isin([523, 524])])).set_index("row_id")
    assert table.loc[523, ["microbatch", "interleave", "zero"]].tolist() == [4, 1, 1]
    assert table.loc[524, ["microbatch", "interleave", "zero"]].tolist() == [2, 2, 1]
    # 8 micro-batches on 8 stages leave 7/15 of the 1F1B step idle: the published step (41.0 s) is within 10 %
    assert abs(table.loc[523, "error"]) < 0.10
    # the whole stage's weights (2 B) and gradients (2 B) per parameter: 405e9 / 64 ranks x 4 B = 23.6 GiB at least
    assert (table["memory_gib"] > 405e9 / 64 * 4 / 2**30).all()


def test_recipe_settings_fill_blank_cells_only(caplog):
    """The recipe settings (experiments/data/validation/recipe_settings.csv) fill cells a table leaves blank and
    never replace a stated one; another directory's table (other row ids, other runs) is read as it is."""
    from cosearch.validation import DATA_DIR, RECIPE_SETTINGS_PATH, with_recipe_settings

    settings = pd.read_csv(RECIPE_SETTINGS_PATH, dtype=str)
    assert set(settings.columns) >= {"table", "row_id", "column", "value", "source_location"}
    assert settings["source_location"].str.len().min() > 20  # every setting cites the config it was read from
    for s in settings.itertuples(index=False):
        table = pd.read_csv(DATA_DIR / s.table)
        assert (table["row_id"] == int(s.row_id)).sum() == 1, (s.table, s.row_id)
        if s.column in table.columns:  # a column the table lacks (fp8_params) is blank in every row
            cell = table.loc[table["row_id"] == int(s.row_id), s.column]
            assert cell.isna().all(), (s.table, s.row_id, s.column)  # blank in the table as copied
    runs = pd.read_csv(MODERN_PATH)
    filled = with_recipe_settings(runs, MODERN_PATH).set_index("row_id")
    assert filled.loc[187, "recompute"] == "selective" and "distributed_fused_adam" in filled.loc[187, "dp_sharding"]
    stated = runs.copy()
    stated.loc[stated["row_id"] == 187, "recompute"] = "full"
    with caplog.at_level("WARNING", logger="cosearch.validation"):
        assert with_recipe_settings(stated, MODERN_PATH).set_index("row_id").loc[187, "recompute"] == "full"
    assert "row 187" in caplog.text and "not applied" in caplog.text
    assert with_recipe_settings(runs, "/tmp/elsewhere/published_runs_modern.csv").equals(runs)
    # NVIDIA's Llama 3.1 fp8 recipes of S7 set +model.fp8_params (weights held in fp8); the bf16 rows take nothing
    s7 = runs.set_index("row_id")["source_id"] == "S7"
    fp8 = runs.set_index("row_id")["precision"].str.startswith("fp8")
    assert (filled.loc[s7 & fp8, "fp8_params"] == "yes").all() and filled.loc[~(s7 & fp8), "fp8_params"].isna().all()
    # only the filled cells change
    assert filled.drop(columns=["recompute", "dp_sharding", "fp8_params"]).equals(runs.set_index("row_id").drop(
        columns=["recompute", "dp_sharding"]))


def test_apex_bf16_state_lets_the_nemotron_340b_recipe_fit():
    """Nemotron-4 340B on 128 H100 (TP 8, PP 8, VP 12, selective recompute, fp8): NVIDIA's recipe keeps Apex's
    optimizer state in bf16 (6 B per owned parameter). With fp32 states (12 B) the model says the recipe does not fit
    80 GB; with the recipe's states it fits, and the optimizer memory is half."""
    runs = load_published_runs()
    (sc,) = [s for s in row_scenarios(runs[runs["row_id"] == 187].iloc[0])]
    assert sc["plan"]["recompute"] == "selective" and sc["training"]["optimizer_states"] == "bf16_master"
    from cosearch import estimate

    apex = estimate(sc)
    fp32 = estimate({**sc, "training": {**sc["training"], "optimizer_states": "fp32"}})
    assert apex["fits"] and not fp32["fits"]
    assert fp32["memory_breakdown_gib"]["optimizer"] / apex["memory_breakdown_gib"]["optimizer"] == pytest.approx(2.0)
