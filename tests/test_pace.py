"""The slowest GPU's pace (model/power.py): a synchronous job computes at the rate of the slowest of its N GPUs,
1 - sigma E[max of N standard normals], sigma = 1 % (Sinha et al. SC'22). Expectations: Python's own normal
quantile (statistics.NormalDist), the exact expected maximum by numerical integration, and hand arithmetic."""
from __future__ import annotations

from statistics import NormalDist

import numpy as np
import pytest

import cosearch
from cosearch.model import power as pw


def _exact_expected_max(n: int) -> float:
    """E[max of n standard normals] = integral of x n phi(x) Phi(x)^(n-1) dx, on a fine grid."""
    x = np.linspace(-10.0, 10.0, 200_001)
    phi = np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi)
    cdf = np.array([NormalDist().cdf(v) for v in x[::1000]])
    cdf = np.interp(x, x[::1000], cdf)
    return float(np.trapezoid(x * n * phi * cdf ** (n - 1), x))


def test_tabulated_expected_maximum_is_blom_at_any_gpu_count():
    # the table in log2 N against Blom's formula itself (Python's normal quantile), scalar and array paths,
    # at counts on and between its points
    ns = [2.0, 3.0, 7.0, 24.0, 100.0, 1536.0, 6000.0, 100_000.0]
    arr = pw.expected_max_normal(np.array(ns))
    for n, a in zip(ns, arr):
        ref = NormalDist().inv_cdf((n - 0.375) / (n + 0.25))
        assert pw.expected_max_normal(n) == pytest.approx(ref, rel=1e-4)  # scalar path
        assert a == pytest.approx(ref, rel=1e-4)                           # array path


def test_blom_expected_maximum_against_the_integral():
    assert pw.expected_max_normal(1.0) == 0.0
    assert _exact_expected_max(2) == pytest.approx(1.0 / np.sqrt(np.pi), rel=1e-3)  # the grid itself, by hand
    for n, tol in ((2, 0.05), (8, 0.015), (64, 0.01), (1024, 0.01), (16384, 0.01)):
        assert pw.expected_max_normal(float(n)) == pytest.approx(_exact_expected_max(n), rel=tol), n


def test_pace_factor_by_hand_and_monotone():
    assert pw.slowest_pace_factor(1.0) == 1.0
    # 8 GPUs: Phi^-1(7.625 / 8.25) = 1.4339 -> 1 - 0.01 x 1.4339
    assert pw.slowest_pace_factor(8.0) == pytest.approx(1.0 - 0.01 * NormalDist().inv_cdf(7.625 / 8.25), rel=1e-9)
    sizes = np.array([1.0, 2.0, 8.0, 64.0, 512.0, 2048.0, 16384.0, 100_000.0])
    f = pw.slowest_pace_factor(sizes)
    assert np.all(np.diff(f) < 0) and f[-1] > 0.95  # more GPUs, a slower slowest one; never absurd
    same = pw.slowest_pace_factor(np.full(5, 2048.0))  # one job size in every row: the scalar shortcut
    assert np.allclose(same, pw.slowest_pace_factor(2048.0)) and np.allclose(same, f[5])


def _dp(gpus: int) -> dict:
    return {"model": "gpt3-1.3b", "training": {"global_batch": 4 * gpus},
            "cluster": {"gpu": "h100-sxm", "gpus": gpus}, "plan": {"tp": 1, "pp": 1, "microbatch": 4}}


def test_weak_scaling_compute_slows_by_the_pace_of_the_slowest_gpu():
    # the same micro-batch per GPU on 8 and on 2,048 GPUs: the matmuls and attention run at the slowest GPU's pace,
    # the memory-bound kernels at the HBM's (not scaled), so the compute grows by more than 1 % and at most f8/f2048
    small, big = cosearch.estimate(_dp(8)), cosearch.estimate(_dp(2048))
    ratio = big["breakdown_s"]["compute"] / small["breakdown_s"]["compute"]
    bound = pw.slowest_pace_factor(8.0) / pw.slowest_pace_factor(2048.0)
    assert 1.01 < ratio <= bound + 1e-12
    assert bound == pytest.approx(0.98566 / 0.96573, rel=1e-4)
