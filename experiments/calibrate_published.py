"""Calibration on the public published runs: step-time error before vs after, held out.

Starts from the kernel-physics profile (nothing fitted to these runs) and fits a few global
efficiency constants with ``cosearch.calibration.calibrate`` (the code behind ``cosearch calibrate``).
"Before" is the kernel profile's error on every row (it has seen none of them). "After" is held
out: 5-fold cross-validation (each fold predicted by a profile fitted on the other four) and
leave-one-source-out (each paper/source predicted by a profile fitted on the other sources).

Usage: python experiments/calibrate_published.py [--csv PATH]
Writes experiments/results/calibrate_published.json and calibrate_published.md (a table).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cosearch.fingerprint import model_fingerprint  # noqa: E402
from cosearch.calibration import calibrate, calibrated_range, cross_validate, error_stats, log_errors  # noqa: E402
from cosearch.measured import load_measured  # noqa: E402
from cosearch.model.profile import KERNEL_PROFILE  # noqa: E402

CSV = HERE / "data" / "validation" / "published_runs_public.csv"
PARAM_SETS = {
    "matmul only": ("matmul_scale",),
    "matmul + FSDP overlap (shipped default's set)": ("matmul_scale", "fsdp_overlap"),
    "... + attention efficiency": ("matmul_scale", "fsdp_overlap", "flash_attention_relative"),
    "... + network efficiency": ("matmul_scale", "fsdp_overlap", "network_efficiency"),
}


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--csv", default=str(CSV))
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    c, fmt = load_measured(args.csv)
    rng = calibrated_range(c)
    results = []
    for name, params in PARAM_SETS.items():
        fit, rep = calibrate(c, params, KERNEL_PROFILE, folds=args.folds, seed=0, by_source=True)
        # per-source median before vs leave-one-source-out after
        loso = cross_validate(c, c.rows["source_id"].to_numpy(), params, KERNEL_PROFILE, multistart=True)
        before = log_errors(c, KERNEL_PROFILE)
        per_source = {}
        for src in sorted(c.rows["source_id"].unique()):
            m = (c.rows["source_id"] == src).to_numpy()
            per_source[src] = {"rows": int(m.sum()), "before_median": error_stats(before[m])["median"],
                               "after_loso_median": error_stats(loso[m])["median"]}
        results.append({"name": name, **rep, "per_source": per_source})
        print(f"{name}: fitted {rep['fitted']}")
    report = {"csv": str(args.csv), "format": fmt, "rows": int(len(c.rows)), "base": "kernel (KERNEL_PROFILE)",
              "folds": args.folds, "calibrated_range": rng.model_dump(mode="json"), "results": results,
              "model_fingerprint": model_fingerprint()}
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "calibrate_published.json").write_text(json.dumps(report, indent=2))

    lines = [f"Step-time error |predicted/measured - 1| on {report['rows']} published runs "
             f"(experiments/data/validation/published_runs_public.csv); base: kernel-physics profile.", "",
             "| fitted parameters | before: median / p90 | after, 5-fold held out: median / p90 | after, leave-one-source-out: median / p90 | after, in sample: median / p90 |",
             "|---|---|---|---|---|"]
    for r in results:
        b, h, lo, ins = r["before"], r["after_held_out"], r["after_leave_one_source_out"], r["after_in_sample"]
        fitted = ", ".join(f"{k}={round(v, 3):g}" for k, v in r["fitted"].items())
        lines.append(f"| {r['name']} ({fitted}) | {pct(b['median'])} / {pct(b['p90'])} | {pct(h['median'])} / {pct(h['p90'])} | "
                     f"{pct(lo['median'])} / {pct(lo['p90'])} | {pct(ins['median'])} / {pct(ins['p90'])} |")
    main_set = results[1]
    lines += ["", f"Per source ({main_set['name']}): median error before vs leave-one-source-out after", "",
              "| source | rows | before | after (held out) |", "|---|---|---|---|"]
    for src, s in main_set["per_source"].items():
        lines.append(f"| {src} | {s['rows']} | {pct(s['before_median'])} | {pct(s['after_loso_median'])} |")
    table = "\n".join(lines) + "\n"
    (out / "calibrate_published.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
