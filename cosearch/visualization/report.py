"""One self-contained HTML report of a study (plotly.js inlined: it opens without network access)."""
from __future__ import annotations

import datetime as _dt
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from ._breakdown import plot_memory_breakdown, plot_time_breakdown
from ._budget import best_per_budget, budget_metric, budget_table_html
from ._data import BUDGET_METRICS, StudyData, fmt_metric, metric_label, study_data
from ._history import plot_history
from ._pareto import plot_pareto_front
from ._importance import param_importances, plot_param_importances
from .._files import write_output

_CSS = """
body{font-family:-apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif;margin:0;color:#222;background:#fafafa}
main{max-width:1200px;margin:0 auto;padding:16px 28px 48px}
h1{font-size:1.6em;margin:.6em 0 .2em}h2{font-size:1.25em;margin:1.6em 0 .4em;border-bottom:1px solid #ddd;padding-bottom:4px}
.meta{color:#555;margin:0 0 1em}.meta span{display:inline-block;margin-right:1.6em;white-space:nowrap}
.card{background:#fff;border:1px solid #e3e3e3;border-radius:6px;padding:8px 10px;margin:10px 0}
table.budget{border-collapse:collapse;width:100%;font-size:.9em;background:#fff}
table.budget th,table.budget td{border:1px solid #e0e0e0;padding:5px 8px;text-align:right;vertical-align:top;white-space:nowrap}
table.budget th{white-space:normal}
table.budget th{background:#f2f4f7}table.budget th.plan{text-align:left}table.budget td.plan{white-space:normal;text-align:left;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.88em}
table.budget td.none{text-align:left;color:#999}table.budget span.band{color:#777;font-size:.85em}
.note{color:#666;font-size:.92em}
"""

#: ids of the plot divs, in report order (the browser test counts them).
PLOT_IDS = ("pareto-front", "time-breakdown", "memory-breakdown", "param-importance", "search-history")


@dataclass
class Report:
    """What :func:`write_report` wrote."""

    path: Path
    plots: list[str] = field(default_factory=list)   # ids of the plot divs in the HTML
    notes: list[str] = field(default_factory=list)
    pngs: list[Path] = field(default_factory=list)
    data: StudyData | None = None


def _div(fig: go.Figure, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, default_width="100%",
                       config={"displaylogo": False, "responsive": True})


def figures(data: StudyData) -> tuple[dict[str, go.Figure], list[str], Any]:
    """The report's figures by div id (missing ones skipped, with a note why)."""
    notes: list[str] = []
    figs: dict[str, go.Figure] = {}
    if len(data.front):
        figs["pareto-front"] = plot_pareto_front(data)
        figs["time-breakdown"] = plot_time_breakdown(data)
        figs["memory-breakdown"] = plot_memory_breakdown(data)
    imp = param_importances(data)
    fig = plot_param_importances(data, imp)
    if fig is not None:
        figs["param-importance"] = fig
    else:
        notes.append(f"Parameter importance is not shown: {imp.reason}.")
    hist = plot_history(data)
    if hist is not None:
        figs["search-history"] = hist
    else:
        notes.append("No search history: an exhaustive study enumerates the whole space at once and stores only its front.")
    return figs, notes, imp




def write_report(study: optuna.Study, out: str | Path, png_dir: str | Path | None = None) -> Report:
    """Write the HTML report of ``study`` to ``out`` (and PNGs to ``png_dir``); a path that cannot be
    written is a one-line error naming ``--out`` or ``--png``."""
    data = study_data(study)
    figs, notes, imp = figures(data)
    notes = data.notes + notes
    out = Path(out)
    text = render_html(data, figs, notes)

    def write_html(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    write_output("--out", out, write_html)
    rep = Report(path=out, plots=[k for k in PLOT_IDS if k in figs], notes=notes, data=data)
    if png_dir is not None:
        from ._static import write_pngs

        rep.pngs = write_output("--png", png_dir, lambda d: write_pngs(data, d, imp))
    return rep


def _section(title: str, body: str, note: str = "") -> str:
    extra = f"<p class='note'>{note}</p>" if note else ""
    return f"<section><h2>{html.escape(title)}</h2>{extra}<div class='card'>{body}</div></section>"


def render_html(data: StudyData, figs: dict[str, go.Figure], notes: list[str]) -> str:
    info = data.info
    feas = int(data.trials["feasible"].sum())
    summary = info.get("summary") or {}
    meta = [
        f"method <b>{html.escape(data.method)}</b> ({html.escape(data.kind)})",
        "objectives " + ", ".join(f"<b>{html.escape(o)}</b> ({d[:3]})" for o, d in zip(data.objectives, data.directions)),
        f"{len(data.trials)} trials stored, {feas} feasible, {len(data.front)} on the front",
    ]
    if isinstance(summary.get("points"), (int, float)):
        enumerated = (f", {summary['feasible']:,.0f} feasible" if data.kind == "exhaustive"
                      and isinstance(summary.get("feasible"), (int, float)) else "")
        meta.append(f"{summary['points']:,.0f} points in the space{enumerated}")
    cons = info.get("constraints") or {}
    if cons:
        meta.append("constraints " + ", ".join(
            f"{html.escape(str(k))} = {html.escape(fmt_metric(BUDGET_METRICS.get(k, k), v) if isinstance(v, (int, float)) else str(v))}"
            for k, v in cons.items()))
    parts = [f"<h1>cosearch study <code>{html.escape(data.name)}</code></h1>",
             "<p class='meta'>" + "".join(f"<span>{m}</span>" for m in meta) + "</p>"]
    if notes:
        parts.append("".join(f"<p class='note'>{html.escape(n)}</p>" for n in notes))
    if "pareto-front" in figs:
        heading = "Pareto front" if len(data.objectives) > 1 else "Trade-off front"
        parts.append(_section(heading, _div(figs["pareto-front"], "pareto-front"),
                              "Hover a point for its plan. Grey: other feasible trials; red crosses: infeasible ones. "
                              "Whiskers on the front: the 80 % prediction interval of step time, time and cost to train."))
    bm = budget_metric(data)
    if bm is not None and len(data.front):
        parts.append(_section(f"Best configuration per budget ({metric_label(bm)})", budget_table_html(data, best_per_budget(data)),
                              f"For each limit on {metric_label(bm)}, the feasible trial with the best "
                              f"{metric_label(data.front_objectives[0])} within it. Grey under a value: its 80 % "
                              "prediction interval (split-conformal, from held-out errors on published training runs)."))
    if "time-breakdown" in figs:
        parts.append(_section("Where the step time goes (front)", _div(figs["time-breakdown"], "time-breakdown")))
        parts.append(_section("Where the memory goes (front)", _div(figs["memory-breakdown"], "memory-breakdown")))
    if "param-importance" in figs:
        parts.append(_section("Parameter importance", _div(figs["param-importance"], "param-importance")))
    if "search-history" in figs:
        parts.append(_section("Search history", _div(figs["search-history"], "search-history")))
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts.append(f"<p class='note'>Written by cosearch report on {stamp}. Self-contained: plotly.js is embedded.</p>")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width, initial-scale=1'><title>cosearch: {html.escape(data.name)}</title>"
        f"<style>{_CSS}</style><script type='text/javascript' id='plotlyjs'>{get_plotlyjs()}</script></head>"
        f"<body><main>{''.join(parts)}</main>"
        f"<script type='application/json' id='cosearch-report'>{html.escape(json.dumps({'plots': [k for k in PLOT_IDS if k in figs]}))}</script>"
        "</body></html>\n"
    )
