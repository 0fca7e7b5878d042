"""Exhaustive enumeration: the exact Pareto front of a finite space, in bounded memory.

The space is enumerated in chunks (mixed radix over the choice indices, :meth:`SearchSpace.iter_chunks`),
each chunk evaluated in one vectorized model call, reduced to its own front, and folded into the
running front with :func:`cosearch.search.pareto.merge_fronts` (exact, first duplicate wins).
The front is taken over the objectives *and* every metric a budget query can bound
(the space's constraints, plus ``gpus`` and, when ``training.tokens`` is set,
``cost_to_train_usd`` and ``time_to_train_days``), over feasible points only, so that
``cosearch best --max-...`` answers exactly from the stored front.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .._malloc import keep_heap
from ..model.profile import DEFAULT_PROFILE, Profile
from ..search.pareto import WORST, merge_fronts, missing_as_worst, pareto_mask
from ..search.space import SearchSpace, direction

logger = logging.getLogger(__name__)

#: Metrics ``cosearch best`` can bound, always part of an exhaustive front when finite.
QUERY_METRICS = ("cost_to_train_usd", "gpus", "time_to_train_days")
CHUNK = 32_768  # measured fastest (cache-sized temporaries): 0.44 s per 288k points vs 0.66 s at 262k


def front_metrics(space: SearchSpace) -> list[str]:
    """Objectives, budgeted metrics and query metrics (deduplicated, objectives first)."""
    has_tokens = "tokens" in (space.base.get("training") or {})
    extra = [m for m in QUERY_METRICS if m == "gpus" or has_tokens]
    out: list[str] = []
    for m in list(space.objectives) + space.budget_metrics + extra:
        if m not in out:
            out.append(m)
    return out


@dataclass
class ExhaustiveResult:
    rows: np.ndarray                 # (f, d) rows of the front
    front_metrics: list[str]
    summary: dict[str, Any] = field(default_factory=dict)


def fold_best(best: dict[str, float | None], metric: str, value: float | None) -> None:
    """Keep in ``best[metric]`` the better of it and ``value`` (by the metric's direction)."""
    old = best.get(metric)
    if value is not None and (old is None or (value > old if direction(metric) == "maximize" else value < old)):
        best[metric] = value


def reduce_chunk(space: SearchSpace, out: dict[str, np.ndarray], flat: np.ndarray, metrics: list[str],
                 senses: list[str], counts: dict[str, int], best: dict[str, float | None], *,
                 required: int = 0) -> tuple[np.ndarray, np.ndarray] | None:
    """Fold one evaluated chunk (flat positions ``flat``) into ``counts`` and ``best`` (in place) and
    return its own front: ``metrics`` values and flat positions of its non-dominated feasible points
    (None when none is feasible). Shared by the single-process and the dask enumerations.

    The first ``required`` metrics (``best_point`` requires its objective) must have
    values. Any other missing value (the cost of a GPU with no price, objective or not) counts as its
    worst (:func:`~cosearch.search.pareto.missing_as_worst`), so the point stays a candidate on the
    metrics it has: the fastest plan on an unpriced GPU was dropped, even with cost an objective."""
    valid = np.asarray(out["valid"], dtype=bool)
    fits = valid & np.asarray(out["fits"], dtype=bool)
    feas = np.asarray(out["feasible"], dtype=bool)
    counts["points"] += int(flat.size)
    counts["valid"] += int(valid.sum())
    counts["fits"] += int(fits.sum())
    counts["within_budget"] += int((fits & np.asarray(out["within_budget"], dtype=bool)).sum())
    counts["feasible"] += int(feas.sum())
    if not feas.any():
        return None
    for m in space.objectives:
        v = np.asarray(out[m], dtype=float)[feas]
        v = v[np.isfinite(v)]
        if v.size:
            fold_best(best, m, float(v.max() if direction(m) == "maximize" else v.min()))
    pts = missing_as_worst(np.stack([np.asarray(out[m], dtype=float)[feas] for m in metrics], axis=1), senses,
                           keep=required)
    ids = flat[feas]
    mask = pareto_mask(pts, senses)
    return pts[mask], ids[mask]


def _enumerate(space: SearchSpace, metrics: list[str], senses: list[str], counts: dict[str, int],
               best: dict[str, float | None], *, chunk: int, profile: Profile,
               progress: Callable[[int, int], None] | None = None,
               select: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None,
               required: int = 0) -> tuple[np.ndarray, np.ndarray] | None:
    """Evaluate every point of ``space`` chunk by chunk and return the exact front over ``metrics``
    of its feasible points (values, flat positions), or None when none is feasible. ``select``
    (optional) narrows ``feasible`` per chunk further (e.g. the budgets of a ``best`` query)."""
    space._require_finite("exhaustive search")
    keep_heap()  # chunk-sized temporaries: see cosearch/_malloc.py
    total = int(space.size)
    acc: tuple[np.ndarray, np.ndarray] | None = None
    pending: list[tuple[np.ndarray, np.ndarray]] = []
    pending_rows = 0
    for flat, assign in space.iter_chunks(chunk):
        out = space.evaluate(assign, profile)
        if select is not None:
            out["feasible"] = np.asarray(out["feasible"], dtype=bool) & select(out)
        local = reduce_chunk(space, out, flat, metrics, senses, counts, best, required=required)
        if local is not None:
            pending.append(local)
            pending_rows += len(local[1])
            if pending_rows > 4 * chunk:
                acc = merge_fronts(([acc] if acc is not None else []) + pending, senses)
                pending, pending_rows = [], 0
        if progress is not None:
            progress(counts["points"], total)
    if pending:
        acc = merge_fronts(([acc] if acc is not None else []) + pending, senses)
    return acc


def objective_front_size(points: np.ndarray, directions: list[str]) -> int:
    """Size of the front over the objectives (the first ``len(directions)`` columns of an exhaustive
    front's ``points``, missing values at their worst stand-in), as :func:`cosearch.study.pareto_front`
    lists it: a point with no objective value at all is on no such front."""
    obj = np.asarray(points, dtype=float)[:, : len(directions)]
    obj = np.where((np.abs(obj) == WORST).all(axis=1, keepdims=True), np.nan, obj)
    return int(pareto_mask(obj, directions).sum())


def _new_counts() -> dict[str, int]:
    return {"points": 0, "valid": 0, "fits": 0, "within_budget": 0, "feasible": 0}


def best_point(space: SearchSpace, objective: str, limits: dict[str, float], *, profile: Profile = DEFAULT_PROFILE,
               chunk: int = CHUNK) -> tuple[int | None, dict[str, int]]:
    """Flat position of the exact best feasible point of ``space`` on ``objective`` with every metric
    in ``limits`` (metric -> upper bound) at most its bound, by re-enumerating the space (None when
    nothing qualifies), and the enumeration counts. Ties: the cheaper, then fewer GPUs, then the
    earlier point (as :func:`cosearch.study.best`)."""
    has_tokens = "tokens" in (space.base.get("training") or {})
    metrics = [objective] + [m for m in ("cost_to_train_usd", "gpus") if m != objective and (m == "gpus" or has_tokens)]
    senses = [direction(m) for m in metrics]

    def select(out: dict[str, np.ndarray]) -> np.ndarray:
        ok = np.ones(np.shape(out["feasible"]), dtype=bool)
        for m, bound in limits.items():
            ok &= np.asarray(out[m], dtype=float) <= bound  # NaN compares False: excluded
        return ok

    counts = _new_counts()
    acc = _enumerate(space, metrics, senses, counts, {}, chunk=chunk, profile=profile, select=select, required=1)
    if acc is None or not len(acc[1]):  # nothing feasible, or no feasible point has a value of ``objective``
        return None, counts
    pts, ids = acc
    y = pts * np.array([-1.0 if s == "maximize" else 1.0 for s in senses])
    order = np.lexsort(tuple([ids] + [y[:, j] for j in reversed(range(y.shape[1]))]))
    return int(ids[order[0]]), counts


def run_exhaustive(space: SearchSpace, *, chunk: int = CHUNK, progress: Callable[[int, int], None] | None = None,
                   profile: Profile = DEFAULT_PROFILE) -> ExhaustiveResult:
    """Enumerate every point of a finite space (evaluated with ``profile``); return the exact front and counts."""
    metrics = front_metrics(space)
    senses = [direction(m) for m in metrics]
    t0 = time.perf_counter()
    counts = _new_counts()
    best: dict[str, float | None] = {m: None for m in space.objectives}
    acc = _enumerate(space, metrics, senses, counts, best, chunk=chunk, profile=profile, progress=progress)
    elapsed = time.perf_counter() - t0
    front_ids = np.sort(acc[1]) if acc is not None else np.zeros(0, dtype=np.int64)
    rows = space.rows_of_flat(front_ids)
    # the objectives-only front, for the summary
    n_obj_front = objective_front_size(acc[0], space.directions) if len(rows) else 0
    summary = {
        **counts,
        "front_size": int(len(rows)),
        "objective_front_size": n_obj_front,
        "front_metrics": metrics,
        "best": best,
        "elapsed_s": round(elapsed, 4),
        "points_per_s": round(counts["points"] / elapsed, 1) if elapsed > 0 else None,
    }
    logger.info("exhaustive: %d points in %.2f s, %d feasible, front %d (%d on the objectives)",
                counts["points"], elapsed, counts["feasible"], len(rows), n_obj_front)
    return ExhaustiveResult(rows=rows, front_metrics=metrics, summary=summary)
