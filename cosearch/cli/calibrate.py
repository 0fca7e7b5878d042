"""``cosearch calibrate MEASURED.csv --out profile.yaml [--params P,...] [--folds K] [--seed S] [--base B] [--force]``.

Fits the model's global efficiency constants to measured step times (scipy least_squares, robust
loss on log error), reports held-out error before and after (k-fold cross-validation), and writes a
profile YAML with the range it was calibrated on (``estimate --profile`` warns outside it).
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

from rich.table import Table
from rich.text import Text

from ._console import console
from ..errors import CosearchError
from ..model.profile import DEFAULT_PROFILE, KERNEL_PROFILE

#: Profile fields that may be fitted (mirrors cosearch.calibration.FITTABLE; imported lazily there,
#: since scipy.optimize is slow to import and every CLI command would pay for it).
FITTABLE = ("matmul_scale", "flash_attention_relative", "hbm_efficiency", "nvlink_efficiency", "network_efficiency",
            "dp_overlap", "fsdp_overlap", "tp_overlap", "gemm_overhead_s")

DEFAULT_PARAMS = ("matmul_scale", "network_efficiency")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="fit the efficiency profile to measured step times (CSV) and write profile.yaml")
    p.add_argument("measured", help="CSV of measured runs: user format (scenario columns + measured_step_time_s) or the published-runs format")
    p.add_argument("--out", required=True, help="profile YAML to write (use with estimate --profile)")
    p.add_argument("--params", default=",".join(DEFAULT_PARAMS),
                   help=f"comma-separated profile fields to fit (default {','.join(DEFAULT_PARAMS)}); fittable: {', '.join(FITTABLE)}")
    p.add_argument("--folds", type=int, default=5, help="k for k-fold cross-validation (default 5; capped at the number of "
                   "distinct configurations: rows with identical scenario inputs share a fold)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fold assignment")
    p.add_argument("--base", default="default",
                   help="starting profile: 'default' (shipped, fitted to published runs), 'kernel' (pure physics) or a profile YAML")
    p.add_argument("--force", action="store_true", help="write the profile even when its held-out error is worse than the "
                   "base profile's (without --force such a profile is not written and the exit code is 1)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(func=run)


def _params(text: str) -> tuple[str, ...]:
    params = tuple(p.strip() for p in text.split(",") if p.strip())
    if not params:
        raise CosearchError("--params", f"give at least one of: {', '.join(FITTABLE)}")
    for p in params:
        if p not in FITTABLE:
            raise CosearchError("--params", f"cannot fit {p!r}; allowed: {', '.join(FITTABLE)}")
    if len(set(params)) != len(params):
        raise CosearchError("--params", f"each parameter once (got {text!r})")
    return params


def _bounds() -> dict:
    from ..calibration import FITTABLE as BOUNDS

    return BOUNDS


def _base(text: str):
    if text == "default":
        return DEFAULT_PROFILE
    if text == "kernel":
        return KERNEL_PROFILE
    from ..calibration import read_profile_file

    if not Path(text).is_file():
        raise CosearchError("--base", f"{text!r} is neither default, kernel nor a profile file")
    return read_profile_file(text)[0]


def run(args: argparse.Namespace) -> int:
    from .._files import refuse_overwrite
    from ..calibration import calibrate, calibrated_range, write_profile_file
    from ..measured import load_measured

    params = _params(args.params)
    if args.folds < 2:
        raise CosearchError("--folds", f"must be at least 2 (got {args.folds})")
    if args.seed < 0:  # numpy's generators take no negative seed
        raise CosearchError("--seed", f"must be 0 or more (got {args.seed})")
    base = _base(args.base)
    refuse_overwrite("--out", args.out, {"measured CSV": args.measured,
                                          "--base profile": args.base if args.base not in ("default", "kernel") else None})
    cands, fmt = load_measured(args.measured)
    fit, report = calibrate(cands, params, base, folds=args.folds, seed=args.seed, by_source=(fmt == "published"),
                            source=str(args.measured))
    rng = calibrated_range(cands)
    report = {"measured": str(args.measured), "format": fmt, "base_profile": args.base, **report}
    header = (f"Calibrated profile written by `cosearch calibrate` on {datetime.date.today().isoformat()}\n"
              f"from {args.measured} ({fmt} format, {report['rows']} rows); fitted: {', '.join(params)}.\n"
              "Use with: cosearch estimate SCENARIO.yaml --profile THIS.yaml (warns outside calibrated_range).")
    refuse = report["worse_than_base"] and not args.force
    if not refuse:
        write_profile_file(args.out, fit, rng, report, header)
    report["written"] = not refuse
    refusal = (f"not written: {report['worse_than_base_note']}; the fit does not predict unseen runs better than "
               f"the base profile. Measure more runs, fit fewer parameters, or pass --force to write {args.out} anyway"
               if refuse else "")
    if args.json:
        print(json.dumps({**report, "calibrated_range": rng.model_dump(mode="json"), "out": args.out}, indent=2))
        if refuse:
            print(refusal, file=sys.stderr)
        return 1 if refuse else 0
    con = console()
    con.print(Text.assemble((f"{report['rows']} measured rows", "bold"), f", {report['configurations']} distinct "
                            f"configurations ({fmt} format) from {args.measured}; base profile: {args.base}"))
    pt = Table(title="fitted parameters", title_justify="left")
    pt.add_column("parameter"); pt.add_column("base", justify="right"); pt.add_column("fitted", justify="right")
    for p in params:
        pt.add_row(p, f"{report['base'][p]:.4g}", f"{report['fitted'][p]:.4g}")
    con.print(pt)
    for p in report.get("at_bound", []):
        lo, hi = _bounds()[p]
        con.print(f"{p} stopped at a physical bound (allowed {lo:.4g}-{hi:.4g}): the rows ask for a value the "
                  "hardware cannot have, i.e. for something the model does not represent; see docs/calibration.md",
                  style="yellow")
    et = Table(title=f"step-time error |pred/measured - 1| ({report['folds']}-fold cross-validation for held-out)", title_justify="left")
    for col in ("", "median", "p90", "worst"):
        et.add_column(col, justify="right" if col else "left")
    rows = [("before (base profile)", report["before"]), ("after, held out", report["after_held_out"]),
            ("after, in sample", report["after_in_sample"])]
    if "after_leave_one_source_out" in report:
        rows.append(("after, leave one source out", report["after_leave_one_source_out"]))
    for name, s in rows:
        et.add_row(name, *(f"{100 * s[k]:.1f} %" for k in ("median", "p90", "worst")))
    con.print(et)
    con.print(f"calibrated range: GPUs {', '.join(rng.gpu_types)}; {rng.params_b[0]:g}-{rng.params_b[1]:g}B parameters; "
              f"{rng.gpus[0]}-{rng.gpus[1]} GPUs; seq_len {rng.seq_len[0]}-{rng.seq_len[1]}")
    if refuse:
        print(refusal, file=sys.stderr)
        return 1
    if report["worse_than_base"]:
        con.print(f"warning: {report['worse_than_base_note']}; written anyway (--force)", style="yellow")
    con.print(f"wrote {args.out}")
    return 0
