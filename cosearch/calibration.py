"""Fit the model's global efficiency constants to measured step times (scipy least_squares).

The fit adjusts a few :class:`~cosearch.model.profile.Profile` fields shared by every run (never one
constant per run) to minimize a robust loss on log(predicted / measured) step time. Cross-validation
holds out whole groups (a source, or folds) to tell how well the fitted profile predicts runs it
has not seen.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.optimize import least_squares

from .model.profile import Profile
from .validation import Candidates, predict

log = logging.getLogger(__name__)

#: Profile fields that calibration may fit, with their bounds.
FITTABLE: dict[str, tuple[float, float]] = {
    "matmul_scale": (0.3, 1.3),
    "flash_attention_relative": (0.1, 1.2),
    "hbm_efficiency": (0.2, 1.0),
    "nvlink_efficiency": (0.2, 1.0),
    "network_efficiency": (0.1, 1.0),
    "dp_overlap": (0.0, 1.0),
    "fsdp_overlap": (0.0, 1.0),
    "tp_overlap": (0.0, 1.0),
    "gemm_overhead_s": (0.0, 2e-4),
}
DEFAULT_FIT = ("matmul_scale", "flash_attention_relative")


@dataclass
class FitResult:
    profile: Profile
    log_errors: np.ndarray  # per row, log(pred / measured), on the rows it was fitted to

    @property
    def abs_errors(self) -> np.ndarray:
        return np.abs(np.expm1(self.log_errors))


def _subset(c: Candidates, row_mask: np.ndarray) -> Candidates:
    keep_rows = np.flatnonzero(row_mask)
    remap = -np.ones(len(c.rows), dtype=int)
    remap[keep_rows] = np.arange(len(keep_rows))
    cand_mask = row_mask[c.row_of]
    cols = {k: v[cand_mask] for k, v in c.columns.items()}
    scen = [s for s, m in zip(c.scenarios, cand_mask) if m]
    return Candidates(c.rows.iloc[keep_rows].reset_index(drop=True), cols, remap[c.row_of[cand_mask]], scen)


def log_errors(c: Candidates, profile: Profile) -> np.ndarray:
    pred, _ = predict(c, profile)
    return np.log(pred / c.rows["measured_step_s"].to_numpy())


def fit_profile(c: Candidates, params: Sequence[str] = DEFAULT_FIT, base: Profile | None = None) -> FitResult:
    """Least-squares fit of ``params`` (soft-L1 loss on log error, so a few outliers cannot dominate)."""
    base = base or Profile()
    for p in params:
        if p not in FITTABLE:
            raise ValueError(f"cannot fit {p!r}; fittable: {', '.join(FITTABLE)}")
    lo = np.array([FITTABLE[p][0] for p in params])
    hi = np.array([FITTABLE[p][1] for p in params])
    x0 = np.clip([getattr(base, p) for p in params], lo, hi)
    scale = np.where(hi > 1e-2, 1.0, hi)  # let scipy see gemm_overhead_s on an O(1) scale

    def residuals(x: np.ndarray) -> np.ndarray:
        return log_errors(c, base.model_copy(update=dict(zip(params, x * scale))))

    res = least_squares(residuals, x0 / scale, bounds=(lo / scale, hi / scale), loss="soft_l1", f_scale=0.1)
    prof = base.model_copy(update={p: float(v) for p, v in zip(params, res.x * scale)})
    log.info("fitted %s", {p: getattr(prof, p) for p in params})
    return FitResult(prof, res.fun)


def cross_validate(c: Candidates, groups: np.ndarray, params: Sequence[str] = DEFAULT_FIT, base: Profile | None = None) -> np.ndarray:
    """Held-out log errors: each group's rows predicted by a profile fitted on all other groups."""
    out = np.full(len(c.rows), np.nan)
    for g in np.unique(groups):
        test = groups == g
        if test.all():
            continue
        fit = fit_profile(_subset(c, ~test), params, base)
        out[test] = log_errors(_subset(c, test), fit.profile)
    return out
