"""Predict every published run that states enough fields and compare with the measured step time.

Usage: python experiments/validate.py [--csv PATH] [--profile profile.yaml]
Writes experiments/results/validation.csv and prints the per-row table and error statistics.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from cosearch.cli.estimate import load_profile  # noqa: E402
from cosearch.model.profile import DEFAULT_PROFILE  # noqa: E402
from cosearch.validation import build_candidates, load_published_runs, validation_table  # noqa: E402

DEFAULT_CSV = HERE / "data" / "validation" / "published_runs_public.csv"


def summarize(df: pd.DataFrame) -> dict[str, float]:
    err = df["error"].abs()
    return {
        "rows": int(len(df)),
        "median_abs_error": float(err.median()),
        "p90_abs_error": float(err.quantile(0.9)),
        "worst_abs_error": float(err.max()),
        "mean_signed_error": float(df["error"].mean()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--csv", default=str(DEFAULT_CSV))
    ap.add_argument("--profile")
    ap.add_argument("--out", default=str(HERE / "results" / "validation.csv"))
    args = ap.parse_args()
    profile = load_profile(args.profile) or DEFAULT_PROFILE
    df = validation_table(build_candidates(load_published_runs(args.csv)), profile)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)
    pd.set_option("display.width", 200)
    cols = ["row_id", "source_id", "model", "gpu", "gpus", "tp", "pp", "microbatch", "interleave", "recompute",
            "zero", "seq_len", "measured_step_s", "predicted_step_s", "error"]
    print(df[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print()
    by_source = df.groupby("source_id").apply(lambda g: pd.Series(summarize(g)), include_groups=False)
    print(by_source.to_string(float_format=lambda x: f"{x:.3f}"))
    summary = summarize(df)
    print()
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
