"""Published training runs as scenarios: the ground truth the model is checked and calibrated against.

Reads ``shared/validation/published_runs_public.csv`` (see its SOURCES.md) and turns each row that
states enough into a scenario plus the measured step time. Knobs a source does not state are not
guessed per row: micro-batch size and interleaving, when missing, are set to the model's own best
feasible choice (the authors tuned them), and facts of the software era are applied by source
(flash attention did not exist before 2022; Megatron-LM examples of 2019-2021 always checkpointed
activations; sequence parallelism arrived in 2022).
"""
from __future__ import annotations

import itertools
import logging
import math
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd

from .model import evaluate
from .model.flops import megatron_flops_per_iteration
from .model.profile import DEFAULT_PROFILE, Profile
from .scenario import parse_scenario, scenario_columns

log = logging.getLogger(__name__)

DEFAULT_PATH = Path(__file__).resolve().parents[1].parent / "shared" / "validation" / "published_runs_public.csv"

#: gpu_type text -> catalog id, and the scale-out network per GPU (Gbit/s) the source states.
def _gpu_id(text: str) -> tuple[str, float | None]:
    t = text.lower()
    net = 200.0 if "1600 gbps" in t else None
    if "v100" in t:
        return "v100-32gb", None
    if "h100" in t:
        return "h100-sxm", net
    if "a100" in t and "80gb" in t:
        return "a100-80gb", (200.0 if "selene" in t or "dgx a100" in t else net)
    if "a100" in t:
        return "a100-40gb", net
    raise ValueError(f"unknown gpu_type {text!r}")


def _recompute(text: Any, source: str) -> str:
    if isinstance(text, str):
        t = text.lower()
        if t.startswith("full"):
            return "full"
        if "selective" in t:
            return "selective"
        if t.startswith("none"):
            return "none"
    return "full" if source in {"S4", "S5"} else "none"  # Megatron-LM 2019-2021 example scripts checkpoint


def _num(x: Any) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def measured_step_time_s(row: pd.Series) -> float | None:
    """Step time from the row: stated iteration time, else batch*seq/tokens_per_s, else S1's
    teraFLOP/s per GPU through eq. 3 of Narayanan et al."""
    if _num(row.iteration_time_s):
        return float(row.iteration_time_s)
    if _num(row.tokens_per_s) and _num(row.seq_len):
        return float(row.global_batch_size * row.seq_len / row.tokens_per_s)
    if _num(row.tflops_per_gpu) and row.source_id == "S1":
        flops = megatron_flops_per_iteration(row.global_batch_size, row.seq_len, row.n_layers, row.hidden_size, row.vocab_size)
        return float(flops / (row.tflops_per_gpu * 1e12 * row.num_gpus))
    return None


def row_scenarios(row: pd.Series) -> list[dict[str, Any]] | None:
    """Candidate scenarios of one published run (one per unknown-knob setting), or None when the
    row lacks a field the model needs."""
    needed = (row.n_layers, row.hidden_size, row.n_heads, row.vocab_size, row.seq_len, row.global_batch_size)
    if any(_num(x) is None for x in needed):
        return None
    gpu, net = _gpu_id(str(row.gpu_type))
    era_megatron = row.source_id in {"S1", "S4", "S5"}
    sharding = str(row.dp_sharding).lower()
    zero = 3 if ("zero-3" in sharding or "full_shard" in sharding or "fsdp" in sharding) else 0
    precision = "fp16" if gpu.startswith("v100") else "bf16"
    model = {
        "layers": int(row.n_layers), "hidden": int(row.hidden_size), "heads": int(row.n_heads),
        "kv_heads": int(_num(row.n_kv_heads) or row.n_heads),
        "ffn_hidden": int(_num(row.ffn_hidden_size) or 4 * row.hidden_size),
        "vocab": int(row.vocab_size), "seq_len": int(row.seq_len),
    }
    cluster: dict[str, Any] = {"gpu": gpu, "gpus": int(row.num_gpus)}
    if net:
        cluster["network_gbps"] = net
    tp, pp = int(_num(row.tp) or 1), int(_num(row.pp) or 1)
    mbs = [int(row.micro_batch_size)] if _num(row.micro_batch_size) else [1, 2, 4, 8]
    vpps = [int(row.vpp)] if _num(row.vpp) else ([1, 2, 3, 4, 6, 8] if pp > 1 else [1])
    out = []
    for mb, v in itertools.product(mbs, vpps):
        out.append({
            "model": model,
            "training": {"global_batch": int(row.global_batch_size), "precision": precision,
                         "attention": "standard" if era_megatron else "flash"},
            "cluster": cluster,
            "plan": {"tp": tp, "pp": pp, "cp": int(_num(row.cp) or 1), "microbatch": mb, "interleave": v,
                     "recompute": _recompute(row.recompute, row.source_id),
                     "sequence_parallel": bool(_num(row.sequence_parallel) or False), "zero": zero},
        })
    return out


def predict_row(row: pd.Series, profile: Profile = DEFAULT_PROFILE) -> tuple[float, dict[str, Any]] | None:
    """Predicted step time of a published run and the scenario it was predicted for."""
    cands = row_scenarios(row)
    if not cands:
        return None
    cols_list = []
    keep = []
    for cand in cands:
        try:
            sc = parse_scenario(cand)
            cols = scenario_columns(sc)
        except Exception:  # candidate breaks a rule (e.g. interleave not dividing layers)
            continue
        cols_list.append(cols)
        keep.append(cand)
    if not cols_list:
        return None
    batch = {k: np.array([c[k] for c in cols_list]) for k in cols_list[0]}
    out = evaluate(batch, profile)
    t = np.where(out["valid"], out["step_time_s"], np.inf)
    fit_t = np.where(out["fits"], t, np.inf)
    choice = int(np.argmin(fit_t)) if np.isfinite(fit_t).any() else int(np.argmin(t))
    if not np.isfinite(t[choice]):
        return None
    return float(t[choice]), keep[choice]


def load_published_runs(path: str | Path = DEFAULT_PATH) -> pd.DataFrame:
    return pd.read_csv(path)


def iter_validation(df: pd.DataFrame, profile: Profile = DEFAULT_PROFILE) -> Iterator[dict[str, Any]]:
    """Rows with a measured and a predicted step time."""
    for _, row in df.iterrows():
        measured = measured_step_time_s(row)
        if measured is None:
            continue
        pred = predict_row(row, profile)
        if pred is None:
            continue
        t, sc = pred
        yield {
            "row_id": int(row.row_id), "source_id": row.source_id, "model": row.model, "gpu": sc["cluster"]["gpu"],
            "gpus": int(row.num_gpus), "tp": sc["plan"]["tp"], "pp": sc["plan"]["pp"],
            "microbatch": sc["plan"]["microbatch"], "interleave": sc["plan"]["interleave"],
            "recompute": sc["plan"]["recompute"], "zero": sc["plan"]["zero"], "seq_len": int(row.seq_len),
            "measured_step_s": measured, "predicted_step_s": t, "error": t / measured - 1.0,
            "scenario": sc,
        }
