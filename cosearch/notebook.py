"""Notebook API: :func:`sweep` a finite space into a DataFrame, take its :func:`front`, and
:class:`Estimate` (what :func:`cosearch.estimate` returns: a ``dict`` that renders as a table in Jupyter).
"""
from __future__ import annotations

import html
from typing import Any, Sequence

import numpy as np
import yaml

from ._numbers import kind_of
from .errors import CosearchError

#: Largest space :func:`sweep` evaluates into one DataFrame (one row per point).
SWEEP_LIMIT = 1_000_000

_SUMMARY = (
    ("step_time_s", "step time", "{:.3f} s"), ("tokens_per_s", "throughput", "{:,.0f} tokens/s"),
    ("mfu", "MFU", "{:.1%}"), ("memory_gib", "memory per GPU", "{:.1f} GiB"),
    ("usable_memory_gib", "usable memory per GPU", "{:.1f} GiB"), ("fits", "fits in memory", "{}"),
    ("params", "parameters", "{:,.0f}"), ("gpus", "GPUs", "{}"), ("dp", "data parallel", "{}"),
    ("num_microbatches", "microbatches", "{}"), ("time_to_train_days", "time to train", "{:.1f} days"),
    ("cost_to_train_usd", "cost to train", "${:,.0f}"), ("energy_to_train_mwh", "energy to train", "{:,.0f} MWh"),
)


def _fmt(fmt: str, v: Any) -> str:
    if v is None:
        return "n/a"
    try:
        return fmt.format(v)
    except (ValueError, TypeError):
        return str(v)


class Estimate(dict):
    """The result of :func:`cosearch.estimate`: a plain ``dict`` (same keys, JSON-able) that
    Jupyter shows as a table (``_repr_html_``) with the time and memory breakdowns."""

    def _rows(self) -> list[tuple[str, str]]:
        return [(label, _fmt(fmt, self[k])) for k, label, fmt in _SUMMARY if k in self]

    def _repr_html_(self) -> str:
        def table(title: str, rows: Sequence[tuple[str, str]]) -> str:
            body = "".join(f"<tr><td style='text-align:left'>{html.escape(a)}</td>"
                           f"<td style='text-align:right'>{html.escape(b)}</td></tr>" for a, b in rows)
            return (f"<table style='display:inline-table;vertical-align:top;margin-right:1em'>"
                    f"<thead><tr><th colspan=2 style='text-align:left'>{html.escape(title)}</th></tr></thead>"
                    f"<tbody>{body}</tbody></table>")

        parts = [table("estimate", self._rows())]
        for key, title, unit in (("breakdown_s", "step time breakdown", "s"), ("memory_breakdown_gib", "memory per GPU", "GiB")):
            d = self.get(key) or {}
            rows = [(k, _fmt("{:.4g} " + unit, v)) for k, v in d.items() if v]
            if rows:
                parts.append(table(title, rows))
        warn = "".join(f"<li>{html.escape(str(w))}</li>" for w in self.get("warnings") or [])
        return "<div>" + "".join(parts) + (f"<ul>{warn}</ul>" if warn else "") + "</div>"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:  # IPython plain-text display
        p.text("Estimate(" + ", ".join(f"{a}={b}" for a, b in self._rows()) + ")")


yaml.SafeDumper.add_representer(Estimate, yaml.SafeDumper.represent_dict)  # dumps like the dict it is


def _column(choices: Sequence[Any], idx: np.ndarray) -> Any:
    """The knob values of a dimension as a typed column (ints stay ints, words stay words)."""
    if all(isinstance(c, bool) for c in choices):
        return np.asarray(choices, dtype=bool)[idx]
    if all(isinstance(c, (int, np.integer)) and not isinstance(c, bool) for c in choices):
        return np.asarray(choices, dtype=np.int64)[idx]
    if all(isinstance(c, (int, float, np.number)) and not isinstance(c, bool) for c in choices):
        return np.asarray(choices, dtype=float)[idx]
    return np.asarray(list(choices) + [None], dtype=object)[:-1][idx]


def sweep(space: Any, *, limit: int = SWEEP_LIMIT, profile: Any = None):
    """Every point of a finite space as a :class:`pandas.DataFrame`: one column per knob (the
    dimension path, e.g. ``plan.tp``), then every metric of the model and ``feasible`` (valid plan,
    fits in memory, within the space's budgets). ``space``: a SearchSpace, a YAML path or a dict.

    Refuses spaces larger than ``limit`` points (one line); search those with ``cosearch run``.
    """
    import pandas as pd

    from .estimate import check_profile
    from .search.space import as_space

    sp = as_space(space)
    sp.require_knobs("sweep")
    sp._require_finite("sweep")
    n = int(sp.size)
    if n > limit:
        raise CosearchError("space", f"{n:,} points is more than sweep's limit of {limit:,}; "
                            "use `cosearch run SPACE` (exhaustive or sampled search) or narrow the space")
    flat = np.arange(n, dtype=np.int64)
    rows = sp.rows_of_flat(flat)
    out = sp.evaluate_rows(rows, check_profile(profile))
    data: dict[str, Any] = {}
    for j, d in enumerate(sp.dims):
        idx = rows[:, j].astype(np.intp)
        if d.choices is None:  # a continuous range cannot reach here (finite spaces only)
            data[d.path] = rows[:, j]
            continue
        data[d.path] = _column(d.choices, idx)
    for k, v in out.items():
        arr = np.asarray(v)
        if arr.ndim == 1 and len(arr) == n and k not in data:
            data[k] = arr
    df = pd.DataFrame(data)
    df.attrs["objectives"] = list(sp.objectives)
    df.attrs["knobs"] = [d.path for d in sp.dims]
    return df


def front(df: Any, objectives: Sequence[str] | str | None = None, *, feasible_only: bool = True):
    """The Pareto-optimal rows of ``df`` over ``objectives`` (default: the space's objectives a
    :func:`sweep` recorded). Directions come from the metric names (``mfu``, ``tokens_per_s``,
    ... are maximized, the rest minimized; :func:`cosearch.search.space.direction`). A missing value
    (the cost on a GPU without a price) ranks as its worst, as in :func:`cosearch.pareto_front`, so the
    fastest plan stays on the front; rows with no value at all, and with ``feasible_only`` the
    infeasible ones, are never on it."""
    import pandas as pd

    from .search.pareto import missing_as_worst, pareto_mask
    from .search.space import direction

    if not isinstance(df, pd.DataFrame):
        raise CosearchError("df", f"expected a pandas DataFrame, e.g. from cosearch.sweep (got {kind_of(df)})")
    if objectives is None:
        objectives = df.attrs.get("objectives")
        if not objectives:
            raise CosearchError("objectives", "give the metrics to trade off, e.g. ['step_time_s', 'gpus']")
    if isinstance(objectives, str):
        objectives = [objectives]
    objectives = list(objectives)
    missing = [m for m in objectives if m not in df.columns]
    if missing:
        raise CosearchError("objectives", f"no column {missing[0]!r} in the DataFrame")
    senses = [direction(m) for m in objectives]
    points = missing_as_worst(df[objectives].to_numpy(dtype=float, na_value=np.nan), senses)
    if feasible_only and "feasible" in df.columns:
        points = np.where(df["feasible"].to_numpy(dtype=bool)[:, None], points, np.nan)
    mask = pareto_mask(points, senses)
    return df[mask].sort_values(objectives[0], ascending=direction(objectives[0]) == "minimize")
