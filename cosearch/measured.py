"""Measured step times from a CSV, as :class:`~cosearch.validation.Candidates` for calibration.

Two formats, told apart by their columns:

* **User format** (one row = one scenario that was run; ``measured_step_time_s`` required). Columns
  are scenario fields by their plain names: ``model`` (a preset name) or the architecture fields
  (``layers, hidden, heads, kv_heads, ffn_hidden, gated_mlp, vocab, seq_len, tied_embeddings``;
  with a preset, any of them overrides it, e.g. ``seq_len``); training fields (``global_batch``,
  ``precision``, ``attention``); cluster fields (``gpu``, ``gpus`` and the hardware overrides
  ``gpus_per_node, nvlink_domain, hbm_gib, hbm_tbps, nvlink_gbps, network_gbps, power_w``); plan
  fields (``tp, pp, dp, cp, microbatch, interleave, recompute, sequence_parallel, zero, zero_group,
  overlap_grad_reduce``). Empty cells take the scenario defaults. ``name``, ``source``, ``notes``
  and ``id`` are carried along. Every other column is an error.
* **Published-runs format** of ``experiments/data/validation/published_runs_public.csv`` (``source_id``,
  ``gpu_type``, ``n_layers``, ``hidden_size`` ... ): rows are turned into candidate scenarios by
  :func:`cosearch.validation.build_candidates` (unknown knobs tuned as the authors did).
"""
from __future__ import annotations


import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import _files
from .errors import CosearchError
from .model.columns import broadcast_columns
from .model.feasibility import check_scalar, valid_mask
from .presets import ARCH_FIELDS
from .scenario import HARDWARE_OVERRIDES, PlanSpec, parse_scenario, scenario_columns
from .validation import Candidates, build_candidates, stack_columns

MEASURED = "measured_step_time_s"
PUBLISHED_COLUMNS = {"source_id", "gpu_type", "n_layers", "hidden_size", "global_batch_size"}
MODEL_COLUMNS = ("model",) + ARCH_FIELDS
TRAINING_COLUMNS = ("global_batch", "precision", "attention")
CLUSTER_COLUMNS = ("gpu", "gpus") + tuple(k for k in HARDWARE_OVERRIDES if k != "price_usd_per_gpu_hour")
PLAN_COLUMNS = tuple(PlanSpec.model_fields)
PASSTHROUGH = ("name", "source", "notes", "id")
USER_COLUMNS = MODEL_COLUMNS + TRAINING_COLUMNS + CLUSTER_COLUMNS + PLAN_COLUMNS + (MEASURED,) + PASSTHROUGH
#: Measured step times, seconds. Below 1 us no training step of a transformer runs: one kernel launch takes
#: ~2-5 us and a step launches hundreds (forward, backward, optimizer), so a smaller value is a unit error
#: or junk, which the fit would absorb by pinning a constant at its bound. Above 1e7 s (~4 months): junk.
STEP_TIME_MIN_S, STEP_TIME_MAX_S = 1e-6, 1e7
#: Rows of a measured CSV. Each row is parsed as a scenario (~0.15 ms) and every fit of the cross-validation
#: evaluates all of them: `cosearch calibrate` on 10,000 distinct rows takes ~7 s and 0.3 GB on one core
#: (100,000 rows took ~2 minutes and 1.2 GB with the per-row plan check); campaigns have tens to hundreds of runs.
MAX_ROWS = 10_000
#: Lines of a measured CSV, counted before it is parsed: comment lines and line breaks inside quoted cells
#: count too, so the bound is 100x the rows. A 64 MiB file of 30 million one-cell lines otherwise takes
#: ~20 s and ~3 GB to parse before its rows could be counted.
MAX_LINES = 100 * MAX_ROWS


def read_csv(path: str | Path) -> pd.DataFrame:
    """A measured CSV, read safely (size and encoding caps, ``#`` comment lines: :mod:`cosearch._files`),
    with at most :data:`MAX_ROWS` rows (and :data:`MAX_LINES` lines, checked before parsing)."""
    text = _files.read_text(path, _files.CSV_MAX_BYTES)  # read once: counted, then parsed
    lines = text.count("\n")
    if lines > MAX_LINES:
        raise CosearchError(str(path), f"{lines:,} lines; a measured CSV holds at most {MAX_ROWS:,} rows")
    df = _files.parse_csv(text, str(path))
    if len(df) > MAX_ROWS:  # refused before any row is parsed as a scenario
        raise CosearchError(str(path), f"{len(df):,} rows; at most {MAX_ROWS:,} measured rows can be calibrated "
                            "(repeated measurements of one configuration: keep their median)")
    return df


def detect_format(df: pd.DataFrame) -> str:
    cols = set(df.columns)
    if PUBLISHED_COLUMNS <= cols:
        return "published"
    if MEASURED in cols:
        return "user"
    raise CosearchError("measured CSV", f"needs a {MEASURED} column (user format, see docs/calibration.md) "
                        f"or the published-runs columns ({', '.join(sorted(PUBLISHED_COLUMNS))})")


def _cell(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        f = float(v)
        return int(f) if f.is_integer() else f
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, str):
        s = v.strip()
        if s == "":
            return None
        if s.lower() in ("true", "false"):
            return s.lower() == "true"
        return s
    return v


def row_scenario(row: dict[str, Any]) -> dict[str, Any]:
    """The scenario dict of one user-format row (cells already cleaned with :func:`_cell`)."""
    pick = lambda keys: {k: row[k] for k in keys if row.get(k) is not None}  # noqa: E731
    arch = pick(ARCH_FIELDS)
    if row.get("model") is not None:
        from .presets import preset

        model: Any = {**preset(str(row["model"])), **arch}
    else:
        model = arch
    return {"model": model, "training": pick(TRAINING_COLUMNS), "cluster": pick(CLUSTER_COLUMNS), "plan": pick(PLAN_COLUMNS)}


def _check_measured(raw: Any, value: Any, where: str) -> float:
    """The measured step time of one row as seconds in [STEP_TIME_MIN_S, STEP_TIME_MAX_S], or a one-line error.
    A number as text is taken: one text cell makes pandas read the whole column as text, and the error must
    name that row, not the first."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not STEP_TIME_MIN_S <= value <= STEP_TIME_MAX_S:
        raise CosearchError(f"{where}: {MEASURED}", f"must be a number of seconds, {STEP_TIME_MIN_S:g} <= x <= "
                            f"{STEP_TIME_MAX_S:g} (got {raw!r})")
    return float(value)


def _check_plans(cols_list: list[dict[str, float]], columns: dict[str, np.ndarray], path: str) -> None:
    """Every row's plan rules at once (:func:`cosearch.model.feasibility.valid_mask` on the stacked columns,
    one pass instead of one check per row); the first violating row is re-checked alone, so the error names
    its row and rule exactly as a per-row check would."""
    ok = np.broadcast_to(valid_mask(broadcast_columns(columns)), (len(cols_list),))
    for i in np.flatnonzero(~ok)[:1]:
        try:
            check_scalar(broadcast_columns(cols_list[i]))
        except CosearchError as err:
            raise CosearchError(f"{path}: row {i + 1}: {err.field}", err.message) from None


def user_candidates(df: pd.DataFrame, path: str = "measured CSV") -> Candidates:
    """Candidates of a user-format CSV: one scenario per row, each named by its row in an error."""
    unknown = [c for c in df.columns if c not in USER_COLUMNS]
    if unknown:
        raise CosearchError(f"{path}: column {unknown[0]}", f"unknown column; allowed: {', '.join(USER_COLUMNS)}")
    rows, cols_list, scenarios = [], [], []
    for i, raw in enumerate(df.to_dict(orient="records"), start=1):
        row = {k: _cell(v) for k, v in raw.items()}
        where = f"{path}: row {i}"
        measured = _check_measured(raw.get(MEASURED), row.get(MEASURED), where)
        try:
            sc = parse_scenario(row_scenario(row))
            cols = scenario_columns(sc)
        except CosearchError as err:
            raise CosearchError(f"{where}: {err.field}", err.message) from None
        cols_list.append(cols)
        scenarios.append(sc.model_dump(mode="json"))
        rows.append({
            "row_id": i, "source_id": row.get("source") or "user", "model": row.get("name") or row.get("model") or "custom",
            "num_gpus": sc.cluster.gpus, "seq_len": sc.model.seq_len, "measured_step_s": measured,
        })
    if not rows:
        raise CosearchError(path, "no measured rows")
    columns = stack_columns(cols_list)
    _check_plans(cols_list, columns, path)
    return Candidates(pd.DataFrame(rows), columns, np.arange(len(rows)), scenarios)


#: Numeric columns of the published-runs format: (integer?, upper bound). Checked before use so
#: junk cells ("abc", inf, a 400-digit number, 0 layers) are one-line errors naming row and column.
PUBLISHED_NUMERIC = {
    "row_id": (True, 1e9), "params_b_as_reported": (False, 1e6), "n_layers": (True, 1e5), "hidden_size": (True, 1 << 24),
    "n_heads": (True, 1 << 20), "n_kv_heads": (True, 1 << 20), "ffn_hidden_size": (True, 1 << 24),
    "vocab_size": (True, 1e8), "seq_len": (True, 1e8), "global_batch_size": (True, 1e9), "micro_batch_size": (True, 1e9),
    "grad_accum_steps": (True, 1e9), "tp": (True, 1e8), "pp": (True, 1e8), "dp": (True, 1e8), "cp": (True, 1e8),
    "vpp": (True, 1e5), "num_gpus": (True, 1e8), "iteration_time_s": (False, 1e7), "tflops_per_gpu": (False, 1e6),
    "mfu_pct": (False, 1e3), "hfu_pct": (False, 1e3), "pct_of_peak_reported": (False, 1e3), "tokens_per_s": (False, 1e15),
    "tokens_per_s_per_gpu": (False, 1e12), "aggregate_pflops": (False, 1e9),
}


def _checked_published(df: pd.DataFrame, path: str) -> pd.DataFrame:
    """``df`` with its numeric columns as finite, positive, bounded floats (or a CosearchError)."""
    df = df.copy()
    for col, (integer, hi) in PUBLISHED_NUMERIC.items():
        if col not in df.columns:
            continue
        raw = df[col]
        num = pd.to_numeric(raw.astype(str).str.strip().replace({"": None, "nan": None, "NaN": None}), errors="coerce")
        for i, (r, v) in enumerate(zip(raw.tolist(), num.tolist()), start=1):
            given = r is not None and not (isinstance(r, float) and math.isnan(r)) and str(r).strip() not in ("", "nan", "NaN")
            if not given:
                continue
            where = f"{path}: row {i}: {col}"
            if v is None or (isinstance(v, float) and math.isnan(v)):
                raise CosearchError(where, f"must be a number (got {r!r})")
            if not (math.isfinite(v) and 0 < v <= hi):
                raise CosearchError(where, f"out of range (got {r!r}; allowed: 0 < x <= {hi:g})")
            if integer and not float(v).is_integer():
                raise CosearchError(where, f"must be an integer (got {r!r})")
        df[col] = num.astype(float)
    return df


def load_measured(path: str | Path) -> tuple[Candidates, str]:
    """Candidates from a measured CSV in either format, and the format's name."""
    df = read_csv(path)
    fmt = detect_format(df)
    if fmt == "published":
        df = _checked_published(df, str(path))
        try:
            c = build_candidates(df)
        except IndexError:  # no row gave a candidate
            c = None
        except CosearchError:
            raise
        except (ValueError, ArithmeticError, TypeError) as err:  # e.g. unknown gpu_type text
            raise CosearchError(str(path), f"cannot use the published-runs rows ({str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
        if c is None or len(c.rows) == 0:
            raise CosearchError(str(path), "no usable rows (each needs the architecture, GPU type, GPU count and a step time)")
        return c, fmt
    return user_candidates(df, str(path)), fmt
