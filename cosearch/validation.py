"""Published training runs as scenarios: the ground truth the model is checked and calibrated against.

Reads ``experiments/data/validation/published_runs_*.csv`` (see its SOURCES.md) and turns each row that
states enough into a scenario plus the measured step time. Knobs a source does not state are not
guessed per row: micro-batch size and interleaving, when missing, are set to the model's own best
feasible choice (the authors tuned them), and facts of the software era are applied by source
(flash attention did not exist before 2022; Megatron-LM examples of 2019-2021 always checkpointed
activations; sequence parallelism arrived in 2022).
"""
from __future__ import annotations

import functools
import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._cells import (_num, _recompute, _stated, causal_flops_count, fp8_param_gather_of, gpu_id, hybrid_shard_group,
                     legacy_megatron, megatron_core_stack, names_async_tp, pipeline_split_default, pipelined_zero,
                     precision_of, stack_plan_facts, stack_training_facts, tp_overlap_passes, zero_stage)
from .errors import CosearchError
from .hardware import gpu as gpu_spec
from .hardware import peak_tflops
from .model import evaluate
from .model.columns import INPUT_COLUMNS, broadcast_columns
from .model.feasibility import check_scalar
from .model.flops import megatron_flops_per_iteration
from .model.profile import DEFAULT_PROFILE, Profile
from .presets import MOE_ARCH_FIELDS, preset, presets
from .scenario import parse_scenario, scenario_columns
from . import validation_moe

log = logging.getLogger(__name__)

#: The published-runs CSVs copied into the repository (experiments/data/validation/SOURCES.md); present in a
#: clone or an editable install, not in a wheel.
DATA_DIR = Path(__file__).resolve().parents[1] / "experiments" / "data" / "validation"
DEFAULT_PATH = DATA_DIR / "published_runs_public.csv"
MODERN_PATH = DATA_DIR / "published_runs_modern.csv"
#: Dense Llama runs of Megatron-Bridge's performance summary (B200, GB200, GB300, H100; fp8): held out,
#: never used to fit the profile (experiments/validate.py reports them apart).
BRIDGE_DENSE_PATH = DATA_DIR / "published_runs_bridge_dense.csv"
#: NeMo's long-sequence table (Llama 2 7B fp8 on H100, 4k-1M tokens, CP 1-32): held out the same way.
LONG_CONTEXT_PATH = DATA_DIR / "published_runs_long_context.csv"
#: torchtitan's published runs (PyTorch-native: FSDP2, torch.compile, torchao float8, async TP, CP, PP) on A100,
#: H100 and H200: held out the same way.
TORCHTITAN_PATH = DATA_DIR / "published_runs_torchtitan.csv"
#: MaxText (JAX/XLA) runs on H100: Llama 2 7B weak scaling on 1-16 GCP A3 High VMs and Llama 3 70B on 128 DGX Cloud
#: GPUs: held out the same way.
JAX_PATH = DATA_DIR / "published_runs_jax.csv"
#: NVIDIA dgxc-benchmarking recipes of late 2024 (NeMo 24.05/24.09 containers; Nemotron-4, Llama 3.1, GPT-3 on H100): held out.
DGXC_2024_PATH = DATA_DIR / "published_runs_dgxc_2024.csv"

#: Settings of the recipes some of the repository's runs ran, read from the recipe's public config where the run's
#: table leaves the cell blank (SOURCES.md, "Recipe settings"): keyed by table file and row id, filled into blank
#: cells only (a stated cell wins). Another table's row ids mean other runs, so only this directory's tables take them.
RECIPE_SETTINGS_PATH = DATA_DIR / "recipe_settings.csv"

#: Columns of a published-runs table: published_runs_modern.csv's header and the MoE table's extra cells. A table
#: that leaves some out (another source's export, a hand-made CSV) reads them as empty cells, so a row states
#: what it states and no missing column stops a validation.
PUBLISHED_COLUMNS = (
    "row_id", "source_id", "source", "source_location", "model", "params_b_as_reported", "n_layers", "hidden_size",
    "n_heads", "n_kv_heads", "ffn_hidden_size", "vocab_size", "seq_len", "global_batch_size", "micro_batch_size",
    "grad_accum_steps", "tp", "pp", "dp", "cp", "sequence_parallel", "vpp", "dp_sharding", "recompute", "precision",
    "framework", "gpu_type", "num_gpus", "iteration_time_s", "tflops_per_gpu", "mfu_pct", "hfu_pct",
    "pct_of_peak_reported", "tokens_per_s", "tokens_per_s_per_gpu", "aggregate_pflops", "other_metrics",
    "flops_convention", "confidence", "notes",
    "head_dim", "gpu", "gpu_hours_per_trillion_tokens", "model_flops_per_token", "experts", "top_k",
    "expert_ffn_hidden", "shared_experts", "shared_ffn_hidden", "dense_layers", "dense_ffn_hidden", "attention",
    "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "mtp_layers", "ep", "etp",
    "capacity_factor", "routing", "schedule",
)


def with_all_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every :data:`PUBLISHED_COLUMNS` column (missing ones empty) and a ``row_id`` on every row
    (its 1-based position where the table gives none)."""
    out = df.copy()
    for col in PUBLISHED_COLUMNS:
        if col not in out.columns:
            out[col] = np.nan
    ids = pd.to_numeric(out["row_id"], errors="coerce")
    out["row_id"] = ids.where(ids.notna(), pd.Series(np.arange(1, len(out) + 1), index=out.index)).astype(int)
    out["source_id"] = out["source_id"].astype(object).where(out["source_id"].notna(), "")
    return out


def _gpu_id(text: str) -> tuple[str, dict[str, float]]:
    """Catalog id and the cluster overrides a run's ``gpu_type`` text states (:func:`cosearch._cells.gpu_id`);
    ValueError naming the text for a GPU outside the catalog."""
    gid, over = gpu_id(text)
    if gid is None:
        raise ValueError(f"unknown gpu_type {text!r}: not in the GPU catalog")
    return gid, over


#: CSV columns of a MoE row and the preset fields they take when a table leaves them out.
_PRESET_CELLS = {"n_layers": "layers", "hidden_size": "hidden", "n_heads": "heads", "n_kv_heads": "kv_heads",
                 "ffn_hidden_size": "ffn_hidden", "vocab_size": "vocab",
                 **{k: k for k in MOE_ARCH_FIELDS}}


def _alnum(text: Any) -> str:
    return "".join(ch for ch in str(text).lower() if ch.isalnum())


def with_moe_preset(row: pd.Series) -> pd.Series:
    """A row naming a mixture-of-experts model the presets hold (Mixtral 8x7B, DeepSeek-V3, Qwen3-30B-A3B,
    GPT-OSS-120B, Llama 4 ...) but no ``experts`` column: its empty architecture cells filled from the
    preset's public config (cosearch/data/models.yaml), so it is predicted as the MoE model it is and not
    as a dense one. Rows that state their experts, and dense models, come back unchanged."""
    if _num(row.get("experts")) is not None:
        return row
    name = _alnum(row.get("model"))
    hits = [pid for pid, arch in presets().items() if (arch.get("experts") or 0) > 0 and _alnum(pid) in name]
    if not name or not hits:
        return row
    arch = preset(max(hits, key=len))
    out = row.astype(object).copy()
    for cell, key in _PRESET_CELLS.items():
        if key in arch and (cell not in out.index or (not isinstance(out[cell], str) and _num(out[cell]) is None)):
            out[cell] = arch[key]
    return out


def _convention(row: pd.Series) -> str:
    """A row's ``flops_convention`` lower-cased without whitespace, for matching formulas and phrases."""
    return "".join(str(row.get("flops_convention") or "").lower().split())


def measured_step_time_s(row: pd.Series) -> float | None:
    """Step time from the row: stated iteration time, else batch*seq/tokens_per_s, else teraFLOP/s per GPU
    through eq. 3 of Narayanan et al. where the row counts FLOPs that way (S1, or a ``flops_convention``
    citing F = 96*B*s*l*h^2*(...))."""
    row = with_moe_preset(row)
    if _num(row.get("experts")):  # issue 13: MoE rows (GPU-hours, FLOPs per token; cosearch.validation_moe)
        return validation_moe.measured_step_time(row)[0]
    if _num(row.iteration_time_s):
        return float(row.iteration_time_s)
    if _num(row.tokens_per_s) and _num(row.seq_len):
        return float(row.global_batch_size * row.seq_len / row.tokens_per_s)
    if _num(row.tokens_per_s_per_gpu) and _num(row.seq_len):
        return float(row.global_batch_size * row.seq_len / (row.tokens_per_s_per_gpu * row.num_gpus))
    megatron_formula = "96*b*s*l*h" in _convention(row)
    if _num(row.tflops_per_gpu) and (row.source_id == "S1" or megatron_formula):
        flops = megatron_flops_per_iteration(row.global_batch_size, row.seq_len, row.n_layers, row.hidden_size, row.vocab_size)
        return float(flops / (row.tflops_per_gpu * 1e12 * row.num_gpus))
    return None


#: Model families with a gated MLP (SwiGLU/GeGLU: three FFN matrices) and whether they tie the output layer to
#: the embedding, from their public configs (``hidden_act``/``tie_word_embeddings`` in config.json; Touvron et
#: al. 2023 and Dubey et al. 2024 for Llama, Parmar et al. 2024 for Nemotron-4's squared-ReLU MLP). Checked in
#: order, first match wins; unknown names take the GPT-3/MPT/BLOOM default (GeLU MLP, tied).
_FAMILIES: tuple[tuple[str, bool, bool], ...] = (
    ("nemotron-4", False, False), ("nemotron", False, False), ("gemma", True, True),
    ("llama", True, False), ("mistral", True, False), ("mixtral", True, False), ("qwen", True, False),
    ("deepseek", True, False), ("olmo", True, False), ("internlm", True, False), ("yi-", True, False),
    ("baichuan", True, False), ("phi-3", True, False), ("granite", True, False), ("dbrx", True, False),
    ("falcon", False, True), ("bloom", False, True), ("opt-", False, True), ("starcoder", False, True),
    ("pythia", False, False), ("gpt-neox", False, False),
)


def _architecture(name: str) -> tuple[bool, bool]:
    """(gated MLP, tied embeddings) of a published model family (:data:`_FAMILIES`); GPT-3/Megatron GPT,
    MPT and unknown names: GeLU MLP, tied."""
    n = name.lower()
    return next(((g, t) for key, g, t in _FAMILIES if key in n), (False, True))


def row_scenarios(row: pd.Series) -> list[dict[str, Any]] | None:
    """Candidate scenarios of one published run (one per unknown-knob setting), or None when the
    row lacks a field the model needs.

    Every field the CSV states is used as stated; knobs it leaves blank are tuned (the model's own
    best feasible choice, as the authors tuned theirs). Defaults of the software stack named in
    ``framework`` are facts of that stack, not per-row constants: Megatron-Core/NeMo recipes use the
    distributed optimizer (ZeRO-1 over data x context parallel ranks), sequence parallelism with
    tensor parallelism, and tensor-parallel communication overlap (userbuffers) on H100."""
    row = with_moe_preset(row)
    if _num(row.get("experts")):  # issue 13: MoE rows, same contract (cosearch.validation_moe)
        return validation_moe.moe_row_scenarios(row)
    needed = (row.n_layers, row.hidden_size, row.n_heads, row.vocab_size, row.seq_len, row.global_batch_size)
    if any(_num(x) is None for x in needed):
        return None
    gpu, overrides = _gpu_id(str(row.gpu_type))
    framework = str(row.framework).lower()
    era_megatron = row.source_id in {"S1", "S4", "S5"}
    megatron_core = megatron_core_stack(framework)
    sharding = str(row.dp_sharding).lower()
    zero = zero_stage(sharding, megatron_core)
    precision = precision_of(row.precision, gpu)
    gated, tied = _architecture(str(row.model))
    # unfused attention in Megatron-LM before 2023; llm-foundry's 2023 runs used the Triton flash-attention kernel (ALiBi)
    legacy = legacy_megatron(row.source_id, row.get("source"), framework)
    # GPT-3-style recipes (Megatron-LM, NeMo's GPT-3 configs) keep dropout 0.1; Llama, Nemotron and MPT train without
    dropout = era_megatron or "gpt" in str(row.model).lower() and "mpt" not in str(row.model).lower()
    # hybrid sharding: the stated group, else one node (PyTorch HSDP's usual intra-node shard group)
    group = (hybrid_shard_group(sharding) or overrides.get("gpus_per_node") or gpu_spec(gpu)["gpus_per_node"]
             if zero == 3 and any(k in sharding for k in ("hybrid", "hsdp")) else None)
    model = {
        "layers": int(row.n_layers), "hidden": int(row.hidden_size), "heads": int(row.n_heads),
        "kv_heads": int(_num(row.n_kv_heads) or row.n_heads),
        "ffn_hidden": int(_num(row.ffn_hidden_size) or 4 * row.hidden_size),
        "gated_mlp": gated, "tied_embeddings": tied,
        "vocab": int(row.vocab_size), "seq_len": int(row.seq_len),
    }
    cluster: dict[str, Any] = {"gpu": gpu, "gpus": int(row.num_gpus), **overrides}
    tp, pp = int(_num(row.tp) or 1), int(_num(row.pp) or 1)
    sp = _stated(row.sequence_parallel)
    sp = (megatron_core and tp > 1) if sp is None else sp
    mbs = [int(row.micro_batch_size)] if _num(row.micro_batch_size) else [1, 2, 4, 8]
    vpps = [int(row.vpp)] if _num(row.vpp) else ([1, 2, 3, 4, 6, 8] if pp > 1 else [1])
    cp = int(_num(row.cp) or 1)
    # a pipelined torchtitan row that states no split runs torchtitan's (micro-batches = stages), not a tuned one
    split = None
    if not _num(row.micro_batch_size):
        local_batch = int(row.global_batch_size) * tp * pp * cp // int(row.num_gpus)  # sequences per data-parallel rank
        split = pipeline_split_default(framework, pp, int(row.vpp) if _num(row.vpp) else None, local_batch)
    if split:
        vpps, mbs = [split[0]], [split[1]]
    zero = pipelined_zero(zero, pp, framework)
    stated_rc = row.recompute if isinstance(row.recompute, str) else None
    # unstated recompute is tuned like any unstated knob; Megatron-LM's 2019-2021 examples always checkpointed
    recomputes = ([_recompute(stated_rc, row.source_id)] if stated_rc or row.source_id in {"S4", "S5"}
                  else ["none", "selective", "full"])
    async_tp = names_async_tp(framework)
    passes = tp_overlap_passes(framework)
    out = []
    for mb, v, rc in itertools.product(mbs, vpps, recomputes):
        out.append({
            "model": model,
            "training": {"global_batch": int(row.global_batch_size), "precision": precision, "dropout": dropout,
                         **stack_training_facts(sharding, framework, legacy)},
            "cluster": cluster,
            "plan": {"tp": tp, "pp": pp, "cp": cp, "microbatch": mb, "interleave": v,
                     "recompute": rc, "sequence_parallel": bool(sp), "zero": zero,
                     # torchtitan's async TP overlaps too, in the forward pass only (_cells.tp_overlap_passes)
                     "tp_comm_overlap": bool(tp > 1 and ((megatron_core and gpu.startswith("h100")) or async_tp)),
                     **({"tp_overlap_passes": passes} if tp > 1 and async_tp and passes != "all" else {}),
                     # Megatron-LM before 2023 all-reduced gradients after the backward pass (overlap_grad_reduce
                     # came with Megatron-Core's DDP)
                     "overlap_grad_reduce": not (legacy and zero == 0 and "deepspeed" not in framework),
                     # DeepSpeed's documented default stage3_max_live_parameters (deepspeed.ai config-json)
                     **({"zero3_live_params": 1e9} if "deepspeed" in sharding else {}),
                     **stack_plan_facts(sharding, framework, zero),
                     **({"fp8_param_gather": True} if fp8_param_gather_of(row.precision, zero, row.get("fp8_params")) else {}),
                     **({"zero_group": group} if group else {})},
        })
    return out


def stack_columns(cols_list: list[dict[str, float]]) -> dict[str, np.ndarray]:
    """Per-scenario column dicts stacked into arrays; a column only some scenarios set (an optional
    knob) takes the model's default elsewhere."""
    keys = dict.fromkeys(k for c in cols_list for k in c)
    return {k: np.array([c.get(k, INPUT_COLUMNS.get(k)) for c in cols_list], dtype=float) for k in keys}


@dataclass
class Candidates:
    """Every candidate scenario of every usable row, stacked as model columns."""

    rows: pd.DataFrame          # one line per usable published run, with ``measured_step_s``
    columns: dict[str, np.ndarray]
    row_of: np.ndarray          # candidate -> position in ``rows``
    scenarios: list[dict[str, Any]]
    skipped: list[dict[str, Any]] = field(default_factory=list)  # rows left out: {"row_id", "reason"}


def stated_model_tflops_per_gpu(row: pd.Series, gpu: str, precision: str) -> float | None:
    """Model TFLOP/s per GPU a row states without a step time or a throughput: ``tflops_per_gpu``, else
    ``aggregate_pflops`` over the GPUs, else ``mfu_pct`` of the GPU's dense peak at the run's precision (the
    catalog's, the denominator MFU tables use). A FLOP rate whose ``flops_convention`` counts hardware FLOPs
    (recompute included, HFU) is not taken: a model-FLOPs count cannot turn it into time."""
    convention = _convention(row)
    hardware = any(k in convention for k in ("includesrecompute", "hfu-like", "hardwareflop"))
    gpus = _num(row.get("num_gpus"))
    if not hardware and (tflops := _num(row.get("tflops_per_gpu"))) is not None:
        return tflops
    if not hardware and (agg := _num(row.get("aggregate_pflops"))) is not None and gpus:
        return agg * 1e3 / gpus
    if (mfu := _num(row.get("mfu_pct"))) is not None:  # model FLOPs by definition
        return mfu / 100.0 * peak_tflops(gpu, precision)
    return None


def _step_from_model_flops(row: pd.Series, cands: list[dict[str, Any]]) -> tuple[float | None, str]:
    """Step time of a row that states only a FLOP rate (:func:`stated_model_tflops_per_gpu`): the model's own
    count of model FLOPs per step (Megatron-Core's convention: 6N plus 4*s*h attention per layer and token,
    logits, no recompute; MoE: active experts) over the stated rate. Differs from a source that counts
    otherwise (causal halving, embeddings) by up to ~10 % at long context, so it is the last resort."""
    sc = cands[0]
    tflops = stated_model_tflops_per_gpu(row, sc["cluster"]["gpu"], sc["training"]["precision"])
    if not tflops or tflops <= 0:
        return None, "no stated step time, throughput or FLOP rate to derive one from"
    cols = scenario_columns(parse_scenario(sc))
    if causal_flops_count(row.get("flops_convention"), row.get("source"), row.get("framework")):
        # attention FLOPs grow with s at a fixed token count: half the sequence, twice the batch halves them
        cols = dict(cols, seq_len=cols["seq_len"] / 2.0, global_batch=cols["global_batch"] * 2.0)
    out = evaluate(broadcast_columns(cols))
    gpus = float(sc["cluster"]["gpus"])
    model_flops = float(np.ravel(out["model_tflops_per_gpu"])[0]) * 1e12 * float(np.ravel(out["step_time_s"])[0]) * gpus
    return model_flops / (tflops * 1e12 * gpus), "model FLOPs count over the stated FLOP rate"


def _read_row(row: pd.Series) -> tuple[float, list[dict[str, Any]], str] | str:
    """(measured step time, candidate scenarios, what the time came from) of a row, or why it cannot be
    predicted (no measured step time, a GPU outside the catalog, a missing architecture field)."""
    try:
        measured = measured_step_time_s(row)
        cands = row_scenarios(row)
        if cands is None:
            return "a field the model needs is empty (layers, hidden, heads, vocab, seq_len, batch or GPUs)"
        source = "stated time or throughput"
        if not measured:
            measured, source = _step_from_model_flops(row, cands)
            if not measured:
                return source
    except (ValueError, TypeError, KeyError, CosearchError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return measured, cands, source


def build_candidates(df: pd.DataFrame) -> Candidates:
    """Turn published runs into stacked candidate columns. A row the model cannot take (no measured
    time, a GPU outside the catalog, no valid plan) is left out with its reason in ``skipped``,
    never an exception: one odd row does not stop a validation."""
    keep_rows, cols_list, row_of, scenarios, skipped = [], [], [], [], []
    for _, row in with_all_columns(df).iterrows():
        read = _read_row(row)
        if isinstance(read, str):
            skipped.append({"row_id": row.get("row_id"), "reason": read})
            continue
        measured, cands, measured_from = read
        pos = len(keep_rows)
        added, last_error = False, "no candidate plan is valid"
        for cand in cands:
            try:
                cols = scenario_columns(parse_scenario(cand))
                check_scalar(broadcast_columns(cols))
            except CosearchError as exc:  # e.g. interleave that does not divide the layers
                last_error = str(exc).splitlines()[0]
                continue
            cols_list.append(cols)
            row_of.append(pos)
            scenarios.append(cand)
            added = True
        if added:
            keep_rows.append(dict(row.to_dict(), measured_step_s=measured, measured_from=measured_from))
        else:
            skipped.append({"row_id": row.get("row_id"), "reason": last_error})
    for s in skipped:
        log.info("published run %s left out: %s", s["row_id"], s["reason"])
    columns = stack_columns(cols_list)
    return Candidates(pd.DataFrame(keep_rows), columns, np.array(row_of), scenarios, skipped)


def _choose(cands: Candidates, out: dict[str, np.ndarray]) -> np.ndarray:
    """Index of each row's chosen candidate: the fastest that fits, else the fastest."""
    t = out["step_time_s"]
    key = np.where(out["fits"], t, t + 1e9)  # prefer fitting candidates
    order = np.lexsort((key, cands.row_of))
    first = np.ones(len(order), dtype=bool)
    first[1:] = cands.row_of[order][1:] != cands.row_of[order][:-1]
    return order[first]


def predict(cands: Candidates, profile: Profile = DEFAULT_PROFILE) -> tuple[np.ndarray, np.ndarray]:
    """Predicted step time per row (the fastest candidate that fits, else the fastest) and the
    index of the chosen candidate."""
    out = evaluate(cands.columns, profile)
    chosen = _choose(cands, out)
    return out["step_time_s"][chosen], chosen


def load_published_runs(*paths: str | Path) -> pd.DataFrame:
    """The published runs of one or more CSVs (default: the public and the modern set), stacked; the repository's
    own tables with their recipes' stated settings (:func:`with_recipe_settings`)."""
    return pd.concat([with_recipe_settings(pd.read_csv(p), p) for p in (paths or (DEFAULT_PATH, MODERN_PATH))],
                     ignore_index=True)


@functools.lru_cache(maxsize=1)
def _recipe_settings() -> pd.DataFrame:
    """:data:`RECIPE_SETTINGS_PATH` as text cells, read once per process (a validation loads a dozen tables)."""
    return pd.read_csv(RECIPE_SETTINGS_PATH, dtype=str)


def with_recipe_settings(runs: pd.DataFrame, path: str | Path) -> pd.DataFrame:
    """``runs`` (read from ``path``) with the blank cells :data:`RECIPE_SETTINGS_PATH` fills for that table's rows.
    A setting never replaces a stated cell: where the table states one, the table's value stays and the
    disagreement is logged. Tables outside the repository's data directory are returned as read."""
    path = Path(path).resolve()
    if path.parent != DATA_DIR.resolve() or not RECIPE_SETTINGS_PATH.exists():
        return runs
    settings = _recipe_settings()
    settings = settings[settings["table"] == path.name]
    if settings.empty:
        return runs
    runs = runs.copy()
    for s in settings.itertuples(index=False):
        at = runs.index[runs["row_id"] == int(s.row_id)]
        if s.column not in runs.columns:
            runs[s.column] = pd.Series(np.nan, index=runs.index, dtype=object)
        elif runs[s.column].dtype != object:
            runs[s.column] = runs[s.column].astype(object)
        for i in at:
            stated = runs.at[i, s.column]
            if pd.notna(stated) and str(stated).strip():
                if str(stated) != s.value:
                    log.warning("%s row %s: the table states %s = %r; the recipe setting %r is not applied",
                                path.name, s.row_id, s.column, stated, s.value)
                continue
            runs.at[i, s.column] = s.value
    return runs


def stated_peak_memory_gib(runs: pd.DataFrame) -> pd.Series:
    """The peak memory per GPU each run's source states ("peak memory X GiB" in ``other_metrics``; torchtitan's
    tables log PyTorch's max reserved), indexed by ``row_id``; NaN where a row states none."""
    if "other_metrics" not in runs:
        return pd.Series(np.nan, index=runs["row_id"], dtype=float)
    stated = runs["other_metrics"].astype(str).str.extract(r"peak memory ([\d.]+) GiB")[0].astype(float)
    return pd.Series(stated.to_numpy(), index=runs["row_id"])


def validation_table(cands: Candidates, profile: Profile = DEFAULT_PROFILE) -> pd.DataFrame:
    """Measured vs predicted step time per row, with the plan the prediction used and its memory."""
    out = evaluate(cands.columns, profile)
    chosen = _choose(cands, out)
    recs = []
    for row, ci in zip(cands.rows.itertuples(index=False), chosen):
        sc = cands.scenarios[ci]
        pred = float(out["step_time_s"][ci])
        recs.append({
            "row_id": int(row.row_id), "source_id": row.source_id, "model": row.model, "gpu": sc["cluster"]["gpu"],
            "gpus": int(row.num_gpus), "precision": sc["training"]["precision"], "tp": sc["plan"]["tp"],
            "pp": sc["plan"]["pp"], "cp": sc["plan"]["cp"], "microbatch": sc["plan"]["microbatch"],
            "interleave": sc["plan"]["interleave"], "recompute": sc["plan"]["recompute"], "zero": sc["plan"]["zero"],
            "seq_len": int(row.seq_len), "measured_step_s": row.measured_step_s, "predicted_step_s": pred,
            "error": pred / row.measured_step_s - 1.0, "fits": bool(out["fits"][ci]),
            "memory_gib": float(out["memory_gib"][ci]), "measured_from": row.measured_from,
        })
    return pd.DataFrame(recs)
