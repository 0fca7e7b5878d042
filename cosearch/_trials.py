"""Trial records from metric columns (the study/trial contract is in :mod:`cosearch.storages._writer`).

:func:`build_records` turns the model's metric columns into :class:`TrialRecord`s (values,
feasibility, constraint violations); :func:`penalized_values` ranks infeasible points for samplers
that ignore constraints. The writer and the record type live in :mod:`cosearch.storages._writer`
and are re-exported here (``from cosearch._trials import TrialWriter`` keeps working).
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
from optuna.trial import TrialState

from .search.space import SearchSpace
from .storages._writer import (  # noqa: F401 - re-exported
    BATCH_ATTR, CONSTRAINTS_PREFIX, TrialRecord, TrialWriter, deferred_interrupt, jsonable, record_from_trial,
)

#: Constraint value stored for an unbounded violation (optuna refuses NaN).
BIG_VIOLATION = 1.0e6


def _plain_column(arr: np.ndarray) -> list[Any]:
    a = np.asarray(arr)
    if a.dtype == bool:
        return a.astype(float).tolist()
    a = a.astype(float)
    out = a.tolist()
    bad = ~np.isfinite(a)
    if bad.any():
        for i in np.flatnonzero(bad):
            out[i] = None
    return out


def constraint_columns(space: SearchSpace, metrics: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Constraint values per key (<= 0 satisfied) for arrays of metrics."""
    valid = np.asarray(metrics["valid"], dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        mem = np.asarray(metrics["memory_gib"], dtype=float) / np.asarray(metrics["usable_memory_gib"], dtype=float) - 1.0
    fits = np.asarray(metrics["fits"], dtype=bool)
    mem = np.where(np.isfinite(mem), mem, BIG_VIOLATION)
    mem = np.where(fits, np.minimum(mem, 0.0), np.maximum(mem, 1e-9))  # sign agrees with `fits`
    cols = {"valid": np.where(valid, 0.0, 1.0), "memory": mem}
    for key in space.constraints:
        v = np.asarray(metrics[f"violation_{key}"], dtype=float)
        cols[key] = np.clip(np.nan_to_num(v, nan=BIG_VIOLATION, posinf=BIG_VIOLATION), -BIG_VIOLATION, BIG_VIOLATION)
    return cols


def build_records(space: SearchSpace, rows: np.ndarray, metrics: Mapping[str, np.ndarray]) -> list[TrialRecord]:
    """One :class:`TrialRecord` per row (vectorized per metric; one small dict per row)."""
    rows = np.asarray(rows, dtype=float).reshape(-1, len(space.dims))
    n = rows.shape[0]
    if n == 0:
        return []
    objs = np.stack([np.asarray(metrics[m], dtype=float) for m in space.objectives], axis=1)
    finite = np.isfinite(objs).all(axis=1)
    feasible = np.asarray(metrics["feasible"], dtype=bool)
    cons = constraint_columns(space, metrics)
    con_lists = {k: v.tolist() for k, v in cons.items()}
    keys = list(metrics)
    cols = [_plain_column(metrics[k]) for k in keys]
    obj_lists = objs.tolist()
    scenarios = space.scenarios(rows)
    out = []
    for i in range(n):
        m = {k: c[i] for k, c in zip(keys, cols)}
        ok = bool(finite[i])
        out.append(TrialRecord(
            row=rows[i],
            state=TrialState.COMPLETE if ok else TrialState.FAIL,
            values=obj_lists[i] if ok else None,
            constraints={k: v[i] for k, v in con_lists.items()},
            user_attrs={"scenario": scenarios[i], "metrics": m, "feasible": bool(feasible[i])},
        ))
    return out


def penalized_values(values: Sequence[float] | None, violation: float, directions: Sequence[str]) -> list[float]:
    """Values for samplers that ignore constraints: infeasible points rank after every feasible
    one, ordered by total violation (and unfinished objectives count as a large violation)."""
    if values is not None and violation <= 0 and all(math.isfinite(v) for v in values):
        return list(values)
    v = violation if values is not None else max(violation, BIG_VIOLATION)
    return [(1e12 if d == "minimize" else -1e12) * (1.0 + v) for d in directions]
