"""Search history: every trial's objective values and the best feasible value so far."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ._data import StudyData, axis_range, log_axis, log_ticks, metric_label


def running_best(values: np.ndarray, feasible: np.ndarray, direction: str) -> np.ndarray:
    """Best feasible value up to each position (NaN before the first feasible one)."""
    v = np.where(feasible & np.isfinite(values), values, np.inf if direction != "maximize" else -np.inf)
    best = np.minimum.accumulate(v) if direction != "maximize" else np.maximum.accumulate(v)
    return np.where(np.isfinite(best), best, np.nan)


def plot_history(data: StudyData) -> go.Figure | None:
    """One panel per objective: feasible trials as dots, infeasible as crosses, the running best as
    a line. ``None`` for an exhaustive study (it stores only its front: there is no history)."""
    if data.kind == "exhaustive":
        return None
    df = data.trials.sort_values("trial")
    k = len(data.objectives)
    fig = make_subplots(rows=k, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=[metric_label(o) for o in data.objectives])
    feas = df["feasible"].to_numpy()
    for i, (o, d) in enumerate(zip(data.objectives, data.directions), start=1):
        vals = df[o].to_numpy(dtype=float)
        fig.add_trace(go.Scatter(x=df["trial"][feas], y=vals[feas], mode="markers", name="feasible trial",
                                 marker=dict(size=5, color="rgba(31,119,180,0.45)"), showlegend=i == 1,
                                 legendgroup="feasible", hovertemplate="trial %{x}: %{y:.4g}<extra></extra>"), row=i, col=1)
        if (~feas).any():
            fig.add_trace(go.Scatter(x=df["trial"][~feas], y=vals[~feas], mode="markers", name="infeasible trial",
                                     marker=dict(size=5, symbol="x", color="rgba(214,39,40,0.35)"), showlegend=i == 1,
                                     legendgroup="infeasible", hovertemplate="trial %{x}: %{y:.4g} (infeasible)<extra></extra>"),
                          row=i, col=1)
        fig.add_trace(go.Scatter(x=df["trial"], y=running_best(vals, feas, d), mode="lines", name="best so far",
                                 line=dict(color="#d62728", width=2.5, shape="hv"), showlegend=i == 1, legendgroup="best",
                                 hovertemplate="best after trial %{x}: %{y:.4g}<extra></extra>"), row=i, col=1)
        # the axis spans the feasible values: infeasible outliers would flatten the best-so-far line
        log = log_axis(vals[feas])
        rng = axis_range(vals[feas], log)
        ticks = log_ticks(rng, o) if (log and rng) else {}
        fig.update_yaxes(type="log" if log else "linear", row=i, col=1, **({"range": rng} if rng else {}), **ticks)
        fig.update_yaxes(title_text=metric_label(o), row=i, col=1, **({"tickprefix": "$"} if "usd" in o and not log else {}))
    fig.update_xaxes(title_text="trial", row=k, col=1)
    fig.update_layout(template="plotly_white", height=260 + 220 * k, title="Search history",
                      legend=dict(orientation="h", y=-0.12), margin=dict(l=80, r=30, t=70, b=70))
    return fig
