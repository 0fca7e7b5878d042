"""Published training runs as scenarios: the ground truth the model is checked and calibrated against.

Reads ``experiments/data/validation/published_runs_*.csv`` (see its SOURCES.md) and turns each row that
states enough into a scenario plus the measured step time. Knobs a source does not state are not
guessed per row: micro-batch size and interleaving, when missing, are set to the model's own best
feasible choice (the authors tuned them), and facts of the software era are applied by source
(flash attention did not exist before 2022; Megatron-LM examples of 2019-2021 always checkpointed
activations; sequence parallelism arrived in 2022).
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._cells import (_num, _recompute, _stated, gpu_id, hybrid_shard_group, legacy_megatron,  # noqa: F401
                     megatron_core_stack, precision_of, prefetching_fsdp, zero_stage)
from .errors import CosearchError
from .hardware import gpu as gpu_spec
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
    megatron_formula = "96*b*s*l*h" in "".join(str(row.get("flops_convention")).lower().split())
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
    attention = "standard" if legacy else ("triton" if "triton" in framework else "flash")
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
    stated_rc = row.recompute if isinstance(row.recompute, str) else None
    # unstated recompute is tuned like any unstated knob; Megatron-LM's 2019-2021 examples always checkpointed
    recomputes = ([_recompute(stated_rc, row.source_id)] if stated_rc or row.source_id in {"S4", "S5"}
                  else ["none", "selective", "full"])
    out = []
    for mb, v, rc in itertools.product(mbs, vpps, recomputes):
        out.append({
            "model": model,
            "training": {"global_batch": int(row.global_batch_size), "precision": precision,
                         "attention": attention, "dropout": dropout},
            "cluster": cluster,
            "plan": {"tp": tp, "pp": pp, "cp": int(_num(row.cp) or 1), "microbatch": mb, "interleave": v,
                     "recompute": rc, "sequence_parallel": bool(sp), "zero": zero,
                     # torchtitan's async TP (``--parallelism.enable_async_tensor_parallel``) overlaps the same way
                     "tp_comm_overlap": bool(tp > 1 and ((megatron_core and gpu.startswith("h100"))
                                                         or "async tp" in framework or "async_tp" in framework
                                                         or "async-tp" in framework)),
                     # Megatron-LM before 2023 all-reduced gradients after the backward pass (overlap_grad_reduce
                     # came with Megatron-Core's DDP)
                     "overlap_grad_reduce": not (legacy and zero == 0 and "deepspeed" not in framework),
                     # DeepSpeed's documented default stage3_max_live_parameters (deepspeed.ai config-json)
                     **({"zero3_live_params": 1e9} if "deepspeed" in sharding else {}),
                     **({"fsdp_overlap": 1.0} if zero == 3 and prefetching_fsdp(sharding, framework) else {}),
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


def _read_row(row: pd.Series) -> tuple[float, list[dict[str, Any]]] | str:
    """(measured step time, candidate scenarios) of a row, or why it cannot be predicted (no measured step
    time, a GPU outside the catalog, a missing architecture field)."""
    try:
        measured = measured_step_time_s(row)
        if not measured:
            return "no stated step time, throughput or FLOP rate to derive one from"
        cands = row_scenarios(row)
        if cands is None:
            return "a field the model needs is empty (layers, hidden, heads, vocab, seq_len, batch or GPUs)"
    except (ValueError, TypeError, KeyError, CosearchError) as exc:
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return measured, cands


def build_candidates(df: pd.DataFrame) -> Candidates:
    """Turn published runs into stacked candidate columns. A row the model cannot take (no measured
    time, a GPU outside the catalog, no valid plan) is left out with its reason in ``skipped``,
    never an exception: one odd row does not stop a validation."""
    keep_rows, cols_list, row_of, scenarios, skipped = [], [], [], [], []
    for _, row in df.iterrows():
        read = _read_row(row)
        if isinstance(read, str):
            skipped.append({"row_id": row.get("row_id"), "reason": read})
            continue
        measured, cands = read
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
            keep_rows.append(dict(row.to_dict(), measured_step_s=measured))
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
    """The published runs of one or more CSVs (default: the public and the modern set), stacked."""
    return pd.concat([pd.read_csv(p) for p in (paths or (DEFAULT_PATH, MODERN_PATH))], ignore_index=True)


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
            "memory_gib": float(out["memory_gib"][ci]),
        })
    return pd.DataFrame(recs)
