"""``cosearch run | best | pareto | studies``: optimization studies from the command line.

Thin layer over :mod:`cosearch.study`: parse, call, print (progress bar and tables with rich).
Bad input (malformed space, unknown sampler or study, empty feasible region) is a one-line
``error: ...`` with exit code 2; ``best`` with nothing under the limits exits 1.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ._console import console
from ..errors import CosearchError

#: Points per second assumed when an exhaustive search is weighed against --timeout (one core
#: does 1-2 M; the low end, so a refusal is never wrong by much).
EXHAUSTIVE_POINTS_PER_S = 1_000_000


def register(sub: argparse._SubParsersAction) -> None:
    from ..samplers import METHODS

    p = sub.add_parser("run", help="search a space: run (or resume) a study and show its Pareto front")
    p.add_argument("space", help="search space YAML file (see searchspaces/)")
    p.add_argument("--study", required=True, help="study name; the same name resumes the study")
    _storage_arg(p)
    p.add_argument("--sampler", default="auto", help=f"search method: auto, {', '.join(METHODS)} "
                   "(default auto: an existing study's own method; for a new one exhaustive for a finite space up "
                   "to 1e7 points, else nsga2, or tpe for one objective)")
    p.add_argument("--trials", type=int, default=1000, help="trials the study should hold in total (default 1000; "
                   "ignored by exhaustive)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--batch-size", type=int, default=None, help="trials asked per vectorized evaluation (default: per sampler)")
    p.add_argument("--timeout", type=float, default=None, help="stop after this many seconds from the start of the command (checked between batches); "
                   "an exhaustive search estimated to take longer is refused (auto picks a sampler instead)")
    p.add_argument("--rows", type=int, default=15, help="front rows to print (default 15)")
    p.add_argument("--profile", default=None, help="efficiency profile YAML from `cosearch calibrate` (default: the "
                   "shipped profile fitted on published runs); a study keeps the profile it started with")
    p.set_defaults(func=run_command)

    from ..search.space import OBJECTIVE_METRICS

    p = sub.add_parser("best", help="best feasible configuration of a study under a budget (no re-run)",
                       description="Best feasible configuration of a study on a metric under budgets. A sampled study "
                       "answers from its stored trials; an exhaustive study is exact for every metric and budget "
                       "(one its stored front does not cover is answered by enumerating the space again).")
    p.add_argument("--study", required=True, help="name of the study to query (see `cosearch studies`)")
    _storage_arg(p)
    p.add_argument("--objective", default=None, metavar="METRIC",
                   help=f"metric to optimize (default: the study's first objective); one of: {', '.join(OBJECTIVE_METRICS)}")
    p.add_argument("--max-cost-usd", type=float, default=None, help="upper bound on cost_to_train_usd")
    p.add_argument("--max-gpus", type=float, default=None, help="upper bound on the GPU count")
    p.add_argument("--max-days", type=float, default=None, help="upper bound on time_to_train_days")
    p.add_argument("--max-days-high", type=float, default=None, help="upper bound on time_to_train_high_days (the "
                   "pessimistic end of the 80 %% prediction interval)")
    p.add_argument("--max-cost-usd-high", type=float, default=None, help="upper bound on cost_to_train_high_usd (the "
                   "pessimistic end of the 80 %% prediction interval)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=best_command)

    p = sub.add_parser("pareto", help="Pareto front of a study (table, CSV, plot)")
    p.add_argument("--study", required=True, help="name of the study to show (see `cosearch studies`)")
    _storage_arg(p)
    p.add_argument("--csv", default=None, help="write the front to this CSV file")
    p.add_argument("--parquet", default=None, help="write the front to this Parquet file")
    p.add_argument("--plot", default=None, help="write a plot: FILE.png (matplotlib) or FILE.html (plotly)")
    p.add_argument("--rows", type=int, default=30, help="front rows to print (default 30)")
    p.set_defaults(func=pareto_command)

    p = sub.add_parser("studies", help="studies in a storage with counts and best values")
    _storage_arg(p)
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(func=studies_command)


def _storage_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage", default=None, help="journal file path or optuna RDB URL (sqlite:///x.db, "
                   "postgresql://...); default ./cosearch_studies.journal")


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        if math.isnan(v):
            return "-"
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.4g}"
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return str(v)


# ------------------------------------------------------------------------------------- run
def check_rows(rows: int) -> None:
    if rows < 1:
        raise CosearchError("--rows", f"must be 1 or more (got {rows})")


def check_run_args(args: argparse.Namespace) -> str:
    """The flags of `run` that need no file or storage, checked (before the study is opened: its errors come after,
    and `run --workers` checks them before a worker starts); returns the --sampler asked for."""
    from ..samplers import check_method
    from .worker import budget_batch

    check_rows(args.rows)
    asked = check_method(args.sampler)
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise CosearchError("--timeout", f"must be a positive number of seconds (got {args.timeout})")
    if asked != "exhaustive" and args.trials < 1:
        raise CosearchError("--trials", f"must be a positive integer (got {args.trials})")
    budget_batch(args.batch_size)
    return asked


def run_command(args: argparse.Namespace, storage: Any = None) -> int:
    """`cosearch run` in this process; ``storage``: the opened ``--storage`` when the caller has it (`--workers`)."""
    from ..search.space import load_space
    from ..model.profile import DEFAULT_PROFILE
    from ..study import _as_storage, pareto_front, resume_method, run_study, why_nothing
    from .estimate import profile_and_range

    t_start = time.monotonic()  # --timeout counts from here: reading the space is part of the run
    asked = check_run_args(args)
    space = load_space(args.space)
    profile, calibrated = profile_and_range(args.profile)
    profile = profile or DEFAULT_PROFILE
    if storage is None:
        storage = _as_storage(args.storage)  # once: the stored method (auto) and the run read it
    method = resume_method(asked, space, args.study, storage)
    timeout = None if args.timeout is None else max(0.0, args.timeout - (time.monotonic() - t_start))
    if method == "exhaustive" and timeout is not None and space.size / EXHAUSTIVE_POINTS_PER_S > timeout:
        if asked != "auto":
            raise CosearchError("--timeout", f"exhaustive search over {space.size:,.0f} points takes about "
                                f"{space.size / EXHAUSTIVE_POINTS_PER_S:.2g} s, more than the {args.timeout:g} s allowed; "
                                "raise --timeout or use a sampler")
        method = "nsga2" if len(space.objectives) > 1 else "tpe"
    size = f"{space.size:,.0f} points" if space.size < 1e15 else f"{space.size:.3g} points" if math.isfinite(space.size) else \
        "continuous"
    console().print(f"space {args.space}: {size} in {len(space.dims)} dimensions; method {method}")
    progress_console = console(stderr=True)
    unit = "points" if method == "exhaustive" else "trials"
    label = f"{args.study} {method}".replace("{", "{{").replace("}", "}}")  # a format string: braces literal
    progress = Progress(TextColumn(label, style="bold", markup=False), BarColumn(), MofNCompleteColumn(),
                        TextColumn(unit), TextColumn("{task.fields[feas]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                        console=progress_console, transient=False, disable=not progress_console.is_terminal)
    task = None

    def callback(ev: dict) -> None:
        nonlocal task
        feas = f"feasible {ev['feasible']}" if ev.get("feasible") is not None else ""
        if task is None:
            task = progress.add_task("run", total=ev["total"], feas=feas)
        progress.update(task, completed=ev["done"], total=ev["total"], feas=feas)

    budget = _shared_budget(args, method)
    try:
        with progress:
            res = run_study(space, args.study, storage, sampler=method, n_trials=args.trials, seed=args.seed,
                            batch_size=args.batch_size, callback=callback, timeout=timeout, profile=profile,
                            budget=budget)
    except KeyboardInterrupt:  # run_study removed the study if it created it and stored nothing
        print(f"interrupted: what was evaluated is saved in study {args.study!r}; run the same command to continue",
              file=sys.stderr)
        return 130
    finally:
        if budget is not None:
            budget.close()
    if budget is not None:
        res.n_new = budget.granted  # this process's trials (run_study counts every writer's)
    elif res.kind != "exhaustive":  # with a budget, the budget stored the target already
        # --trials as the study's target, as `run --workers` stores it, so that a `cosearch worker` started later on
        # this study knows where to stop (docs/scale-out.md); an exhaustive study has no trial count
        from ..scaleout import set_target

        set_target(res.study, args.trials)
    out = console()
    s = res.summary
    if res.kind == "exhaustive":
        out.print(Text.assemble((args.study, "bold"), f": exhaustive over {s.get('points', 0):,} points in "
                                f"{s.get('elapsed_s', 0):.2f} s ({s.get('feasible', 0):,} feasible); stored {res.n_trials} "
                                "configurations (the front over the objectives and the budgeted metrics "
                                f"{', '.join(s.get('front_metrics') or [])}, so that `best` answers budgets exactly; the "
                                "table below keeps those on the objectives' front)"))
    else:
        w = getattr(args, "workers_run", None)
        if isinstance(w, dict) and res.n_new == 0:  # the workers did the run; this call only reads it
            rate = w["new"] / w["elapsed_s"] if w["elapsed_s"] > 0 else 0.0
            done = f"{w['new']} new by {w['workers']} workers, {rate:,.0f}/s"
        else:
            done = f"{res.n_new} new, {res.trials_per_s:,.0f}/s"
        out.print(Text.assemble((args.study, "bold"), f": {res.n_trials} trials ({done}), "
                                f"{res.n_feasible} feasible; sampler {method}"))
    front = pareto_front(res.study)
    if front.empty:  # none feasible, or none with a value of the objectives (a cost where no GPU has a price)
        out.print(why_nothing(res.study) if res.n_feasible else
                  f"no feasible configuration found in {res.n_trials} trials of study {args.study!r}")
        return 1
    print_front(out, front, res.study.user_attrs["cosearch"]["objectives"], args.rows)
    if calibrated is not None:
        _warn_outside_range(res.study, front, calibrated)
    return 0


def _shared_budget(args: argparse.Namespace, method: str) -> Any:
    """For a sampled (optuna) run, the study's shared trial budget (a :class:`cosearch.scaleout.TrialBudget`, as
    `cosearch worker` takes it): two runs on one study, or a worker joining a run, end with exactly --trials
    evaluated trials instead of overshooting by a batch each. A :class:`cosearch.scaleout.SharedBudget`: run_study
    makes the budget (and stores --trials as the study's target) once it has opened the study, so the run opens and
    checks it once. None for exhaustive and scipy methods (one process)."""
    from ..samplers import OPTUNA_SAMPLERS

    if method not in OPTUNA_SAMPLERS:
        return None
    from ..scaleout import SharedBudget, storage_kind
    from ..storages import storage_file
    from .worker import _storage_value

    url = _storage_value(args.storage)
    if storage_kind(url) == "sqlite" and storage_file(url) is None:
        return None  # in-memory SQLite: no other process can reach the study
    return SharedBudget(url, args.trials)


def _warn_outside_range(study: Any, front: Any, calibrated: Any) -> None:
    """Say (on stderr) when front configurations lie outside the range the profile was fitted on."""
    from ..calibration import range_warnings
    from ..scenario import parse_scenario

    outside: dict[str, int] = {}
    outside_example: dict[str, str] = {}
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    for n in front["trial"]:  # one summary line per field below, not a log line per point
        t = trials[int(n)]
        for msg in range_warnings(calibrated, parse_scenario(t.user_attrs["scenario"]),
                                  t.user_attrs["metrics"].get("params"), log=False):
            key = msg.split(" ")[0] if not msg.startswith("model size") else "model size"
            outside[key] = outside.get(key, 0) + 1
            outside_example.setdefault(key, msg)
    for key, n in outside.items():
        print(f"warning: {n} of {len(front)} front configurations extrapolate the calibrated profile in {key} "
              f"({outside_example[key]})", file=sys.stderr)


_SCENARIO_COLS = ("model", "cloud.instance", "cloud.pricing", "cluster.gpu", "cluster.network_gbps", "cluster.nvlink_gbps", "cluster.hbm_gib",
                  "plan.tp", "plan.pp", "plan.dp", "plan.cp", "plan.microbatch", "plan.interleave", "plan.schedule",
                  "plan.recompute", "plan.sequence_parallel", "plan.zero", "training.global_batch", "training.precision")


#: Scenario columns of an inventory (several GPU types): how they combine, what there is, what the plan uses.
_INVENTORY_COLS = ("plan.hetero", "cluster.inventory.", "plan.gpus_by_type.")


def _column_name(c: str) -> str:
    """The table header of a scenario column: its last part (``have``/``use`` before an inventory's GPU id)."""
    if c.startswith("cluster.inventory."):
        return "have " + c.rsplit(".", 1)[1]
    if c.startswith("plan.gpus_by_type."):
        return "use " + c.rsplit(".", 1)[1]
    return c.split(".")[-1]


#: Metrics with a stored 80 % prediction interval: metric -> (low, high) metric names.
BANDS = {
    "step_time_s": ("step_time_low_s", "step_time_high_s"),
    "time_to_train_days": ("time_to_train_low_days", "time_to_train_high_days"),
    "cost_to_train_usd": ("cost_to_train_low_usd", "cost_to_train_high_usd"),
}


def _band(m: Any, key: str) -> str:
    """``lo-hi`` of the stored prediction interval of metric ``key`` (a mapping or a front row), or ""."""
    lo, hi = (m.get(k) for k in BANDS.get(key, ("", "")))
    if lo is None or hi is None or (isinstance(lo, float) and math.isnan(lo)) or (isinstance(hi, float) and math.isnan(hi)):
        return ""
    return f"{_fmt(float(lo))}-{_fmt(float(hi))}"


def print_front(out: Console, front: Any, objectives: Sequence[str], rows: int) -> None:
    """The front as a table: objectives, the 80 % band of the first objective that has one (else of time to train,
    else of step time), key metrics, plan."""
    cols = ["trial"] + list(objectives) + [c for c in ("mfu", "memory_gib", "gpus") if c not in objectives]
    banded = [c for c in objectives if c in BANDS] + ["time_to_train_days", "step_time_s"]
    band_of = next((k for k in banded if k in front.columns and BANDS[k][0] in front.columns
                    and front[BANDS[k][0]].notna().any()), None)
    if "p90_time_to_train_days" in front.columns and "p90_time_to_train_days" not in objectives:
        cols.insert(len(objectives) + 1, "p90_time_to_train_days")
    varying = [c for c in _SCENARIO_COLS if c in front.columns and front[c].astype(str).nunique() > 1
               or c in ("cluster.gpu", "plan.tp", "plan.pp") and c in front.columns]
    varying += [c for c in front.columns if c.startswith(_INVENTORY_COLS)]  # hook: GPU inventories (cosearch.inventory)
    t = Table(title=f"Pareto front ({len(front)} configurations" + (f", first {rows}" if len(front) > rows else "") + ")",
              title_justify="left")
    band_at = len(objectives) + 1
    if band_of is not None:
        cols.insert(band_at, "band")
    for c in cols + varying:
        name = f"{band_of} 80 % band" if c == "band" else _column_name(c)
        t.add_column(name, justify="right" if c not in ("model", "cluster.gpu", "plan.recompute", "plan.schedule",
                                                        "cloud.instance", "cloud.pricing") else "left")
    for _, r in front.head(rows).iterrows():
        t.add_row(*[(_band(r, band_of) or "-") if c == "band" else _fmt(r.get(c)) for c in cols + varying])
    out.print(t)


# ------------------------------------------------------------------------------------- best
def best_command(args: argparse.Namespace) -> int:
    from ..study import best, load_study, why_nothing
    from ..study_queries import _LIMITS

    study = load_study(args.study, args.storage)
    kw = {"objective": args.objective, **{k: getattr(args, k) for k in _LIMITS}}  # option dests are the _LIMITS keys
    res = best(study, **kw)
    if res is None:
        print(why_nothing(study, **kw), file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    c = console()
    limits = ", ".join(f"{k} {v:g}" for k, v in res["limits"].items()) or "no limits"
    c.print(Text.assemble((f"best {res['objective']}", "bold"), f" ({res['direction']}) in study {res['study']!r} "
                          f"under {limits}: ", (_fmt(res["value"]), "bold"),
                          " (" + (f"trial {res['trial']}" if res["trial"] is not None else "not a stored trial")
                          + (f"; {res['source']}" if res.get("source") else "") + ")"))
    m = res["metrics"]
    t = Table(show_header=False, box=None)
    for key in ("step_time_s", "mfu", "tokens_per_s", "memory_gib", "gpus", "time_to_train_days", "cost_to_train_usd",
                "energy_to_train_mwh", "p90_time_to_train_days", "p90_cost_to_train_usd", "time_to_accuracy_days",
                "cost_to_accuracy_usd"):
        if m.get(key) is None and (key in res["values"] or key == "cost_to_train_usd" and m.get("time_to_train_days") is not None):
            t.add_row(key, "- (unknown: no price for this GPU)" if "cost" in key else "- (no value)")
        elif m.get(key) is not None:
            band = _band(m, key)
            t.add_row(key, _fmt(m[key]) + (f"  (80 % band {band})" if band else ""))
    c.print(t)
    c.print("scenario", style="bold")
    import yaml

    c.print(yaml.safe_dump(res["scenario"], sort_keys=False).rstrip())
    return 0


# ------------------------------------------------------------------------------------- pareto
def pareto_command(args: argparse.Namespace) -> int:
    from .._files import refuse_overwrite, write_output
    from ..storages import storage_file
    from ..study import load_study, pareto_front, study_info, why_nothing
    from ..study_queries import unfinished_note

    check_rows(args.rows)

    kept = {"study's storage": storage_file(args.storage)}
    for flag in ("--csv", "--parquet", "--plot"):
        refuse_overwrite(flag, getattr(args, flag[2:]), kept)
    if args.csv and args.parquet:
        refuse_overwrite("--parquet", args.parquet, {"--csv output": args.csv})
    study = load_study(args.study, args.storage)
    info = study_info(study)
    front = pareto_front(study)
    note = unfinished_note(study)
    if note:
        print(f"warning: {note}", file=sys.stderr)
    if args.plot:
        suffix = Path(args.plot).suffix.lower()
        if suffix not in (".png", ".html"):
            raise CosearchError("--plot", f"give a .png or .html file (got {args.plot!r})")
    c = console()
    if front.empty:  # none feasible, or none with a value of the objectives
        print(why_nothing(study), file=sys.stderr)
        return 1
    for flag, path, write in (("--csv", args.csv, lambda p: front.to_csv(p, index=False)),
                              ("--parquet", args.parquet, lambda p: front.to_parquet(p, index=False)),
                              ("--plot", args.plot, lambda p: plot_front(study, info, front, p))):
        if path:
            write_output(flag, path, write)
    print_front(c, front, info["objectives"], args.rows)
    for what, path in (("csv", args.csv), ("parquet", args.parquet), ("plot", args.plot)):
        if path:
            c.print(f"wrote {what}: {path}")
    return 0


def _axes(objectives: Sequence[str]) -> tuple[str, str]:
    if len(objectives) >= 2:
        return objectives[0], objectives[1]
    other = "cost_to_train_usd" if objectives[0] != "cost_to_train_usd" else "time_to_train_days"
    return objectives[0], other


def plot_front(study: Any, info: dict, front: Any, path: str) -> None:
    """Scatter of every feasible stored trial (grey) and the front (highlighted) on the first two
    objectives (for one objective: against cost, or time when cost is the objective). A front point
    without a value on one axis (the cost on a GPU without a price) is a dotted line at the other."""
    import numpy as np

    from ..study import feasible_trials
    from ..visualization._data import off_axis

    xk, yk = _axes(info["objectives"])
    feas = feasible_trials(study)
    pts = [(t.user_attrs["metrics"].get(xk), t.user_attrs["metrics"].get(yk)) for t in feas]
    pts = np.array([p for p in pts if p[0] is not None and p[1] is not None], dtype=float).reshape(-1, 2)
    both = front[[xk, yk]].notna().all(axis=1)
    fr = front.loc[both, [xk, yk]].astype(float).sort_values(xk)
    hover = [f"trial {int(t)}" for t in front.loc[fr.index, "trial"]]
    only_x, only_y = off_axis(front, xk, yk)
    title = f"{study.study_name}: {len(front)} on the front of {len(feas)} feasible"
    if only_x or only_y:
        title += f" (dotted: {len(only_x) + len(only_y)} without a value of {yk if only_x else xk})"
    if path.lower().endswith(".html"):
        import plotly.graph_objects as go

        fig = go.Figure()
        fig.add_trace(go.Scattergl(x=pts[:, 0], y=pts[:, 1], mode="markers", name="feasible",
                                   marker=dict(color="lightgray", size=5)))
        fig.add_trace(go.Scatter(x=fr[xk], y=fr[yk], mode="lines+markers", name="Pareto front",
                                 line=dict(shape="hv"), text=hover, marker=dict(size=8)))
        for v in only_x:
            fig.add_vline(x=v, line_dash="dot", line_color="firebrick", annotation_text=f"front, no {yk}")
        for v in only_y:
            fig.add_hline(y=v, line_dash="dot", line_color="firebrick", annotation_text=f"front, no {xk}")
        fig.update_layout(title=title, xaxis_title=xk, yaxis_title=yk, template="plotly_white")
        fig.write_html(path, include_plotlyjs=True)
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5), dpi=120)
    if len(pts):
        ax.scatter(pts[:, 0], pts[:, 1], s=8, c="lightgray", label="feasible trials")
    ax.step(fr[xk], fr[yk], where="post", color="C1", lw=1)
    ax.scatter(fr[xk], fr[yk], s=30, c="C1", label="Pareto front", zorder=3)
    for i, v in enumerate(only_x):
        ax.axvline(v, ls=":", color="C3", label=f"front, no {yk}" if i == 0 else None)
    for i, v in enumerate(only_y):
        ax.axhline(v, ls=":", color="C3", label=f"front, no {xk}" if i == 0 else None)
    ax.set_xlabel(xk)
    ax.set_ylabel(yk)
    ax.set_title(title, fontsize=10)
    if len(pts) and (pts > 0).all() and pts[:, 0].max() / max(pts[:, 0].min(), 1e-300) > 30:
        ax.set_xscale("log")
    if len(pts) and (pts > 0).all() and pts[:, 1].max() / max(pts[:, 1].min(), 1e-300) > 30:
        ax.set_yscale("log")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ------------------------------------------------------------------------------------- studies
def studies_command(args: argparse.Namespace) -> int:
    from ..study import list_studies

    rows = list_studies(args.storage)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    c = console()
    if not rows:
        c.print("no studies in this storage")
        return 0
    t = Table(title="studies")
    for col in ("study", "kind", "method", "trials", "feasible", "running", "best"):
        t.add_column(col, justify="right" if col in ("trials", "feasible", "running") else "left")
    for r in rows:
        best = "  ".join(f"{k}={_fmt(v)}" for k, v in r["best"].items())
        kind = r["kind"] + (" (unfinished)" if r.get("unfinished") else "")
        t.add_row(r["study"], kind, str(r["method"] or "-"), str(r["trials"]), str(r["feasible"]), str(r["running"]), best)
    c.print(t)
    return 0
