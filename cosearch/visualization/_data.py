"""What the plots read from a cosearch study: one table of evaluated trials, the objectives and the front.

Only the study contract is used (see :mod:`cosearch.study`): trial ``user_attrs`` ``scenario``,
``metrics`` and ``feasible``, and the study's ``user_attrs["cosearch"]``. Trial values are not read
(samplers that ignore constraints store penalized values); objectives come from ``metrics``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import optuna
import pandas as pd
from optuna.trial import FrozenTrial, TrialState

from .._study_store import counts_as_trial
from ..errors import CosearchError
from ..model import BREAKDOWN_KEYS, MEMORY_KEYS
from ..search.pareto import missing_as_worst, pareto_mask
from ..search.space import CONSTRAINT_METRICS, direction

ATTR = "cosearch"
#: Budget constraint keys of a search space -> the metric they bound from above.
BUDGET_METRICS = CONSTRAINT_METRICS
#: Display names and units of metrics.
METRIC_LABELS = {
    "time_to_train_days": "time to train (days)", "cost_to_train_usd": "cost to train (USD)",
    "step_time_s": "step time (s)", "cost_usd_per_step": "cost per step (USD)", "gpus": "GPUs",
    "energy_to_train_mwh": "energy to train (MWh)", "memory_gib": "memory per GPU (GiB)", "mfu": "MFU",
    "tokens_per_s": "tokens/s", "model_tflops_per_gpu": "model TFLOP/s per GPU",
    "time_to_accuracy_days": "time to target loss (days)", "cost_to_accuracy_usd": "cost to target loss (USD)",
    "p90_time_to_train_days": "P90 time to train (days)", "p90_cost_to_train_usd": "P90 cost to train (USD)",
    "step_time_high_s": "step time, 80 % band top (s)", "time_to_train_high_days": "time to train, 80 % band top (days)",
    "cost_to_train_high_usd": "cost to train, 80 % band top (USD)",
    # DeepPool (cosearch.model.burst)
    "total_tokens_per_s": "cluster tokens/s (foreground + background)", "background_tokens_per_s": "background tokens/s",
    "idle_gpu_s": "idle GPU-s per step",
}
#: Metrics with an 80 % prediction interval stored beside them (cosearch.model.interval): (low, high).
BAND_METRICS = {
    "step_time_s": ("step_time_low_s", "step_time_high_s"),
    "time_to_train_days": ("time_to_train_low_days", "time_to_train_high_days"),
    "cost_to_train_usd": ("cost_to_train_low_usd", "cost_to_train_high_usd"),
}
MAX_FRONT_BARS = 40


def metric_label(name: str) -> str:
    return METRIC_LABELS.get(name, name)


direction_of = direction


def _num(x: Any) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return math.nan
    return v


def plan_label(sc: Mapping[str, Any], dp: Any = None) -> str:
    """One line naming the hardware and the plan of a stored scenario (``dp``: the derived value
    when the scenario leaves it out)."""
    cl, pl = sc.get("cluster", {}), dict(sc.get("plan", {}))
    if pl.get("dp") is None and dp is not None and math.isfinite(_num(dp)):
        pl["dp"] = int(round(_num(dp)))
    model = sc.get("model")
    parts = [f"{cl.get('gpus', '?')} x {cl.get('gpu', '?')}"]
    cloud = sc.get("cloud")
    if isinstance(cloud, Mapping):  # rented: name the instances and the pricing
        parts[0] += f" ({cloud.get('instances', '?')} x {cloud.get('instance', '?')}, {cloud.get('pricing', 'on_demand')})"
    mesh = " ".join(f"{k}={pl[k]}" for k in ("tp", "pp", "dp", "cp") if pl.get(k) is not None)
    parts.append(mesh)
    extra = [f"mb={pl.get('microbatch', 1)}"]
    if pl.get("interleave", 1) != 1:
        extra.append(f"v={pl['interleave']}")
    extra.append(f"recompute={pl.get('recompute', 'none')}")
    if pl.get("sequence_parallel"):
        extra.append("sp")
    extra.append(f"zero={pl.get('zero', 0)}")
    parts.append(" ".join(extra))
    hw = [f"{k}={cl[k]:g}" for k in ("network_gbps", "nvlink_gbps", "hbm_gib", "gpus_per_node") if isinstance(cl.get(k), (int, float))]
    if hw:
        parts.append(" ".join(hw))
    if isinstance(model, str):
        parts.insert(0, model)
    return " | ".join(parts)


@dataclass
class StudyData:
    """The trials of one study as a table, with the objectives and the front."""

    name: str
    info: dict[str, Any]
    objectives: list[str]
    directions: list[str]
    trials: pd.DataFrame            # one row per evaluated trial (number order)
    scenarios: list[dict[str, Any]]  # aligned with ``trials`` rows
    params: list[dict[str, Any]]
    distributions: list[dict[str, Any]]
    front_objectives: list[str]      # what the front is computed over (objectives, or objective + a trade-off metric)
    front: pd.DataFrame              # feasible non-dominated rows, sorted by the first front objective
    notes: list[str] = field(default_factory=list)

    @property
    def kind(self) -> str:
        return str(self.info.get("kind") or "sampled")

    @property
    def method(self) -> str:
        return str(self.info.get("method") or "?")

    @property
    def feasible(self) -> pd.DataFrame:
        return self.trials[self.trials["feasible"]]

    def time_parts(self) -> list[str]:
        """Step-time parts (metric names) present with a non-zero value in some trial."""
        return [c for c in (f"time_{k}_s" for k in BREAKDOWN_KEYS) if c in self.trials and (self.trials[c].fillna(0) > 0).any()]

    def memory_parts(self) -> list[str]:
        return [c for c in (f"mem_{k}_gib" for k in MEMORY_KEYS) if c in self.trials]

    def front_for_bars(self) -> pd.DataFrame:
        """The front, thinned evenly to at most :data:`MAX_FRONT_BARS` rows for bar charts."""
        f = self.front
        if len(f) <= MAX_FRONT_BARS:
            return f
        pick = np.unique(np.round(np.linspace(0, len(f) - 1, MAX_FRONT_BARS)).astype(int))
        return f.iloc[pick]


def _tradeoff_metric(objective: str, columns: Sequence[str], df: pd.DataFrame) -> str | None:
    order = (("time_to_train_days", "step_time_s", "gpus") if "cost" in objective
             else ("cost_to_train_usd", "cost_usd_per_step", "gpus"))
    for c in order:
        if c != objective and c in columns and df[c].notna().any():
            return c
    return None


def study_data(study: optuna.Study) -> StudyData:
    """Read ``study`` (made by cosearch) into a :class:`StudyData`."""
    info = study.user_attrs.get(ATTR)
    if not isinstance(info, Mapping):
        raise CosearchError("--study", f"study {study.study_name!r} was not made by cosearch (no user attribute 'cosearch')")
    info = dict(info)
    objectives = [str(o) for o in info.get("objectives") or []]
    if not objectives:
        raise CosearchError("--study", f"study {study.study_name!r} names no objectives")
    directions = [str(d) for d in info.get("directions") or [direction_of(o) for o in objectives]]
    trials: list[FrozenTrial] = [  # evaluated trials, as the study counts them (not one failed as abandoned)
        t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
        if isinstance(t.user_attrs.get("metrics"), Mapping) and counts_as_trial(t)
    ]
    rows, scenarios, params, dists = [], [], [], []
    for t in trials:
        m = t.user_attrs["metrics"]
        sc = t.user_attrs.get("scenario") or {}
        row = {k: _num(v) for k, v in m.items()}
        row["trial"] = t.number
        row["feasible"] = t.user_attrs.get("feasible") is True  # FAIL too: an objective without a value (no price)
        row["plan"] = plan_label(sc, m.get("dp")) if sc else f"trial {t.number}"
        rows.append(row)
        scenarios.append(dict(sc))
        params.append(dict(t.params))
        dists.append(dict(t.distributions))
    df = pd.DataFrame(rows)
    if df.empty:
        df = pd.DataFrame(columns=["trial", "feasible", "plan", *objectives])
    for o in objectives:
        if o not in df:
            df[o] = np.nan
    df["feasible"] = df["feasible"].astype(bool)
    df = df.reset_index(drop=True)
    notes: list[str] = []
    front_obj, front_dir = list(objectives), list(directions)
    if len(objectives) == 1:
        extra = _tradeoff_metric(objectives[0], list(df.columns), df)
        if extra is not None:
            front_obj.append(extra)
            front_dir.append(direction_of(extra))
            notes.append(f"The study optimizes {objectives[0]} alone; the front shown is its trade-off against {extra}.")
    feas = df[df["feasible"]]
    if len(feas):
        mask = pareto_mask(missing_as_worst(feas[front_obj].to_numpy(dtype=float), front_dir), front_dir)
        front = feas[mask]
        front = front.sort_values(front_obj[0], ascending=front_dir[0] != "maximize", kind="stable")
    else:
        front = feas
        notes.append("No feasible trial: nothing to put on the front.")
    return StudyData(
        name=study.study_name, info=info, objectives=objectives, directions=directions, trials=df,
        scenarios=scenarios, params=params, distributions=dists, front_objectives=front_obj, front=front, notes=notes,
    )


def off_axis(rows: pd.DataFrame, x: str, y: str) -> tuple[list[float], list[float]]:
    """Values of ``x`` of the rows that have no value of ``y``, and values of ``y`` of those with no
    ``x``: a scatter cannot place these points (the cost on a GPU without a price), so the plots draw
    them as lines at the value they have instead of leaving out, unsaid, the fastest plan."""
    if x not in rows or y not in rows or not len(rows):
        return [], []
    xv, yv = rows[x].to_numpy(dtype=float), rows[y].to_numpy(dtype=float)
    return xv[np.isfinite(xv) & ~np.isfinite(yv)].tolist(), yv[np.isfinite(yv) & ~np.isfinite(xv)].tolist()


def fmt_metric(metric: str, value: Any) -> str:
    """A metric value for people: dollars, days, percent, GiB."""
    v = _num(value)
    if not math.isfinite(v):
        return "-"
    if "usd" in metric:
        for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
            if abs(v) >= div:
                return f"${v / div:.3g}{unit}"
        return f"${v:.3g}"
    if metric == "mfu":
        return f"{100 * v:.1f} %"
    if metric.endswith("_days"):
        return f"{v:.3g} days"
    if metric.endswith("_gib"):
        return f"{v:.1f} GiB"
    if metric.endswith("tokens_per_s"):
        return f"{v:,.0f}"
    if metric.endswith("_s"):
        return f"{v:.4g} s"
    if metric == "gpus":
        return f"{v:,.0f}"
    return f"{v:.4g}"


#: Metrics shown in hover texts and tables, after the objectives.
DETAIL_METRICS = ("time_to_train_days", "cost_to_train_usd", "step_time_s", "mfu", "memory_gib", "gpus")


def fmt_band(metric: str, row: Mapping[str, Any]) -> str:
    """``80 % band 16.1-26.4 days`` of ``metric`` in ``row`` (stored low/high metrics), or "" without one."""
    lo, hi = (_num(row.get(k)) for k in BAND_METRICS.get(metric, ("", "")))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return ""
    a, b = fmt_metric(metric, lo), fmt_metric(metric, hi)
    unit = " " + b.rsplit(" ", 1)[1] if " " in b else ""
    return f"80 % band {a.removesuffix(unit)}-{b}"


def hover_text(row: Mapping[str, Any], metrics: Sequence[str]) -> str:
    """Plotly hover HTML: trial, plan, then metrics (with their 80 % prediction interval where stored)."""
    shown = list(dict.fromkeys([*metrics, *DETAIL_METRICS]))
    lines = [f"<b>trial {int(row['trial'])}</b>", str(row.get("plan", "")).replace(" | ", "<br>")]
    for m in shown:
        if m in row:
            band = fmt_band(m, row)
            lines.append(f"{metric_label(m)}: {fmt_metric(m, row.get(m))}" + (f" ({band})" if band else ""))
    return "<br>".join(lines)


def axis_range(values: Any, log: bool) -> list[float] | None:
    """Plotly axis range covering ``values`` with a 6 % margin (log10 units on a log axis)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if log:
        v = np.log10(v[v > 0])
    if len(v) == 0:
        return None
    lo, hi = float(v.min()), float(v.max())
    pad = 0.06 * (hi - lo) if hi > lo else (0.1 if log else 0.1 * abs(hi) or 1.0)
    return [lo - pad, hi + pad]


def log_ticks(rng: Sequence[float], metric: str) -> dict[str, Any]:
    """Plotly ``tickvals``/``ticktext`` at 1, 2 and 5 per decade inside a log axis range (log10 units),
    so ticks read 20, 50, 100 rather than plotly's bare 2, 5 digits."""
    lo, hi = rng
    vals = [m * 10.0 ** e for e in range(math.floor(lo), math.ceil(hi) + 1) for m in (1, 2, 5)]
    vals = [v for v in vals if lo <= math.log10(v) <= hi]
    text = [fmt_metric(metric, v) if "usd" in metric else f"{v:,.4g}" for v in vals]
    return {"tickvals": vals, "ticktext": text}


def log_axis(values: Any) -> bool:
    """Whether positive values spanning more than 10x read better on a log axis."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    return bool(len(v) > 1 and np.all(v > 0) and v.max() / v.min() > 10)
