"""Pareto front of a study: every feasible trial, the front highlighted, the plan on hover."""
from __future__ import annotations

import plotly.graph_objects as go

from ._data import BAND_METRICS, StudyData, axis_range, hover_text, log_axis, log_ticks, metric_label, off_axis


def _whiskers(df, col: str) -> dict | None:
    """Plotly error bars spanning the stored 80 % prediction interval of ``col``, or None."""
    lo, hi = BAND_METRICS.get(col, ("", ""))
    if lo not in df or hi not in df or not df[lo].notna().any():
        return None
    v = df[col].astype(float)
    return dict(type="data", symmetric=False, array=(df[hi].astype(float) - v).tolist(),
                arrayminus=(v - df[lo].astype(float)).tolist(), thickness=1, width=3, color="rgba(31,119,180,0.6)")


def plot_pareto_front(data: StudyData) -> go.Figure:
    """Scatter of the first two front objectives (a third one, if any, as colour).

    Grey: feasible trials; red crosses: infeasible ones (a rule broken, memory or a budget); the
    front is drawn as a staircase of large markers. Hover shows the trial's plan and metrics.
    """
    objs = data.front_objectives
    df, feas, front = data.trials, data.feasible, data.front
    fig = go.Figure()
    if len(objs) == 1:  # nothing to trade against: objective by trial
        x, y = "trial", objs[0]
    else:
        x, y = objs[0], objs[1]
    infeas = df[~df["feasible"]]
    shown = list(objs)
    if len(infeas) and x in infeas and y in infeas:
        fig.add_trace(go.Scatter(
            x=infeas[x], y=infeas[y], mode="markers", name=f"infeasible ({len(infeas)})",
            marker=dict(symbol="x", size=6, color="rgba(214,39,40,0.35)"),
            text=[hover_text(r, shown) for r in infeas.to_dict("records")], hovertemplate="%{text}<extra>infeasible</extra>",
        ))
    others = feas.drop(index=front.index)
    if len(others):
        fig.add_trace(go.Scatter(
            x=others[x], y=others[y], mode="markers", name=f"feasible ({len(feas)})",
            marker=dict(size=7, color="rgba(120,120,120,0.45)"),
            text=[hover_text(r, shown) for r in others.to_dict("records")], hovertemplate="%{text}<extra>feasible</extra>",
        ))
    if len(front):
        marker = dict(size=12, line=dict(width=1, color="black"))
        if len(objs) >= 3:
            marker.update(color=front[objs[2]], colorscale="Viridis", showscale=True,
                          colorbar=dict(title=metric_label(objs[2])))
        else:
            marker.update(color="#1f77b4")
        fig.add_trace(go.Scatter(
            x=front[x], y=front[y], mode="lines+markers" if len(objs) == 2 else "markers",
            name=f"Pareto front ({len(front)})", line=dict(shape="hv", color="#1f77b4", width=1.5),
            marker=marker, text=[hover_text(r, shown) for r in front.to_dict("records")],
            hovertemplate="%{text}<extra>front</extra>",
            error_x=_whiskers(front, x), error_y=_whiskers(front, y),
        ))
    only_x, only_y = off_axis(front, x, y)  # no value on one axis (a cost without a price): a line, not nothing
    for v in only_x:
        fig.add_vline(x=v, line_dash="dot", line_color="#d62728", annotation_text=f"front: {metric_label(y)} unknown")
    for v in only_y:
        fig.add_hline(y=v, line_dash="dot", line_color="#d62728", annotation_text=f"front: {metric_label(x)} unknown")
    title = "Pareto front" if len(data.objectives) > 1 else f"Trade-off of {data.objectives[0]} against {objs[1]}" if len(objs) > 1 else f"{objs[0]} by trial"
    fig.update_layout(
        title=title, template="plotly_white", height=520, hovermode="closest",
        xaxis_title=metric_label(x), yaxis_title=metric_label(y), legend=dict(orientation="h", y=-0.18),
        margin=dict(l=70, r=30, t=60, b=80),
    )
    # axes span the feasible trials (infeasible ones far away would squash the front)
    ref = feas if len(feas) else df
    for axis, col in (("x", x), ("y", y)):
        if col == "trial" or col not in ref:
            continue
        log = log_axis(ref[col])
        rng = axis_range(ref[col], log)
        update = fig.update_xaxes if axis == "x" else fig.update_yaxes
        ticks = log_ticks(rng, col) if (log and rng) else ({"tickprefix": "$"} if "usd" in col else {})
        update(type="log" if log else "linear", **({"range": rng} if rng else {}), **ticks)
    return fig

