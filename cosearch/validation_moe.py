"""Published mixture-of-experts training runs (issue 13's validation data), with the measured step time.

Reads ``experiments/data/validation/published_runs_moe.csv`` (sources in that folder's SOURCES.md) and
derives each row's step time from what its source states, in this order of preference:

1. a stated step time (``iteration_time_s``);
2. tokens per second, whole job or per GPU: ``GBS x seq / tokens_per_s``;
3. GPU-hours per trillion tokens (DeepSeek-V2/V3 reports): tokens/s/GPU = 1e12 / (hours x 3600);
4. model TFLOP/s per GPU with the FLOPs per token the row states: ``GBS x seq x flops_per_token /
   (TFLOP/s x 1e12 x GPUs)``.

:func:`moe_row_scenarios` maps each row to candidate scenarios (``cosearch.validation.row_scenarios`` calls
it for rows with experts, so dense and MoE rows share one validation path).
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._cells import (_num, _recompute, _stated, fp8_param_gather_of, gpu_id, megatron_core_stack, precision_of, recomputes_mla_up_proj,
                     stack_plan_facts, stack_training_facts, zero_stage)
from .presets import preset

#: The MoE published-runs CSV (a clone or editable install; not shipped in a wheel).
MOE_PATH = Path(__file__).resolve().parents[1] / "experiments" / "data" / "validation" / "published_runs_moe.csv"
SECONDS_PER_HOUR = 3600.0
TOKENS_PER_TRILLION = 1e12


def tokens_per_s_per_gpu_from_gpu_hours(gpu_hours_per_trillion_tokens: float) -> float:
    """Average tokens/s per GPU of a run that spent ``gpu_hours`` GPU-hours per 1e12 tokens."""
    return TOKENS_PER_TRILLION / (gpu_hours_per_trillion_tokens * SECONDS_PER_HOUR)


def measured_step_time(row: pd.Series | dict) -> tuple[float | None, str]:
    """(step time in seconds, the stated quantity it came from) of one published run; (None, reason)
    when the row states too little (e.g. no GPU count)."""
    get = row.get
    tokens_per_step = (_num(get("global_batch_size")) or math.nan) * (_num(get("seq_len")) or math.nan)
    gpus = _num(get("num_gpus"))
    if (t := _num(get("iteration_time_s"))) is not None:
        return t, "iteration_time_s"
    if math.isnan(tokens_per_step):
        return None, "no global_batch_size x seq_len"
    if (tps := _num(get("tokens_per_s"))) is not None:
        return tokens_per_step / tps, "tokens_per_s"
    if gpus is None:
        return None, "no num_gpus"
    if (tpg := _num(get("tokens_per_s_per_gpu"))) is not None:
        return tokens_per_step / (tpg * gpus), "tokens_per_s_per_gpu"
    if (hours := _num(get("gpu_hours_per_trillion_tokens"))) is not None:
        return tokens_per_step / (tokens_per_s_per_gpu_from_gpu_hours(hours) * gpus), "gpu_hours_per_trillion_tokens"
    tflops, fpt = _num(get("tflops_per_gpu")), _num(get("model_flops_per_token"))
    if tflops is not None and fpt is not None:
        return tokens_per_step * fpt / (tflops * 1e12 * gpus), "tflops_per_gpu x model_flops_per_token"
    return None, "no stated time, throughput or FLOP rate with FLOPs per token"


def load_moe_runs(path: str | Path = MOE_PATH) -> pd.DataFrame:
    """The MoE published runs with ``step_time_s`` (NaN where underivable), ``step_time_from`` (which
    stated quantity it came from), the implied ``measured_tokens_per_s_per_gpu`` and, where a row
    states both a FLOP rate and a throughput, ``implied_flops_per_token`` (a consistency check)."""
    df = pd.read_csv(path)
    pairs = [measured_step_time(r) for r in df.to_dict("records")]
    df["step_time_s"] = np.array([np.nan if t is None else t for t, _ in pairs], dtype=float)
    df["step_time_from"] = [src for _, src in pairs]
    tokens = df["global_batch_size"] * df["seq_len"]
    df["measured_tokens_per_s_per_gpu"] = tokens / (df["step_time_s"] * df["num_gpus"])
    hours = df["gpu_hours_per_trillion_tokens"]
    df.loc[hours.notna(), "measured_tokens_per_s_per_gpu"] = tokens_per_s_per_gpu_from_gpu_hours(hours[hours.notna()])
    df["implied_flops_per_token"] = df["tflops_per_gpu"] * 1e12 / df["measured_tokens_per_s_per_gpu"]
    return df


# --- issue 13 validation: MoE rows as scenarios (called from cosearch.validation.row_scenarios) ------------

#: Megatron-Bridge performance recipes (NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/,
#: deepseek/deepseek_workload_base_configs.py @04264182 and qwen/qwen3_workload_base_configs.py @01b2977e):
#: ``BASE_DEEPSEEK_V3_CONFIG`` and ``BASE_QWEN3_*_CONFIG`` set ``expert_tensor_parallel_size=1`` (so ETP is 1
#: even where TP is 2); DeepSeek-V3 and Qwen3-30B-A3B use ``moe_flex_dispatcher_backend="hybridep"`` on every
#: GPU, Qwen3-235B-A22B uses it on GB200/GB300 and ``moe_token_dispatcher_type="alltoall"`` on B200/B300/H100;
#: ``moe_a2a_overlap=True`` in the DeepSeek-V3 MXFP8 GB200/GB300 recipes and the Qwen3-235B H100 recipes;
#: GPT-OSS-120B (gpt_oss/gpt_oss_workload_base_configs.py @07eea52d) keeps the default alltoall dispatcher in
#: its BF16 recipes and sets ``moe_a2a_overlap=True`` on GB200 (GBS 1280). The recipe files are the current
#: versions, applied to every container section of the table (older containers may have differed).
#: HybridEP (like DeepEP) sends a token once per destination node and forwards it over NVLink there, which is
#: what ``plan.moe_dispatcher: deepep`` models.
BRIDGE_ETP1_MODELS = ("deepseek-v3", "qwen3")
#: Capacity factor of the Megatron-Bridge performance recipes' token-drop runs: ``apply_moe_token_drop(model)``
#: (``megatron.bridge.training.utils.moe_token_drop``, imported by every scripts/performance config that offers
#: ``use_tokendrop``) defaults to ``moe_expert_capacity_factor=1.0`` with ``moe_pad_expert_input_to_capacity=True``
#: and asserts ``moe_token_dispatcher_type`` alltoall: each expert computes exactly its mean load.
BRIDGE_TOKEN_DROP_CAPACITY = 1.0
#: Attention-window fields of a model the CSV has no columns for, taken from its preset (the one place that
#: states them with their source, cosearch/data/models.yaml): GPT-OSS's 128-token windows in every other layer.
WINDOW_FIELDS = ("sliding_window", "global_attention_every")
NVL72 = ("gb200", "gb300")


def _bridge_dispatch(model: str, gpu: str, fp8: bool) -> tuple[str, float]:
    """(dispatcher, a2a overlap) of a Megatron-Bridge performance recipe (see :data:`BRIDGE_ETP1_MODELS`)."""
    m = model.lower()
    hybrid = "deepseek" in m or "30b" in m or ("235b" in m and gpu in NVL72)
    overlap = (("deepseek" in m and fp8 and gpu in NVL72) or ("235b" in m and gpu.startswith("h100"))
               or ("gpt-oss" in m and gpu == "gb200"))
    return ("deepep" if hybrid else "alltoall"), (1.0 if overlap else 0.0)


def _int(x: Any, default: int | None = None) -> int | None:
    v = _num(x)
    return default if v is None else int(v)


def moe_model_fields(row: Mapping) -> dict[str, Any]:
    """The scenario ``model`` of a MoE row, every architecture field as the CSV states it. All models in the
    CSV use a gated MLP (SwiGLU; Grok-1 GeGLU, grok1_314b.yaml ``fast-geglu``); DeepSeek-V3, Qwen3 and
    GPT-OSS untie the output layer (``tie_word_embeddings: false`` in their config.json), Grok-1 ties it
    (Megatron-Core's default, ``share_embeddings_and_output_weights`` not set in grok1_314b.yaml)."""
    get = row.get
    mla = str(get("attention")).lower() == "mla"
    model: dict[str, Any] = {
        "layers": _int(get("n_layers")), "hidden": _int(get("hidden_size")), "heads": _int(get("n_heads")),
        "kv_heads": _int(get("n_kv_heads"), _int(get("n_heads"))), "gated_mlp": True,
        "tied_embeddings": "grok" in str(get("model")).lower(), "vocab": _int(get("vocab_size")),
        "seq_len": _int(get("seq_len")), "experts": _int(get("experts")), "top_k": _int(get("top_k")),
        "expert_ffn_hidden": _int(get("expert_ffn_hidden")), "shared_experts": _int(get("shared_experts"), 0),
        "dense_layers": _int(get("dense_layers"), 0), "attention": "mla" if mla else "gqa",
    }
    model["ffn_hidden"] = _int(get("ffn_hidden_size")) or _int(get("dense_ffn_hidden")) or model["expert_ffn_hidden"]
    for key in ("shared_ffn_hidden", "dense_ffn_hidden", "head_dim", "mtp_layers"):
        if _num(get(key)) is not None:
            model[key] = _int(get(key))
    if "gpt-oss" in str(get("model")).lower():  # 120B and 20B share the attention pattern (their config.json)
        gpt_oss = preset("gpt-oss-120b")
        model.update({k: gpt_oss[k] for k in WINDOW_FIELDS})
    if mla:
        model.update({k: _int(get(k)) for k in ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                                                 "v_head_dim")})
        if "deepseek-v3" in str(get("model")).lower():
            model["routed_nodes_limit"] = 4  # node-limited routing, M = 4 (arXiv 2412.19437 sec. 2.1.2)
    return model


def moe_row_scenarios(row: Mapping) -> list[dict[str, Any]] | None:
    """Candidate scenarios of one published MoE run, or None when it lacks a field the model needs (a GPU
    outside the catalog, e.g. a TPU; no GPU count).

    Stated fields are used as stated; unstated micro-batch, interleaving and recompute are tuned as for the
    dense rows (:func:`cosearch.validation.row_scenarios`). Facts of the named stack: Megatron-Core/NeMo
    use the distributed optimizer, sequence parallelism with TP, the recipes' ETP, dispatcher and a2a
    overlap (:func:`_bridge_dispatch`; an overlap the row states, column ``moe_a2a_overlap``, wins) and one GEMM
    launch per local expert; "force-balanced" routing (S20's note) has load imbalance 1.0, a
    padded capacity factor fixes each expert's rows at capacity, and the summary's token-drop runs take the
    recipes' token-drop settings (:data:`BRIDGE_TOKEN_DROP_CAPACITY`, the alltoall dispatcher); DeepSeek-V3's own run (S24) used DeepEP
    with DualPipe's full computation-communication overlap and fp8 dispatch (arXiv 2412.19437 sec. 3.2.1-3.2.2,
    3.3.2); Megatron-Core dispatches in 16 bits (:mod:`cosearch.model.moe`).
    """
    get = row.get
    gpu, overrides = get("gpu"), {}
    if not isinstance(gpu, str) or not gpu:  # the catalog id column is ours; other tables name the GPU in gpu_type
        gpu, overrides = gpu_id(get("gpu_type"))
    if gpu is None or _num(get("num_gpus")) is None:
        return None
    framework, source = str(get("framework")).lower(), str(get("source_id"))
    megatron_core = megatron_core_stack(framework)
    fp8 = precision_of(get("precision"), gpu) == "fp8"
    tp, pp = _int(get("tp"), 1), _int(get("pp"), 1)
    sharding = str(get("dp_sharding")).lower()
    zero = zero_stage(sharding, True)  # unstated: every MoE source shards optimizer states (distributed optimizer / ZeRO-1)
    sp = _stated(get("sequence_parallel"))
    routing = str(get("routing")).lower()
    dispatcher, overlap = "alltoall", 0.0
    cited = f"{get('source')} {framework}".lower()
    bridge_recipes = source == "S20" or ("megatron-bridge" in cited and "performance" in cited)  # the summary's recipes
    if bridge_recipes:
        dispatcher, overlap = _bridge_dispatch(str(get("model")), gpu, fp8)
    # the summary's "tokendrop" runs (its 25.09 section): the recipes' only token-drop switch, Megatron-Bridge's
    # apply_moe_token_drop, sets capacity factor 1.0 padded to capacity and asserts the alltoall dispatcher
    token_drop = bridge_recipes and "token-drop" in routing
    if token_drop:
        dispatcher = "alltoall"
    deepseek_own = source == "S24" or "hai-llm" in framework  # DeepSeek-V3's run: DeepEP + DualPipe's overlap
    if "deepep" in framework or "hybridep" in framework or deepseek_own:
        dispatcher = "deepep"
    if deepseek_own:  # DualPipe hides the all-to-all; DeepEP sends the dispatch in fp8 (sec. 3.3.2)
        overlap = 1.0
    stated_overlap = _stated(get("moe_a2a_overlap"))  # the source names its all-to-all overlap (S21's "+1f1b overlap")
    if stated_overlap is not None:
        overlap = 1.0 if stated_overlap else 0.0
    etp = _int(get("etp"))
    if etp is None and bridge_recipes and any(m in str(get("model")).lower() for m in BRIDGE_ETP1_MODELS):
        etp = 1
    plan_fixed: dict[str, Any] = {
        "tp": tp, "pp": pp, "cp": _int(get("cp"), 1), "zero": zero, "ep": _int(get("ep"), 1),
        "sequence_parallel": bool((megatron_core and tp > 1) if sp is None else sp),
        "tp_comm_overlap": bool(megatron_core and tp > 1 and gpu.startswith("h100")),
        "moe_dispatcher": dispatcher, "moe_a2a_overlap": overlap, "moe_fp8_dispatch": deepseek_own and fp8,
        # Megatron-Core's expert GEMMs launch one GEMM per expert (TE GroupedLinear; cosearch.model.moe)
        "moe_grouped_gemm": "per_expert" if megatron_core else "grouped",
        **stack_plan_facts(sharding, framework, zero),
        **({"fp8_param_gather": True} if fp8_param_gather_of(get("precision"), zero, get("fp8_params")) else {}),
    }
    if etp is not None:
        plan_fixed["etp"] = etp
    if _num(get("capacity_factor")) is not None:
        plan_fixed["capacity_factor"] = float(get("capacity_factor"))
    elif token_drop:
        plan_fixed["capacity_factor"] = BRIDGE_TOKEN_DROP_CAPACITY
    sched = get("schedule")
    if isinstance(sched, str) and sched:
        plan_fixed["schedule"] = sched
    training = {"global_batch": _int(get("global_batch_size")), "precision": "fp8" if fp8 else "bf16",
                **stack_training_facts(sharding, framework),
                "moe_load_imbalance": 1.0 if "force-balanced" in routing and "not force" not in routing else None}
    if training["moe_load_imbalance"] is None:
        del training["moe_load_imbalance"]
    mbs = [_int(get("micro_batch_size"))] if _num(get("micro_batch_size")) else [1, 2, 4]
    vpps = [_int(get("vpp"))] if _num(get("vpp")) else ([1, 2, 4] if pp > 1 and sched != "dualpipe" else [1])
    stated_rc = get("recompute") if isinstance(get("recompute"), str) and not get("recompute").startswith("none stated") else None
    recomputes = [_recompute(stated_rc, source)] if stated_rc else ["none", "selective", "full"]
    cluster = {"gpu": gpu, "gpus": _int(get("num_gpus")), **overrides}
    model = moe_model_fields(row)
    # MLA's up-projections: rerun where the cell names them; tuned with the rest where recompute is unstated
    mla_up = ([recomputes_mla_up_proj(stated_rc)] if stated_rc else [False, True]) if model.get("attention") == "mla" else [False]
    out = []
    for mb, v, rc, up in itertools.product(mbs, vpps, recomputes, mla_up):
        if up and rc == "full":
            continue  # moot: full recompute keeps only the layer inputs
        plan = dict(plan_fixed, microbatch=mb, interleave=v, recompute=rc)
        if up:
            plan["recompute_mla_up_proj"] = True
        if v > 1 and "schedule" not in plan:
            plan["schedule"] = "interleaved"
        if plan.get("schedule") == "interleaved" and v == 1:
            plan["schedule"] = "1f1b"
        out.append({"model": model, "training": training, "cluster": cluster, "plan": plan})
    return out
