"""Shared helpers of the co-design studies: enumerate cluster configurations x parallel plans with
numpy and keep, per configuration, the fastest feasible plan (one vectorized model call per chunk)."""
from __future__ import annotations

import sys
from itertools import product
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
sys.path.insert(0, str(HERE.parent))

from cosearch.hardware import catalog  # noqa: E402
from cosearch.model import evaluate  # noqa: E402
from cosearch.presets import ARCH_FIELDS, preset  # noqa: E402
from cosearch.scenario import HARDWARE_OVERRIDES  # noqa: E402


def model_columns(name: str) -> dict[str, float]:
    arch = preset(name)
    defaults = {"kv_heads": arch["heads"], "ffn_hidden": 4 * arch["hidden"], "gated_mlp": 0, "tied_embeddings": 1}
    return {k: float(arch.get(k, defaults.get(k))) for k in ARCH_FIELDS}


def gpu_columns(gpu: str, precision: str = "bf16") -> dict[str, float]:
    entry = catalog()[gpu]
    cols = {k: float(entry[k]) for k in HARDWARE_OVERRIDES}
    cols["matmul_efficiency"] = float(entry["matmul_efficiency"])
    cols["matmul_efficiency_fp8"] = float(entry["matmul_efficiency_fp8"])
    cols["peak_tflops"] = float(entry["peak_tflops"][precision])
    return cols


def grid(choices: Mapping[str, Sequence[float]]) -> dict[str, np.ndarray]:
    """Cartesian product of the choices, one flat float array per key."""
    keys = list(choices)
    rows = np.array(list(product(*(choices[k] for k in keys))), dtype=float).reshape(-1, len(keys))
    return {k: rows[:, i] for i, k in enumerate(keys)}


def best_plans(configs: Mapping[str, np.ndarray], plans: Mapping[str, np.ndarray], fixed: Mapping[str, float],
               metric: str = "step_time_s", chunk_rows: int = 400_000,
               keep: Sequence[str] = ()) -> dict[str, np.ndarray]:
    """For each configuration (row of ``configs``), the plan (row of ``plans``) minimizing ``metric``
    among feasible ones. Returns the metric, the plan's knobs and the ``keep`` outputs per
    configuration (NaN / -1 where nothing is feasible). ``gpus`` and ``dp`` may come from either side.
    """
    n_cfg = len(next(iter(configs.values())))
    n_plan = len(next(iter(plans.values())))
    per = max(1, chunk_rows // n_plan)
    best = np.full(n_cfg, np.inf)
    arg = np.full(n_cfg, -1)
    kept = {k: np.full(n_cfg, np.nan) for k in keep}
    for start in range(0, n_cfg, per):
        stop = min(start + per, n_cfg)
        k = stop - start
        cols = dict(fixed)
        for key, v in configs.items():
            cols[key] = np.repeat(v[start:stop], n_plan)
        for key, v in plans.items():
            cols[key] = np.tile(v, k)
        if "dp" not in cols:
            cols["dp"] = cols["gpus"] / (cols["tp"] * cols["pp"] * cols.get("cp", 1.0))
        out = evaluate(cols)
        val = np.where(out["feasible"] & np.isfinite(out[metric]), out[metric], np.inf).reshape(k, n_plan)
        j = np.argmin(val, axis=1)
        v = val[np.arange(k), j]
        best[start:stop] = v
        arg[start:stop] = np.where(np.isfinite(v), j, -1)
        flat = np.arange(k) * n_plan + j
        for key in keep:
            kept[key][start:stop] = np.where(np.isfinite(v), np.broadcast_to(out[key], (k * n_plan,))[flat], np.nan)
    res = {metric: np.where(np.isfinite(best), best, np.nan), "plan_index": arg}
    for key, v in plans.items():
        res[key] = np.where(arg >= 0, v[np.maximum(arg, 0)], np.nan)
    res.update(kept)
    return res


def plan_label(row: Mapping[str, float], codes: Mapping[str, Mapping[str, int]] | None = None) -> str:
    """Short text of a plan row, e.g. 'tp8 pp16 mb1 v2 rc=full z1 off=optimizer'."""
    if not np.isfinite(row.get("tp", np.nan)):
        return "none feasible"
    rc = {0: "none", 1: "sel", 2: "full"}[int(row.get("recompute", 0))]
    text = f"tp{int(row['tp'])} pp{int(row['pp'])} mb{int(row.get('microbatch', 1))} v{int(row.get('interleave', 1))} rc={rc} z{int(row.get('zero', 0))}"
    for key, table in (codes or {}).items():
        if key in row:
            name = {v: w for w, v in table.items()}[int(row[key])]
            text += f" {key}={name}"
    return text
