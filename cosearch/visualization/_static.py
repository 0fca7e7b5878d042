"""Static PNGs of the report's plots with matplotlib (for slides, papers and CI artifacts)."""
from __future__ import annotations

import errno
from pathlib import Path

import numpy as np

from ._breakdown import MEMORY_COLORS, TIME_COLORS, part_name
from ._data import StudyData, fmt_metric, log_axis, metric_label, off_axis
from ._history import running_best
from ._importance import Importances, param_importances


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _format_axis(axis, metric: str) -> None:
    """Plain numbers on log axes, dollars for costs (no '1e6' offset text)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if metric == "trial":
        return
    if "usd" in metric:
        fmt = FuncFormatter(lambda v, _: fmt_metric(metric, v) if v > 0 else "$0")
    else:
        fmt = FuncFormatter(lambda v, _: f"{v:,.4g}")
    if axis.get_scale() == "log":
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_minor_formatter(NullFormatter())
    axis.set_major_formatter(fmt)


def _bar_labels(data: StudyData) -> list[str]:
    f = data.front_for_bars()
    o = data.front_objectives[0]
    return [f"#{int(r['trial'])}\n{fmt_metric(o, r[o])}" for r in f.to_dict("records")]


def pareto_png(data: StudyData, path: Path) -> Path:
    plt = _plt()
    objs = data.front_objectives
    x, y = (objs[0], objs[1]) if len(objs) > 1 else ("trial", objs[0])
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    df, feas, front = data.trials, data.feasible, data.front
    others = feas.drop(index=front.index)
    inf = df[~df["feasible"]]
    if len(inf) and x in inf:
        ax.scatter(inf[x], inf[y], marker="x", s=14, color="#d62728", alpha=0.3, label=f"infeasible ({len(inf)})")
    if len(others):
        ax.scatter(others[x], others[y], s=14, color="#888888", alpha=0.5, label=f"feasible ({len(feas)})")
    if len(front):
        if len(objs) >= 3:
            sc = ax.scatter(front[x], front[y], s=60, c=front[objs[2]], cmap="viridis", edgecolors="black", zorder=3,
                            label=f"Pareto front ({len(front)})")
            fig.colorbar(sc, ax=ax, label=metric_label(objs[2]))
        else:
            ax.step(front[x], front[y], where="post", color="#1f77b4", lw=1.2, zorder=2)
            ax.scatter(front[x], front[y], s=60, color="#1f77b4", edgecolors="black", zorder=3,
                       label=f"Pareto front ({len(front)})")
    only_x, only_y = off_axis(front, x, y)  # no value on one axis (a cost without a price): a line, not nothing
    for i, v in enumerate(only_x):
        ax.axvline(v, ls=":", color="#d62728", label=f"front, {metric_label(y)} unknown" if i == 0 else None)
    for i, v in enumerate(only_y):
        ax.axhline(v, ls=":", color="#d62728", label=f"front, {metric_label(x)} unknown" if i == 0 else None)
    ref = feas if len(feas) else df
    for col, setter, lim in ((x, ax.set_xscale, ax.set_xlim), (y, ax.set_yscale, ax.set_ylim)):
        if col != "trial" and col in ref and len(ref):
            v = ref[col].to_numpy(dtype=float)
            v = v[np.isfinite(v)]
            if len(v) == 0:
                continue
            if log_axis(v):
                setter("log")
                lim(v.min() / 1.15, v.max() * 1.15)
            else:
                pad = 0.06 * (v.max() - v.min()) or 0.1 * abs(v.max()) or 1.0
                lim(v.min() - pad, v.max() + pad)
    _format_axis(ax.xaxis, x)
    _format_axis(ax.yaxis, y)
    ax.set_xlabel(metric_label(x))
    ax.set_ylabel(metric_label(y))
    ax.set_title(f"{data.name}: Pareto front" if len(data.objectives) > 1 else f"{data.name}: {objs[0]} trade-off")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _stacked(data: StudyData, path: Path, cols: list[str], colors: dict, ylabel: str, title: str, usable: bool) -> Path:
    plt = _plt()
    f = data.front_for_bars()
    labels = _bar_labels(data)
    xs = np.arange(len(f))
    fig, ax = plt.subplots(figsize=(max(7, 0.55 * len(f) + 3), 5), dpi=120)
    bottom = np.zeros(len(f))
    for col in cols:
        vals = f[col].fillna(0.0).to_numpy(dtype=float)
        name = part_name(col)
        ax.bar(xs, vals, bottom=bottom, color=colors.get(name), label=name, width=0.7)
        bottom += vals
    if usable and "usable_memory_gib" in f:
        ax.scatter(xs, f["usable_memory_gib"], marker="_", s=500, color="black", linewidths=2.5, label="usable HBM", zorder=3)
    ax.set_xticks(xs, labels, fontsize=7, rotation=0 if len(f) <= 12 else 90)
    ax.set_ylabel(ylabel)
    ax.set_xlabel(f"front configuration (trial, {metric_label(data.front_objectives[0])})")
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=min(5, len(cols) + usable), loc="upper center", bbox_to_anchor=(0.5, -0.2 if len(f) <= 12 else -0.35))
    fig.tight_layout()
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def importance_png(data: StudyData, path: Path, imp: Importances) -> Path | None:
    if not imp.ok:
        return None
    plt = _plt()
    objs = [o for o in data.objectives if imp.values.get(o)]
    first = imp.values[objs[0]]
    order = sorted({p for o in objs for p in imp.values[o]}, key=lambda p: first.get(p, 0.0))
    fig, ax = plt.subplots(figsize=(8, max(3, 0.35 * len(order) * len(objs) + 1.2)), dpi=120)
    h = 0.8 / len(objs)
    ys = np.arange(len(order))
    for i, o in enumerate(objs):
        ax.barh(ys + (i - (len(objs) - 1) / 2) * h, [imp.values[o].get(p, 0.0) for p in order], height=h, label=metric_label(o))
    ax.set_yticks(ys, order, fontsize=8)
    ax.set_xlabel("importance (sums to 1 per objective)")
    ax.set_title(f"Parameter importance ({imp.evaluator}, {imp.n_trials} feasible trials)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def history_png(data: StudyData, path: Path) -> Path | None:
    if data.kind == "exhaustive":
        return None
    plt = _plt()
    df = data.trials.sort_values("trial")
    k = len(data.objectives)
    fig, axes = plt.subplots(k, 1, figsize=(8, 2.6 * k + 0.8), dpi=120, sharex=True, squeeze=False)
    feas = df["feasible"].to_numpy()
    for ax, o, d in zip(axes[:, 0], data.objectives, data.directions):
        vals = df[o].to_numpy(dtype=float)
        ax.scatter(df["trial"][feas], vals[feas], s=8, color="#1f77b4", alpha=0.45, label="feasible trial")
        if (~feas).any():
            ax.scatter(df["trial"][~feas], vals[~feas], s=8, marker="x", color="#d62728", alpha=0.3, label="infeasible trial")
        ax.step(df["trial"], running_best(vals, feas, d), where="post", color="#d62728", lw=2, label="best so far")
        fv = vals[feas & np.isfinite(vals)]
        if len(fv):
            if log_axis(fv):
                ax.set_yscale("log")
                ax.set_ylim(fv.min() / 1.2, fv.max() * 1.2)
            else:
                pad = 0.06 * (fv.max() - fv.min()) or 0.1 * abs(fv.max()) or 1.0
                ax.set_ylim(fv.min() - pad, fv.max() + pad)
        _format_axis(ax.yaxis, o)
        ax.set_ylabel(metric_label(o))
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8, loc="upper right")
    axes[0, 0].set_title(f"{data.name}: search history")
    axes[-1, 0].set_xlabel("trial")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_pngs(data: StudyData, out_dir: str | Path, imp: Importances | None = None) -> list[Path]:
    """pareto.png, time_breakdown.png, memory_breakdown.png, importance.png, history.png (those that apply)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():  # mkdir would say "File exists"
        raise NotADirectoryError(errno.ENOTDIR, "exists and is not a folder", str(out))
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path | None] = []
    if len(data.front):
        written.append(pareto_png(data, out / "pareto.png"))
        written.append(_stacked(data, out / "time_breakdown.png", data.time_parts(), TIME_COLORS, "seconds per optimizer step",
                                f"{data.name}: step time of the front's configurations", False))
        written.append(_stacked(data, out / "memory_breakdown.png", data.memory_parts(), MEMORY_COLORS, "GiB per GPU",
                                f"{data.name}: memory per GPU of the front's configurations", True))
    written.append(importance_png(data, out / "importance.png", imp or param_importances(data)))
    written.append(history_png(data, out / "history.png"))
    return [p for p in written if p is not None]
