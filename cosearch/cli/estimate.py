"""``cosearch estimate SCENARIO.yaml [--json] [--profile P] [--require-fit]``."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ._console import console
from ..estimate import estimate
from ..frameworks.planin import add_arguments as add_plan_in_arguments, scenario_from_args
from ..model.moe import expert_tp
from ..model.profile import Profile


def profile_and_range(path: str | None) -> tuple[Profile | None, Any]:
    """A :class:`Profile` from a YAML file (as written by ``cosearch calibrate``) and its calibrated range
    (estimate warns outside it), or (None, None) without a file."""
    if not path:
        return None, None
    from ..calibration import read_profile_file

    return read_profile_file(path)


def load_profile(path: str | None) -> Profile | None:
    """A :class:`Profile` from a YAML file (as written by ``cosearch calibrate``), or None."""
    return profile_and_range(path)[0]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("estimate", help="predict step time, memory and cost of one scenario")
    p.add_argument("scenario", nargs="?", help="scenario YAML file (or --megatron-args / --torchtitan-toml)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--profile", help="efficiency profile YAML (from cosearch calibrate)")
    p.add_argument("--require-fit", action="store_true",
                   help=f"exit with code {NO_FIT_EXIT} when the plan does not fit in GPU memory (or its offload tier)")
    add_plan_in_arguments(p)
    p.set_defaults(func=run)


#: Exit code of ``estimate --require-fit`` for a plan that does not fit (2 is bad input, 1 unused).
NO_FIT_EXIT = 3


def no_fit_line(r: dict) -> str:
    """``DOES NOT FIT: 82.3 GiB of 76.1 usable per GPU`` (or the offload tier's), "" when it fits."""
    if r["fits"]:
        return ""
    mem, usable = r.get("memory_gib"), r.get("usable_memory_gib")
    if mem is not None and usable is not None and mem <= usable and r.get("expansion_used_gib"):
        return f"DOES NOT FIT: {_fmt(r['expansion_used_gib'], '.1f')} GiB offloaded per GPU exceeds the expansion tier"
    return f"DOES NOT FIT: {_fmt(mem, '.1f')} GiB of {_fmt(usable, '.1f')} usable per GPU"


def run(args: argparse.Namespace) -> int:
    profile, rng = profile_and_range(args.profile)
    result = estimate(scenario_from_args(args), profile, calibrated_range=rng)
    bad = NO_FIT_EXIT if args.require_fit and not result["fits"] else 0
    if args.json:
        print(json.dumps(result, indent=2))
        if bad:
            print(f"error: {no_fit_line(result)} (--require-fit)", file=sys.stderr)
        return bad
    render(result, console())
    return bad


def _fmt(x: float | None, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def band_text(r: dict, key: str, spec: str = ".3g", unit: str = "", prefix: str = "") -> str:
    """``  (80 % band 17.2-21.9 s)`` for the interval ``r[key]`` of an estimate, or "" without one."""
    band = r.get(key)
    if not band or band[0] is None or band[1] is None:
        return ""
    cov = r.get("interval_coverage") or 0.8
    return f"  ({100 * cov:.0f} % band {prefix}{format(band[0], spec)}-{prefix}{format(band[1], spec)}{unit})"


def cluster_text(r: dict, cl: dict) -> str:
    """``1024 x a100-80gb``, or for an inventory ``64 x h100-sxm + 128 x a100-80gb (pipeline)``."""
    if not r.get("gpus_by_type"):
        return f"{cl['gpus']} x {cl['gpu']}"
    used = " + ".join(f"{n} x {g}" for g, n in r["gpus_by_type"].items() if n)
    return f"{used} ({r['hetero']}; inventory {', '.join(f'{n} {g}' for g, n in cl['inventory'].items())})"


def plan_text(r: dict, pl: dict) -> str:
    pp = "+".join(str(v) for v in r["pp_by_type"].values() if v) if r.get("hetero") == "pipeline" else pl["pp"]
    return (f"tp={pl['tp']} pp={pp} dp={r['dp']} cp={pl['cp']} mb={pl['microbatch']} v={pl['interleave']} "
            f"recompute={pl['recompute']} sp={pl['sequence_parallel']} zero={pl['zero']}"
            + (f" schedule={pl['schedule']}" if pl.get("schedule") else "")
            + (f" ep={pl['ep']} etp={expert_tp(pl.get('etp'), pl['tp'])} dispatcher={pl['moe_dispatcher']}"
               + (" fp8-dispatch" if pl.get("moe_fp8_dispatch") else "")
               + (" grouped-gemm" if pl.get("moe_grouped_gemm") == "grouped" else "") if pl.get("ep", 1) > 1 else ""))


def by_type_table(r: dict) -> Table:
    """GPUs, stages or replicas, layers, micro-batches and memory of each GPU type of an inventory."""
    t = Table(title="by GPU type", title_justify="left")
    for col in ("type", "GPUs", "stages", "replicas", "layers", "micro-batches", "memory GiB"):
        t.add_column(col, justify="left" if col == "type" else "right")
    for g, n in r["gpus_by_type"].items():
        t.add_row(g, str(n), str(r["pp_by_type"][g]), str(r["dp_by_type"][g]), str(r["layers_by_type"][g]),
                  str(r["microbatches_by_type"][g]), _fmt(r["memory_gib_by_type"][g] if n else None, ".1f"))
    return t


def is_moe(r: dict) -> bool:
    """Whether an estimate is of a mixture of experts (fewer active than total parameters)."""
    return r.get("active_params") is not None and r["active_params"] < r["params"]


def tflops_text(r: dict) -> str:
    """``171.3`` model TFLOP/s per GPU; for a MoE also the figure counting all parameters, which other tools
    quote: ``171.3 (active parameters; 1,234.5 counting all parameters)``."""
    model = _fmt(r["model_tflops_per_gpu"], ".1f")
    if not is_moe(r):
        return model
    return f"{model} (active parameters; {_fmt(r['total_param_tflops_per_gpu'], ',.1f')} counting all parameters)"


def print_warnings(r: dict, console: Console) -> None:
    """An estimate's warnings (assumed GPU efficiencies, calibrated range, hidden reductions), one line each."""
    for w in r.get("warnings", []):
        console.print(f"warning: {w}", style="yellow")


def deeppool_rows(r: dict) -> list[tuple[str, str]]:
    """(label, text) rows of an estimate's DeepPool section (burst schedule, idle time, background job)."""
    d = r.get("deeppool")
    if not d:
        return []
    rows = []
    if d["burst"]:
        runs = ", ".join(f"layers {x['layers'][0]}-{x['layers'][1]} dp={x['dp']}" if "layers" in x else f"head dp={x['dp']}"
                         for x in d["schedule"])
        rows.append(("burst schedule", f"{runs or 'none fits'}  (uniform dp={r['dp']}: {_fmt(d['uniform_step_time_s'], '.4g')} s, "
                     f"burst {_fmt(d['burst_speedup'], '.3g')}x; breakdowns are of the uniform plan)"))
    rows.append(("idle GPU time", f"{_fmt(d['idle_gpu_s'], '.4g')} GPU-s per step ({_fmt(100 * r['idle_share'], '.1f')} %)"))
    if d["multiplex"]:
        rows.append(("background job", f"{_fmt(d['background_tokens_per_s'], ',.0f')} tokens/s (interference "
                     f"{_fmt(d['interference'], '.2f')}); cluster total {_fmt(d['total_tokens_per_s'], ',.0f')} tokens/s"))
    return rows


def render(r: dict, console: Console) -> None:
    """Readable breakdown tables of an estimate."""
    sc = r["scenario"]
    pl, cl = sc["plan"], sc["cluster"]
    nofit = no_fit_line(r)
    if nofit:  # first, in red: time and cost below are those of a plan that cannot run
        console.print(Text.assemble((nofit, "bold red"), " (time and cost below are for a plan that cannot run)"))
    console.print(Text.assemble((cluster_text(r, cl), "bold"), f"  {plan_text(r, pl)}"))
    head = Table(show_header=False, box=None)
    head.add_row("step time", f"{_fmt(r['step_time_s'], '.4g')} s" + band_text(r, "step_time_interval_s", ".3g", " s"))
    head.add_row("throughput", f"{_fmt(r['tokens_per_s'], ',.0f')} tokens/s")
    head.add_row("model TFLOP/s per GPU", f"{tflops_text(r)}  (MFU {_fmt(100 * r['mfu'], '.1f')} %)")
    if is_moe(r):  # MoE: active vs total (issue 13)
        head.add_row("parameters", f"{r['params'] / 1e9:,.1f}B total, {r['active_params'] / 1e9:,.1f}B active per token "
                     f"(MFU counts active; ep={pl.get('ep', 1)} etp={pl.get('etp') or pl['tp']})")
    fit = "fits" if r["fits"] else ("DOES NOT FIT", "red")
    head.add_row("memory per GPU", Text.assemble(f"{_fmt(r['memory_gib'], '.1f')} GiB of {_fmt(r['usable_memory_gib'], '.1f')} "
                                                 "usable: ", fit))
    head.add_row("cost per step", f"${_fmt(r['cost_usd_per_step'], ',.2f')}")
    if r["time_to_train_days"] is not None:
        head.add_row("time to train", f"{_fmt(r['time_to_train_days'], ',.1f')} days"
                     + band_text(r, "time_to_train_interval_days", ",.1f", " days"))
        head.add_row("cost to train", f"${_fmt(r['cost_to_train_usd'], ',.0f')}"
                     + band_text(r, "cost_to_train_interval_usd", ",.0f", prefix="$"))
    if r.get("expansion_used_gib"):
        ok = "fits" if r["expansion_fits"] else ("DOES NOT FIT", "red")
        head.add_row("expansion tier per GPU", Text.assemble(f"{_fmt(r['expansion_used_gib'], '.1f')} GiB offloaded: ", ok))
    if r.get("time_to_accuracy_days") is not None:
        head.add_row("time to accuracy", f"{_fmt(r['time_to_accuracy_days'], ',.1f')} days "
                     f"({_fmt(r['steps_to_target'], ',.0f')} steps, statistical efficiency {_fmt(r['statistical_efficiency'], '.2f')})")
        head.add_row("cost to accuracy", f"${_fmt(r['cost_to_accuracy_usd'], ',.0f')}")
    for label, text in deeppool_rows(r):
        head.add_row(label, text)
    cloud = r.get("cloud")
    if cloud:
        head.add_row("rented", f"{cloud['instances']} x {cloud['provider']}/{cloud['instance']} ({cloud['pricing']}, "
                     f"${_fmt(cloud['cluster_usd_per_hour'], ',.2f')}/h, {cloud['region']})")
        head.add_row("interruptions", f"{_fmt(cloud['interruptions_per_hour'], '.3g')}/h expected {_fmt(cloud['expected_interruptions'], ',.0f')}; "
                     f"checkpoint {_fmt(cloud['checkpoint_write_s'], '.3g')} s every {_fmt(cloud['checkpoint_interval_h'], '.3g')} h")
        head.add_row("time P10/P50/P90", " / ".join(f"{_fmt(cloud[f'p{q}_time_to_train_days'], ',.1f')}" for q in (10, 50, 90)) + " days")
        head.add_row("cost P10/P50/P90", " / ".join(f"${_fmt(cloud[f'p{q}_cost_to_train_usd'], ',.0f')}" for q in (10, 50, 90)))
    console.print(head)
    if r.get("gpus_by_type"):
        console.print(by_type_table(r))
    print_warnings(r, console)
    t = Table(title="step time", title_justify="left")
    t.add_column("part"); t.add_column("seconds", justify="right"); t.add_column("share", justify="right")
    total = r["step_time_s"] or 1.0
    for k, v in r["breakdown_s"].items():
        t.add_row(k, _fmt(v, ".4g"), f"{100 * (v or 0) / total:.1f} %")
    console.print(t)
    mt = Table(title="memory per GPU", title_justify="left")
    mt.add_column("part"); mt.add_column("GiB", justify="right")
    for k, v in r["memory_breakdown_gib"].items():
        mt.add_row(k, _fmt(v, ".2f"))
    console.print(mt)
