"""Stacked step-time and memory breakdowns of the front's configurations."""
from __future__ import annotations

import plotly.graph_objects as go

from ._data import StudyData, fmt_metric, metric_label

#: One colour per part, the same in the HTML and the PNGs.
TIME_COLORS = {
    "compute": "#4c78a8", "recompute": "#9ecae9", "tp_comm": "#f58518", "cp_comm": "#ffbf79", "pp_comm": "#e45756",
    "dp_comm": "#b279a2", "bubble": "#bab0ac", "optimizer": "#54a24b", "offload": "#eeca3b",
}
MEMORY_COLORS = {"weights": "#4c78a8", "gradients": "#f58518", "optimizer": "#54a24b", "activations": "#e45756"}


def part_name(column: str) -> str:
    """``time_tp_comm_s`` -> ``tp_comm``; ``mem_weights_gib`` -> ``weights``."""
    for prefix, suffix in (("time_", "_s"), ("mem_", "_gib")):
        if column.startswith(prefix) and column.endswith(suffix):
            return column[len(prefix):-len(suffix)]
    return column


def bar_labels(data: StudyData) -> list[str]:
    """x-axis labels of the front's bars: trial number and the first objective."""
    f = data.front_for_bars()
    o = data.front_objectives[0]
    return [f"#{int(r['trial'])}<br>{fmt_metric(o, r[o])}" for r in f.to_dict("records")]


def _hover(f, col: str, unit: str) -> list[str]:
    return [f"<b>trial {int(r['trial'])}</b><br>{r['plan'].replace(' | ', '<br>')}<br>{part_name(col)}: {r[col]:.4g} {unit}"
            for r in f.to_dict("records")]


def plot_time_breakdown(data: StudyData) -> go.Figure:
    """Step time of each front configuration, stacked by part (compute, communication, bubble, ...)."""
    f = data.front_for_bars()
    labels = bar_labels(data)
    fig = go.Figure()
    for col in data.time_parts():
        name = part_name(col)
        fig.add_trace(go.Bar(x=labels, y=f[col].fillna(0.0), name=name, marker_color=TIME_COLORS.get(name),
                             text=_hover(f, col, "s"), hovertemplate="%{text}<extra></extra>", textposition="none"))
    thinned = f" (every {len(data.front) / len(f):.0f}th of {len(data.front)})" if len(f) < len(data.front) else ""
    fig.update_layout(
        barmode="stack", template="plotly_white", height=460, title=f"Step time of the front's configurations{thinned}",
        yaxis_title="seconds per optimizer step", xaxis_title=f"front configuration (trial, {metric_label(data.front_objectives[0])})",
        legend=dict(orientation="h", y=-0.3, traceorder="normal"), margin=dict(l=70, r=30, t=60, b=120),
    )
    return fig


def plot_memory_breakdown(data: StudyData) -> go.Figure:
    """Memory per GPU of each front configuration, stacked by part, with the usable HBM marked."""
    f = data.front_for_bars()
    labels = bar_labels(data)
    fig = go.Figure()
    for col in data.memory_parts():
        name = part_name(col)
        fig.add_trace(go.Bar(x=labels, y=f[col].fillna(0.0), name=name, marker_color=MEMORY_COLORS.get(name),
                             text=_hover(f, col, "GiB"), hovertemplate="%{text}<extra></extra>", textposition="none"))
    if "usable_memory_gib" in f:
        fig.add_trace(go.Scatter(x=labels, y=f["usable_memory_gib"], mode="markers", name="usable HBM",
                                 marker=dict(symbol="line-ew-open", size=34, color="black", line=dict(width=3, color="black")),
                                 hovertemplate="usable HBM %{y:.1f} GiB<extra></extra>"))
    fig.update_layout(
        barmode="stack", template="plotly_white", height=460, title="Memory per GPU of the front's configurations",
        yaxis_title="GiB per GPU", xaxis_title=f"front configuration (trial, {metric_label(data.front_objectives[0])})",
        legend=dict(orientation="h", y=-0.3, traceorder="normal"), margin=dict(l=70, r=30, t=60, b=120),
    )
    return fig
