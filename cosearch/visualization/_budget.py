"""Best configuration per budget: for several budget levels, the feasible trial with the best
primary objective that stays within the budget (answered from the stored trials)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ._data import BUDGET_METRICS, StudyData, fmt_band, fmt_metric, metric_label

LEVELS = 5


def budget_metric(data: StudyData) -> str | None:
    """What the budget limits: the second front objective (or the trade-off metric)."""
    return data.front_objectives[1] if len(data.front_objectives) > 1 else None


def budget_levels(data: StudyData, metric: str, n: int = LEVELS) -> list[float]:
    """Budget levels spread (geometrically when positive) over the front's range of ``metric``,
    plus the study's own constraint on it, if any."""
    vals = data.front[metric].to_numpy(dtype=float)
    vals = vals[np.isfinite(vals)]
    if len(vals) == 0:
        return []
    lo, hi = float(vals.min()), float(vals.max())
    if len(vals) <= n:  # a small front: one level per front point
        levels = list(vals)
    elif lo == hi:
        levels = [hi]
    elif lo > 0:
        levels = list(np.geomspace(lo, hi, n))
    else:
        levels = list(np.linspace(lo, hi, n))
    for key, value in (data.info.get("constraints") or {}).items():
        if BUDGET_METRICS.get(key) == metric and isinstance(value, (int, float)) and math.isfinite(value):
            levels.append(float(value))
    return sorted({_round(v) for v in levels})


def _round(v: float) -> float:
    """Round a level up to 3 significant digits (so the front point at the edge stays inside)."""
    if v <= 0:
        return v
    e = math.floor(math.log10(v)) - 2
    return math.ceil(v / 10 ** e) * 10 ** e


def best_per_budget(data: StudyData, levels: list[float] | None = None) -> pd.DataFrame:
    """One row per budget level: the limit, then the best feasible trial within it (or none)."""
    metric = budget_metric(data)
    if metric is None:
        return pd.DataFrame()
    levels = budget_levels(data, metric) if levels is None else levels
    primary, direction = data.front_objectives[0], (data.directions + ["minimize"])[0]
    feas = data.feasible
    rows: list[dict[str, Any]] = []
    for level in levels:
        ok = feas[feas[metric] <= level]
        ok = ok[np.isfinite(ok[primary].to_numpy(dtype=float))]
        if ok.empty:
            rows.append({"budget_metric": metric, "budget": level, "trial": None})
            continue
        best = ok.sort_values([primary, metric], ascending=[direction != "maximize", True], kind="stable").iloc[0]
        rows.append({"budget_metric": metric, "budget": level, **best.to_dict()})
    return pd.DataFrame(rows)


def budget_table_html(data: StudyData, table: pd.DataFrame | None = None) -> str:
    """The budget table as an HTML ``<table>``."""
    table = best_per_budget(data) if table is None else table
    metric = budget_metric(data)
    if metric is None or table.empty:
        return "<p class='note'>No budget levels: the study has no second objective or trade-off metric.</p>"
    primary = data.front_objectives[0]
    shown = [c for c in dict.fromkeys([primary, metric, "time_to_train_days", "cost_to_train_usd", "gpus", "mfu", "memory_gib"])
             if c in table]
    head = "".join(f"<th>{metric_label(c)}</th>" for c in shown)
    out = [f"<table class='budget'><thead><tr><th>budget: {metric_label(metric)} at most</th><th>trial</th>{head}<th class='plan'>plan</th></tr></thead><tbody>"]
    for r in table.to_dict("records"):
        limit = fmt_metric(metric, r["budget"])
        if r.get("trial") is None or (isinstance(r.get("trial"), float) and math.isnan(r["trial"])):
            out.append(f"<tr><td>{limit}</td><td colspan='{len(shown) + 2}' class='none'>no feasible trial within this budget</td></tr>")
            continue
        cells = "".join(f"<td>{fmt_metric(c, r.get(c))}{_band_cell(c, r)}</td>" for c in shown)
        out.append(f"<tr><td>{limit}</td><td>#{int(r['trial'])}</td>{cells}<td class='plan'>{_esc(r.get('plan', ''))}</td></tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _band_cell(metric: str, row: dict) -> str:
    band = fmt_band(metric, row)
    return f"<br><span class='band'>{_esc(band)}</span>" if band else ""


def _esc(s: Any) -> str:
    import html

    return html.escape(str(s))
