"""Fit the GEMM time model t = t0 + max(2mnk/(eta*peak), bytes/bw) to the measured H100 GEMMs.

Two global constants (eta, t0) from 230 measurements, plus the harness's timing floor (the
smallest products all read ~34 us whatever their size: launch-bound timing, not GPU work, so it is
fitted but not used by the model); prints the fit, the error distribution, and
writes experiments/results/fit_gemm.json. The result is what cosearch.hardware and
cosearch.model.profile use for the H100 matmul efficiency and the per-GEMM overhead.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

HERE = Path(__file__).resolve().parent
CSV = HERE / "data" / "measurements" / "h100" / "gemm.csv"
PEAK_BF16 = 989e12      # H100 SXM datasheet dense bf16
COPY_BPS = 3.00e12      # measured device-to-device copy, same machine (gemm README)


def main() -> None:
    d = pd.read_csv(CSV)
    flops = 2.0 * d.m * d.k * d.n
    traffic = 2.0 * (d.m * d.k + d.k * d.n + d.m * d.n)

    def model(p):
        eta, t0_us, floor_us = p
        t = t0_us * 1e-6 + np.maximum(flops / (eta * PEAK_BF16), traffic / COPY_BPS)
        return np.maximum(t, floor_us * 1e-6)

    fit = least_squares(lambda p: np.log(model(p) / d.sec), [0.7, 20.0, 30.0])
    err = model(fit.x) / d.sec - 1
    big = flops >= 1e11
    result = {
        "eta": float(fit.x[0]), "t0_us": float(fit.x[1]), "timing_floor_us": float(fit.x[2]),
        "median_abs_error": float(err.abs().median()), "p90_abs_error": float(err.abs().quantile(0.9)),
        "worst_abs_error": float(err.abs().max()),
        "median_abs_error_gemms_over_100_gflop": float(err[big].abs().median()),
        "n": int(len(d)),
    }
    print(f"eta = {result['eta']:.3f} of {PEAK_BF16/1e12:.0f} TFLOP/s, t0 = {result['t0_us']:.1f} us (harness floor {result['timing_floor_us']:.1f} us)")
    print(f"|error| median {result['median_abs_error']:.1%}, p90 {result['p90_abs_error']:.1%}, worst {result['worst_abs_error']:.1%}"
          f" (GEMMs >= 100 GFLOP: median {result['median_abs_error_gemms_over_100_gflop']:.1%})")
    out = HERE / "results" / "fit_gemm.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
