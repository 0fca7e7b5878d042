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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ._cells import _num, _recompute, _stated, prefetching_fsdp  # noqa: F401 - re-exported
from .errors import CosearchError
from .model import evaluate
from .model.columns import INPUT_COLUMNS, broadcast_columns
from .model.feasibility import check_scalar
from .model.flops import megatron_flops_per_iteration
from .model.profile import DEFAULT_PROFILE, Profile
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
    """Catalog id and the cluster overrides a run's ``gpu_type`` text states (network, DGX-2 size)."""
    t = text.lower()
    over: dict[str, float] = {}
    if "1600 gbps" in t:
        over["network_gbps"] = 200.0  # 1600 Gb/s per 8-GPU node
    if "dgx-2" in t:
        over.update(gpus_per_node=16, nvlink_domain=16)  # DGX-2: 16 V100 on NVSwitch
    if "v100" in t:
        return "v100-32gb", over
    for gid in ("gb300", "gb200", "b200", "h800"):  # before "h100"/"b200" substrings of longer names
        if gid in t:
            return gid, over
    if "h100" in t:
        return "h100-sxm", over
    if "a100" in t and "80gb" in t:
        if "selene" in t or "dgx a100" in t:
            over["network_gbps"] = 200.0  # DGX A100: 8x 200 Gb/s HDR per node
        return "a100-80gb", over
    if "a100" in t:
        return "a100-40gb", over
    raise ValueError(f"unknown gpu_type {text!r}")


def measured_step_time_s(row: pd.Series) -> float | None:
    """Step time from the row: stated iteration time, else batch*seq/tokens_per_s, else S1's
    teraFLOP/s per GPU through eq. 3 of Narayanan et al."""
    if _num(row.get("experts")):  # issue 13: MoE rows (GPU-hours, FLOPs per token; cosearch.validation_moe)
        return validation_moe.measured_step_time(row)[0]
    if _num(row.iteration_time_s):
        return float(row.iteration_time_s)
    if _num(row.tokens_per_s) and _num(row.seq_len):
        return float(row.global_batch_size * row.seq_len / row.tokens_per_s)
    if _num(row.tokens_per_s_per_gpu) and _num(row.seq_len):
        return float(row.global_batch_size * row.seq_len / (row.tokens_per_s_per_gpu * row.num_gpus))
    if _num(row.tflops_per_gpu) and row.source_id == "S1":
        flops = megatron_flops_per_iteration(row.global_batch_size, row.seq_len, row.n_layers, row.hidden_size, row.vocab_size)
        return float(flops / (row.tflops_per_gpu * 1e12 * row.num_gpus))
    return None


def _architecture(name: str) -> tuple[bool, bool]:
    """(gated MLP, tied embeddings) of a published model family, from its public configs: Llama 1-3
    use SwiGLU and an untied output layer (Touvron et al. 2023; Dubey et al. 2024); Nemotron-4 a
    squared-ReLU MLP and untied embeddings (Parmar et al. 2024); GPT-3/Megatron GPT and MPT tie them."""
    n = name.lower()
    if "llama" in n:
        return True, False
    if "nemotron" in n:
        return False, False
    return False, True


def row_scenarios(row: pd.Series) -> list[dict[str, Any]] | None:
    """Candidate scenarios of one published run (one per unknown-knob setting), or None when the
    row lacks a field the model needs.

    Every field the CSV states is used as stated; knobs it leaves blank are tuned (the model's own
    best feasible choice, as the authors tuned theirs). Defaults of the software stack named in
    ``framework`` are facts of that stack, not per-row constants: Megatron-Core/NeMo recipes use the
    distributed optimizer (ZeRO-1 over data x context parallel ranks), sequence parallelism with
    tensor parallelism, and tensor-parallel communication overlap (userbuffers) on H100."""
    if _num(row.get("experts")):  # issue 13: MoE rows, same contract (cosearch.validation_moe)
        return validation_moe.moe_row_scenarios(row)
    needed = (row.n_layers, row.hidden_size, row.n_heads, row.vocab_size, row.seq_len, row.global_batch_size)
    if any(_num(x) is None for x in needed):
        return None
    gpu, overrides = _gpu_id(str(row.gpu_type))
    era_megatron = row.source_id in {"S1", "S4", "S5"}
    framework = str(row.framework).lower()
    megatron_core = "nemo" in framework or "megatron-core" in framework
    sharding = str(row.dp_sharding).lower()
    zero = 3 if ("zero-3" in sharding or "full_shard" in sharding or "fsdp" in sharding) else (1 if megatron_core else 0)
    precision = "fp8" if str(row.precision).lower().startswith("fp8") else ("fp16" if gpu.startswith("v100") else "bf16")
    gated, tied = _architecture(str(row.model))
    # unfused attention before 2022; llm-foundry's 2023 runs used the Triton flash-attention kernel (ALiBi)
    attention = "standard" if era_megatron else ("triton" if "triton" in framework else "flash")
    # GPT-3-style recipes (Megatron-LM, NeMo's GPT-3 configs) keep dropout 0.1; Llama, Nemotron and MPT train without
    dropout = era_megatron or "gpt" in str(row.model).lower() and "mpt" not in str(row.model).lower()
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
    recomputes = [_recompute(stated_rc, row.source_id)] if stated_rc or not megatron_core else ["none", "selective", "full"]
    out = []
    for mb, v, rc in itertools.product(mbs, vpps, recomputes):
        out.append({
            "model": model,
            "training": {"global_batch": int(row.global_batch_size), "precision": precision,
                         "attention": attention, "dropout": dropout},
            "cluster": cluster,
            "plan": {"tp": tp, "pp": pp, "cp": int(_num(row.cp) or 1), "microbatch": mb, "interleave": v,
                     "recompute": rc, "sequence_parallel": bool(sp), "zero": zero,
                     "tp_comm_overlap": bool(megatron_core and tp > 1 and gpu.startswith("h100")),
                     # Megatron-LM before 2022 all-reduced gradients after the backward pass
                     "overlap_grad_reduce": not (era_megatron and zero == 0),
                     # DeepSpeed's documented default stage3_max_live_parameters (deepspeed.ai config-json)
                     **({"zero3_live_params": 1e9} if "deepspeed" in sharding else {}),
                     **({"fsdp_overlap": 1.0} if prefetching_fsdp(sharding, framework) else {})},
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


def build_candidates(df: pd.DataFrame) -> Candidates:
    """Turn published runs into stacked candidate columns (rows without enough fields are skipped)."""
    keep_rows, cols_list, row_of, scenarios = [], [], [], []
    for _, row in df.iterrows():
        measured = measured_step_time_s(row)
        cands = row_scenarios(row) if measured else None
        if not cands:
            continue
        pos = len(keep_rows)
        added = False
        for cand in cands:
            sc = parse_scenario(cand)
            cols = scenario_columns(sc)
            try:
                check_scalar(broadcast_columns(cols))
            except CosearchError:
                continue  # e.g. interleave that does not divide the layers
            cols_list.append(cols)
            row_of.append(pos)
            scenarios.append(cand)
            added = True
        if added:
            keep_rows.append(dict(row.to_dict(), measured_step_s=measured))
    columns = stack_columns(cols_list)
    return Candidates(pd.DataFrame(keep_rows), columns, np.array(row_of), scenarios)


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
