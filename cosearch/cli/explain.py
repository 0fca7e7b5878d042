"""``cosearch explain SCENARIO.yaml [--profile P] [--json]``: breakdowns, limiter, best change."""
from __future__ import annotations

import argparse
import json

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ._console import console
from ..errors import CosearchError
from ..explain import explain
from .estimate import (_fmt, band_text, cluster_text, deeppool_rows, is_moe, plan_text, print_warnings, profile_and_range,
                       tflops_text)

_BLOCKS = " ▏▎▍▌▋▊▉█"
_BAR_WIDTH = 32
_LIMITER_STYLE = {"compute": "green", "communication": "yellow", "bubble": "magenta", "memory": "red"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explain", help="where the step time and memory go, what limits the plan, what to change")
    p.add_argument("scenario", help="scenario YAML file")
    p.add_argument("--profile", help="efficiency profile YAML (from cosearch calibrate)")
    p.add_argument("--top", type=int, default=5, help="number of alternative changes to list (default 5)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise CosearchError("--top", f"must be 1 or more (got {args.top})")
    profile, rng = profile_and_range(args.profile)
    result = explain(args.scenario, profile, top=args.top, calibrated_range=rng)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    render(result, console())
    return 0


def bar(fraction: float, width: int = _BAR_WIDTH, style: str = "cyan") -> Text:
    """A horizontal bar of ``fraction`` (0..1; more is drawn full and marked) of ``width`` cells."""
    over = fraction > 1.0
    f = min(max(fraction, 0.0), 1.0) * width
    full = int(f)
    rest = _BLOCKS[int(round((f - full) * 8))] if full < width else ""
    text = Text("█" * full + rest.strip(), style="red" if over else style)
    if over:
        text.append(" ▶", style="bold red")
    return text


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def step_change(gain: float) -> str:
    """Change of the step time for a relative ``gain`` (0.05 = 5 % faster): ``-5.0 %``, ``+0.2 %``
    for a slower change, ``0.0 %`` when it rounds to nothing."""
    pct = -100.0 * gain
    return "0.0 %" if round(pct, 1) == 0 else f"{pct:+.1f} %"


def _change_row(t: Table, e: dict) -> None:
    t.add_row(
        e["label"], e["kind"], f"{e['step_time_s']:.4g} s", Text(step_change(e["gain"]), style="green" if e["gain"] > 0 else "red"),
        f"{e['speedup']:.3f}x", f"{e['memory_gib']:.1f}", f"{100 * e['mfu']:.1f} %",
    )


def render(x: dict, console: Console) -> None:
    """Readable tables with bars for :func:`cosearch.explain.explain`'s result."""
    r = x["estimate"]
    sc = r["scenario"]
    pl, cl = sc["plan"], sc["cluster"]
    console.print(Text.assemble((cluster_text(r, cl), "bold"), f"  {plan_text(r, pl)}"))
    console.print(
        f"step {r['step_time_s']:.4g} s{band_text(r, 'step_time_interval_s', '.3g', ' s')}   "
        f"{r['tokens_per_s']:,.0f} tokens/s   MFU {100 * r['mfu']:.1f} %   "
        f"${_fmt(r['cost_usd_per_step'], ',.2f')} per step"
        + (f"   {r['time_to_train_days']:,.1f} days, ${_fmt(r['cost_to_train_usd'], ',.0f')} to train"
           if r["time_to_train_days"] else "")
    )

    if is_moe(r):
        console.print(f"model TFLOP/s per GPU: {tflops_text(r)}")
    for label, text in deeppool_rows(r):  # DeepPool burst / multiplexing (cosearch.model.burst)
        console.print(f"{label}: {text}")
    print_warnings(r, console)
    t = Table(title="where the step time goes", title_justify="left", title_style="bold")
    t.add_column("part"); t.add_column("seconds", justify="right"); t.add_column("share", justify="right")
    t.add_column("", min_width=_BAR_WIDTH, no_wrap=True)
    links = x["links"]
    unused = [p["part"] for p in x["time"]["parts"] if p["seconds"] == 0.0]
    for p in x["time"]["parts"]:
        if p["seconds"] == 0.0:
            continue
        name = p["part"] + (f" ({links[p['part']]})" if p["part"] in links and p["seconds"] > 0 else "")
        t.add_row(name, f"{p['seconds']:.4g}", _pct(p["share"]), bar(p["share"]))
    t.add_row(Text("total", style="bold"), Text(f"{x['time']['total_s']:.4g}", style="bold"), "100.0 %", "")
    if unused:
        t.caption = f"zero in this plan: {', '.join(unused)}"
        t.caption_justify = "left"
    console.print(t)

    m = x["memory"]
    mt = Table(title=f"where the memory goes (per GPU, against {m['usable_gib']:.1f} GiB usable HBM)", title_justify="left", title_style="bold")
    mt.add_column("part"); mt.add_column("GiB", justify="right"); mt.add_column("of usable", justify="right")
    mt.add_column("", min_width=_BAR_WIDTH, no_wrap=True)
    for p in m["parts"]:
        share = p["share_of_usable"]
        mt.add_row(p["part"], f"{p['gib']:.2f}", "-" if share is None else _pct(share),
                   bar(1.0 if share is None else share, style="blue"))
    total_frac = m["total_gib"] / m["usable_gib"] if m["usable_gib"] > 0 else float("inf")
    fit = Text("fits", style="green") if m["fits"] else Text("DOES NOT FIT", style="bold red")
    mt.add_row(Text("total", style="bold"), Text(f"{m['total_gib']:.2f}", style="bold"),
               _pct(total_frac) if m["usable_gib"] > 0 else "-",
               bar(total_frac, style="green" if m["fits"] else "red") + Text("  ") + fit)
    console.print(mt)

    lim = x["limits"]
    style = _LIMITER_STYLE.get(lim["limiter"], "bold")
    console.print(Text.assemble(("limited by: ", "bold"), (lim["limiter"], f"bold {style}"), f" - {lim['reason']}"))
    shares = "  ".join(f"{k} {100 * v:.1f} %" for k, v in lim["shares"].items())
    console.print(f"  time by limiter: {shares}")
    o = lim["largest_overhead"]
    console.print(f"  largest overhead: {o['label']}" + (f" over {o['link']}" if "link" in o else "")
                  + f", {o['seconds']:.3g} s ({_pct(o['share'])})")
    if m["fits"]:
        console.print(f"  memory headroom: {lim['memory_headroom_gib']:.1f} GiB")

    s = x["suggestion"]
    if s is None:
        console.print(Text.assemble(("best change:", "bold"), f" none of {x['candidates_evaluated']} neighbouring plans "
                                    f"and upgrades is feasible and faster by {100 * 0.005:.1f} % or more"))
        return
    console.print(Text.assemble(
        ("best change: ", "bold"), (s["label"], "bold cyan"), f" ({s['kind']}) -> step {s['step_time_s']:.4g} s, ",
        (f"{100 * s['gain']:.1f} % faster" if s["gain"] >= 0 else f"{-100 * s['gain']:.1f} % slower, but it fits", "bold green"),
        f" ({s['speedup']:.3f}x), {s['memory_gib']:.1f} GiB per GPU",
    ))
    bp = x["best_plan_change"]
    if s["kind"] != "plan" and bp is not None:
        console.print(Text.assemble("  best change on the same hardware: ", (bp["label"], "cyan"),
                                    f" -> step {bp['step_time_s']:.4g} s, {100 * bp['gain']:.1f} % faster"))
    if s["kind"] == "hardware" and x["estimate"]["scenario"].get("cloud") is None:
        console.print("  (hardware upgrades are priced at the catalog GPU price)", style="dim")
    elif s["kind"] == "hardware":
        console.print("  (other instance types renting the same GPUs, at their catalog prices)", style="dim")
    at = Table(title=f"top changes ({x['candidates_feasible']} of {x['candidates_evaluated']} candidates feasible)",
               title_justify="left", title_style="bold")
    for col, just in (("change", "left"), ("kind", "left"), ("step", "right"), ("time", "right"), ("speedup", "right"),
                      ("GiB", "right"), ("MFU", "right")):
        at.add_column(col, justify=just)
    for e in x["alternatives"]:
        _change_row(at, e)
    console.print(at)
