"""Predict every published run that states enough fields and compare with the measured step time.

Usage: python experiments/validate.py [--csv PATH ...] [--profile profile.yaml]

Reads experiments/data/validation/published_runs_{public,modern}.csv (or the CSVs given), predicts
each usable row with the shipped default profile (in-sample: its two constants were fitted on these
rows), with 5-fold cross-validation and leave-one-source-out (each fold predicted by a profile
refitted without it, experiments/calibrate_default.py's constants), and reports every source and
regime (fp8 / 16-bit, GPU, FSDP / 3-D plans, long context) under all three, plus the worst rows with
what the model misses there. Writes experiments/results/validation.csv and validation.json.
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
sys.path.insert(0, str(HERE))

from calibrate_default import PARAMS, START  # noqa: E402
from cosearch.calibration import cross_validate, error_stats  # noqa: E402
from cosearch.cli.estimate import load_profile  # noqa: E402
from cosearch.model.profile import DEFAULT_PROFILE, KERNEL_PROFILE  # noqa: E402
from cosearch.validation import build_candidates, load_published_runs, validation_table  # noqa: E402

#: What the model misses on the rows it predicts worst (analysis of the breakdowns, by row id).
REASONS = {
    **dict.fromkeys((11, 12, 13, 14, 15, 16), "DeepSpeed ZeRO-3 (2021), TP=PP=1: measured as if its parameter "
                    "gathers ran at about one NIC per GPU; the model assumes NCCL rings spread over the node's 8 NICs"),
    **dict.fromkeys((233, 239, 247, 248), "MosaicML on H100 at 8k-64k tokens: the 2023 Triton attention kernel had no "
                    "Hopper path (FlashAttention-2 reached 35 % of H100 peak, Shah et al. 2024); the model uses its A100 ratio"),
    **dict.fromkeys((254, 256, 257, 258, 259, 260, 261, 262, 263, 265, 269, 272),
                    "MosaicML FSDP on 8 A100-80GB with full recompute: over-predicted; the single sustained-matmul "
                    "constant is fitted across GPUs and A100 sustains a larger share of its peak than the H100 fit says"),
    187: "Nemotron-340B, recompute not stated: the model needs full recompute to fit, the recipe ran something cheaper "
         "(probably selective with fp8 weights not cached)",
    188: "Llama 3 8B (NeMo 24.07), recompute not stated: the model picks none; the run is 14 % slower than the same plan "
         "in the v25.02 recipes (row 90-94), a software-version difference",
    185: "Nemotron-8B fp8, 256k vocabulary on TP 2: logits and cross-entropy dominate more than the model charges",
    178: "GPT-3 5B fp8 at seq 2048: small GEMMs and per-kernel fp8 cast/amax overheads are under-charged",
    179: "GPT-3 20B fp8 at seq 2048: as row 178",
}


def regimes(df: pd.DataFrame) -> pd.DataFrame:
    """Regime labels of each validated row."""
    return pd.DataFrame({
        "source": df["source_id"],
        "precision": np.where(df["precision"] == "fp8", "fp8", "16-bit"),
        "gpu": df["gpu"],
        "plan": np.where(df["zero"] >= 3, "FSDP/ZeRO-3", "3-D (tp/pp/dp)"),
        "context": np.where(df["seq_len"] >= 16384, "long (>=16k)", "short (<16k)"),
    }, index=df.index)


def stats_of(err: pd.Series) -> dict[str, float]:
    e = err.abs()
    return {"rows": int(len(e)), "median": float(e.median()), "p90": float(e.quantile(0.9)), "worst": float(e.max()),
            "bias": float(err.mean())}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--csv", nargs="*", help="published-runs CSVs (default: the public and the modern set)")
    ap.add_argument("--profile")
    ap.add_argument("--out", default=str(HERE / "results" / "validation.csv"))
    args = ap.parse_args()
    profile = load_profile(args.profile) or DEFAULT_PROFILE
    cands = build_candidates(load_published_runs(*(args.csv or ())))
    df = validation_table(cands, profile)
    start = START
    folds = np.random.default_rng(0).integers(5, size=len(cands.rows))
    df["error_5fold"] = np.expm1(cross_validate(cands, folds, PARAMS, start))
    df["error_loso"] = np.expm1(cross_validate(cands, cands.rows["source_id"].to_numpy(), PARAMS, start))
    df["reason"] = [REASONS.get(int(r), "") for r in df["row_id"]]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out, index=False)

    pd.set_option("display.width", 220)
    pd.set_option("display.max_colwidth", 120)
    cols = ["row_id", "source_id", "model", "gpu", "gpus", "precision", "tp", "pp", "cp", "microbatch", "interleave",
            "recompute", "zero", "seq_len", "measured_step_s", "predicted_step_s", "error", "error_loso", "fits"]
    print(df[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}"))

    labels = regimes(df)
    report: dict = {"rows": int(len(df)), "overall": {}, "regimes": {}}
    for scheme, col in (("in_sample", "error"), ("five_fold", "error_5fold"), ("leave_one_source_out", "error_loso")):
        report["overall"][scheme] = stats_of(df[col])
    report["overall"]["fp8"] = {s: stats_of(df.loc[labels["precision"] == "fp8", c])
                                for s, c in (("in_sample", "error"), ("leave_one_source_out", "error_loso"))}
    report["overall"]["kernel_profile_no_fit"] = {
        k: v for k, v in error_stats(np.log1p(validation_table(cands, KERNEL_PROFILE)["error"].to_numpy())).items()}
    report["fits_in_memory"] = {"stated_plan_rows": int(len(df)), "predicted_to_fit": int(df["fits"].sum())}
    print()
    for regime in labels.columns:
        rows = []
        for value, idx in labels.groupby(regime).groups.items():
            sub = df.loc[idx]
            rec = {"regime": f"{regime}={value}", "rows": len(sub)}
            for scheme, col in (("in", "error"), ("5fold", "error_5fold"), ("loso", "error_loso")):
                st = stats_of(sub[col])
                rec[f"{scheme} med"], rec[f"{scheme} p90"] = st["median"], st["p90"]
                report["regimes"].setdefault(regime, {}).setdefault(str(value), {})[scheme] = st
            rec["bias"] = float(sub["error"].mean())
            rows.append(rec)
        print(pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{100 * x:.1f}%"))
        print()
    worst = df.reindex(df["error"].abs().sort_values(ascending=False).index).head(12)
    report["worst"] = worst[["row_id", "source_id", "model", "gpus", "measured_step_s", "predicted_step_s", "error",
                             "error_loso", "reason"]].to_dict(orient="records")
    print(worst[["row_id", "source_id", "model", "gpus", "measured_step_s", "predicted_step_s", "error", "reason"]]
          .to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    (Path(args.out).parent / "validation.json").write_text(json.dumps(report, indent=2))
    print()
    print(json.dumps(report["overall"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
