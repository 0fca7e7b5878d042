"""The 80 % prediction interval of every step-time estimate, by split-conformal prediction.

Residuals: every usable row of both published-runs CSVs (experiments/data/validation) predicted by a
profile fitted WITHOUT the row's source (leave-one-source-out, the same parameters and start as
experiments/calibrate_default.py), r = log(measured / predicted). A new user's cluster is a new
source, so these are the errors an estimate should expect.

Band: the split-conformal central band of r at level LEVEL: lower bound the k_lo-th smallest residual
with k_lo = floor((n+1) * (1-LEVEL)/2), upper bound the k_hi-th with k_hi = ceil((n+1) * (1+LEVEL)/2)
(the finite-sample correction). An estimate t becomes [t * exp(log_low), t * exp(log_high)].
LEVEL is above 0.80 for an 80 % promise: pooled residuals treat rows as exchangeable, but a new source (a
new user's stack) brings its own bias, so a pooled 80 % band held only 69 % of the rows of a source
left out of it (nested check below). LEVEL is the smallest from 0.80 in steps of 0.05 whose nested
coverage reaches the 75-85 % range (:func:`smallest_level`, the same rule as the MoE band's); that choice is
made on the same nested check it is reported with, and the yaml says so.

Checks (printed, and in results/prediction_interval.json):
* coverage of the band on the same residuals, overall, per source and per regime (fp8 vs 16-bit,
  GPU, FSDP vs 3-D plans, long context), which is in-sample for the band;
* nested leave-one-source-out coverage, the honest number: for each source, the band is made from
  the other sources only (their own leave-one-source-out residuals, each fit also without the
  held-out source) and checked on the held-out source's residuals.

MoE band: the same construction on the mixture-of-experts runs (published_runs_moe.csv), whose errors are
wider than the dense rows'. Residuals are experiments/validate.py's leave-one-source-out ones (each MoE
source predicted by a profile fitted on the dense rows and the other MoE sources); the level is the
smallest from 80 % in 0.05 steps whose nested coverage (band from the other MoE sources' residuals,
those fits not redone without the held-out source) reaches 75-85 %. Rows with routed experts take it
(cosearch.model.interval); it is the ``moe`` section of the yaml.

Writes cosearch/data/prediction_interval.yaml (read by cosearch.model.interval) and
experiments/results/prediction_interval.json. Re-run after any model change:
``python experiments/prediction_interval.py``.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from calibrate_default import PARAMS, START  # noqa: E402
from cosearch.fingerprint import model_fingerprint  # noqa: E402
from cosearch.calibration import _subset, cross_validate  # noqa: E402
from cosearch.validation import Candidates, build_candidates, load_published_runs  # noqa: E402
from validate import moe_held_out_log_errors  # noqa: E402

COVERAGE = 0.8   # what the band promises on a new source
OUT_YAML = HERE.parent / "cosearch" / "data" / "prediction_interval.yaml"
OUT_JSON = HERE / "results" / "prediction_interval.json"
LONG_CONTEXT = 16384


# ----------------------------------------------------------------------------------- data
def load_candidates() -> Candidates:
    """Both published-runs CSVs (public + modern) as candidates."""
    return build_candidates(load_published_runs())


def loso_residuals(c: Candidates) -> np.ndarray:
    """r = log(measured / predicted) per row, each source predicted by a profile fitted without it."""
    return -cross_validate(c, c.rows["source_id"].to_numpy(), PARAMS, START)


# ----------------------------------------------------------------------------------- conformal
def conformal_bounds(r: np.ndarray, coverage: float) -> tuple[float, float]:
    """Split-conformal central band of the residuals ``r``: order statistics k_lo = floor((n+1)a)
    and k_hi = ceil((n+1)(1-a)) with a = (1-coverage)/2 (-inf/+inf when out of range)."""
    r = np.sort(np.asarray(r, dtype=float)[np.isfinite(r)])
    n = len(r)
    if n == 0:
        return -math.inf, math.inf
    a = (1.0 - coverage) / 2.0
    k_lo = math.floor((n + 1) * a + 1e-9)
    k_hi = math.ceil((n + 1) * (1.0 - a) - 1e-9)
    lo = float(r[k_lo - 1]) if k_lo >= 1 else -math.inf
    hi = float(r[k_hi - 1]) if k_hi <= n else math.inf
    return lo, hi


def covered(r: np.ndarray, lo: float, hi: float) -> np.ndarray:
    r = np.asarray(r, dtype=float)
    return (r >= lo) & (r <= hi)


def other_sources_residuals(c: Candidates) -> dict[str, np.ndarray]:
    """Per source: the leave-one-source-out residuals of the OTHER sources' rows, every fit also without that
    source (what a band made without it is built from)."""
    src = c.rows["source_id"].to_numpy()
    return {str(s): loso_residuals(_subset(c, src != s)) for s in np.unique(src)}


def nested_at(r: np.ndarray, src: np.ndarray, others: dict[str, np.ndarray],
              level: float) -> tuple[np.ndarray, dict[str, tuple[float, float]]]:
    """Per row: whether its residual lies in the band made at ``level`` from ``others[its source]`` (the other
    sources' residuals); each held-out source's band."""
    src = np.asarray(src).astype(str)
    out, bands = np.zeros(len(r), dtype=bool), {}
    for s, rest in others.items():
        lo, hi = conformal_bounds(rest, level)
        bands[s] = (lo, hi)
        out[src == s] = covered(r[src == s], lo, hi)
    return out, bands


def smallest_level(r: np.ndarray, src: np.ndarray,
                   others: dict[str, np.ndarray]) -> tuple[float, np.ndarray, dict[str, tuple[float, float]]]:
    """(level, nested coverage per row, bands): the smallest conformal level from COVERAGE in 0.05 steps (at most
    0.95) whose nested leave-one-source-out coverage reaches COVERAGE - 5 points, the bottom of 75-85 %."""
    for level in np.arange(COVERAGE, 0.96, 0.05).round(2):
        nested, bands = nested_at(r, src, others, float(level))
        if nested.mean() >= COVERAGE - 0.05:
            break
    return float(level), nested, bands


# ----------------------------------------------------------------------------------- MoE band
def moe_residuals() -> tuple[np.ndarray, np.ndarray]:
    """(r, source) per MoE row: r = log(measured / predicted), each MoE source predicted by a profile fitted
    on the dense rows and the other MoE sources (experiments/validate.py's leave-one-source-out)."""
    log_err, src = moe_held_out_log_errors("source_id")
    return -log_err, src.astype(str)


def moe_analysis() -> dict:
    """The MoE band at :func:`smallest_level`, from the MoE residuals (the other MoE sources' residuals are not
    refitted without the held-out source: experiments/validate.py's fits already leave only it out)."""
    r, src = moe_residuals()
    level, nested, bands = smallest_level(r, src, {str(s): r[src != s] for s in np.unique(src)})
    lo, hi = conformal_bounds(r, level)
    per_source = {str(s): float(nested[src == s].mean()) for s in np.unique(src)}
    return {"residuals": r, "sources": src, "level": level, "log_low": lo, "log_high": hi,
            "in_band": covered(r, lo, hi), "nested": nested, "nested_bands": bands, "nested_per_source": per_source}


# ----------------------------------------------------------------------------------- regimes
def regimes(c: Candidates) -> pd.DataFrame:
    """Per row: source, precision (fp8 / 16-bit), GPU, plan kind (FSDP / 3-D / data parallel), context."""
    first = {}
    for i, ri in enumerate(c.row_of):
        first.setdefault(int(ri), i)
    plan = [c.scenarios[first[i]]["plan"] for i in range(len(c.rows))]
    gpu = [c.scenarios[first[i]]["cluster"]["gpu"] for i in range(len(c.rows))]
    prec = ["fp8" if "fp8" in str(p).lower() else "16-bit" for p in c.rows["precision"]]
    kind = ["FSDP (zero-3)" if p["zero"] >= 3 else "3-D (tp/pp > 1)" if (p["tp"] > 1 or p["pp"] > 1) else "data parallel"
            for p in plan]
    ctx = [f"seq >= {LONG_CONTEXT // 1024}k" if s >= LONG_CONTEXT else f"seq < {LONG_CONTEXT // 1024}k" for s in c.rows["seq_len"]]
    return pd.DataFrame({"source": c.rows["source_id"].astype(str).to_numpy(), "precision": prec, "gpu": gpu,
                         "plan": kind, "context": ctx})


def coverage_table(reg: pd.DataFrame, r: np.ndarray, inband: np.ndarray, nested: np.ndarray) -> pd.DataFrame:
    """Rows, coverage of the shipped band, nested coverage and median residual per group."""
    recs = [{"group": "all", "value": "all", "rows": len(r), "coverage": float(inband.mean()),
             "nested_coverage": float(nested.mean()), "median_r": float(np.median(r))}]
    for col in reg.columns:
        for val, idx in reg.groupby(col).indices.items():
            recs.append({"group": col, "value": str(val), "rows": len(idx), "coverage": float(inband[idx].mean()),
                         "nested_coverage": float(nested[idx].mean()), "median_r": float(np.median(r[idx]))})
    return pd.DataFrame(recs)


def analyze() -> dict:
    """Residuals, the band at :func:`smallest_level` and every coverage number (what main() writes)."""
    c = load_candidates()
    r = loso_residuals(c)
    level, nested, bands = smallest_level(r, c.rows["source_id"].to_numpy(), other_sources_residuals(c))
    lo, hi = conformal_bounds(r, level)
    inband = covered(r, lo, hi)
    reg = regimes(c)
    table = coverage_table(reg, r, inband, nested)
    per_source_nested = table[table.group == "source"].set_index("value")["nested_coverage"]
    return {"candidates": c, "residuals": r, "level": level, "log_low": lo, "log_high": hi, "in_band": inband,
            "nested": nested, "nested_bands": bands, "table": table,
            "nested_source_mean": float(per_source_nested.mean())}


def main() -> None:
    res = analyze()
    lo, hi, table = res["log_low"], res["log_high"], res["table"]
    n = len(res["residuals"])
    sources = sorted(map(str, res["candidates"].rows["source_id"].unique()))
    today = _dt.date.today().isoformat()
    doc = {
        "coverage": COVERAGE,
        "log_low": round(lo, 6),
        "log_high": round(hi, 6),
        "factor_low": round(math.exp(lo), 4),
        "factor_high": round(math.exp(hi), 4),
        "rows": n,
        "sources": sources,
        "level": res["level"],
        "method": (f"split-conformal {res['level']:.0%} central band of leave-one-source-out residuals "
                   "log(measured/predicted) on published_runs_public.csv + published_runs_modern.csv "
                   f"(profile params {', '.join(PARAMS)} refitted per fold), for a {COVERAGE:.0%} promise on a new "
                   "source: the level was chosen as the smallest (in 0.05 steps) whose nested leave-one-source-out "
                   "coverage reaches 75-85 %"),
        "checks": {
            "loso_coverage": round(float(res["in_band"].mean()), 4),
            "nested_loso_coverage": round(float(res["nested"].mean()), 4),
            "nested_loso_coverage_source_mean": round(res["nested_source_mean"], 4),
        },
        "made_by": "experiments/prediction_interval.py",
        "date": today,
    }
    moe = moe_analysis()
    doc["moe"] = {
        "log_low": round(moe["log_low"], 6), "log_high": round(moe["log_high"], 6),
        "factor_low": round(math.exp(moe["log_low"]), 4), "factor_high": round(math.exp(moe["log_high"]), 4),
        "rows": len(moe["residuals"]), "sources": sorted(set(map(str, moe["sources"]))), "level": moe["level"],
        "method": (f"split-conformal {moe['level']:.0%} central band of the leave-one-source-out residuals of "
                   "published_runs_moe.csv (profile refitted on the dense rows and the other MoE sources); level: "
                   "the smallest from 80 % in 0.05 steps whose nested coverage (band from the other MoE sources' "
                   "residuals) reaches 75-85 %; taken by rows with routed experts"),
        "checks": {"loso_coverage": round(float(moe["in_band"].mean()), 4),
                   "nested_loso_coverage": round(float(moe["nested"].mean()), 4),
                   "nested_loso_coverage_source_mean": round(float(np.mean(list(moe["nested_per_source"].values()))), 4)},
    }
    OUT_YAML.write_text("# 80 % prediction interval of step-time estimates (cosearch.model.interval).\n"
                        "# Made by experiments/prediction_interval.py; do not edit by hand.\n"
                        + yaml.safe_dump(doc, sort_keys=False))
    OUT_JSON.parent.mkdir(exist_ok=True)
    report = {**doc, "nested_bands": {k: [round(a, 6), round(b, 6)] for k, (a, b) in res["nested_bands"].items()},
              "moe_nested_bands": {k: [round(a, 6), round(b, 6)] for k, (a, b) in moe["nested_bands"].items()},
              "moe_nested_coverage_per_source": {k: round(v, 4) for k, v in moe["nested_per_source"].items()},
              "table": table.round(4).to_dict("records"), "model_fingerprint": model_fingerprint()}
    OUT_JSON.write_text(json.dumps(report, indent=2))

    print(f"{n} rows from {len(sources)} sources; {COVERAGE:.0%} band (conformal level {res['level']:.0%}) of log(measured/predicted): "
          f"[{lo:+.4f}, {hi:+.4f}] -> step time x [{math.exp(lo):.3f}, {math.exp(hi):.3f}]")
    print(f"coverage on the LOSO residuals: {res['in_band'].mean():.1%}   nested LOSO (band from the other sources): "
          f"{res['nested'].mean():.1%} of rows, {res['nested_source_mean']:.1%} averaged over sources")
    print("nested bands (held-out source: factors from the others): " + ", ".join(
        f"{k} x[{math.exp(a):.3f}, {math.exp(b):.3f}]" for k, (a, b) in res["nested_bands"].items()))
    m = doc["moe"]
    print(f"MoE: {m['rows']} rows from {len(m['sources'])} sources; band (conformal level {m['level']:.0%}) step time "
          f"x [{m['factor_low']:.3f}, {m['factor_high']:.3f}]; coverage on its residuals {m['checks']['loso_coverage']:.1%}, "
          f"nested {m['checks']['nested_loso_coverage']:.1%} of rows ("
          + ", ".join(f"{k} {v:.0%}" for k, v in moe["nested_per_source"].items()) + ")")
    show = table.copy()
    for col in ("coverage", "nested_coverage"):
        show[col] = (100 * show[col]).map("{:.1f} %".format)
    show["median_r"] = show["median_r"].map("{:+.3f}".format)
    print(show.to_string(index=False))
    print(f"wrote {OUT_YAML.relative_to(HERE.parent)} and {OUT_JSON.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
