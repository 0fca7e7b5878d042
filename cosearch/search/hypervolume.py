"""Hypervolume of a front and the normalization that scores fronts against an exact one.

Same conventions as :mod:`cosearch.search.pareto` (``(n, k)`` points, ``senses`` per column,
non-finite rows ignored). Used by the search benchmark to score methods (HV ratio to the exact
front) and by tests.
"""
from __future__ import annotations

import bisect
import logging
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .pareto import _as_points, _signs, pareto_mask

logger = logging.getLogger(__name__)

__all__ = ["hypervolume", "normalize_for_hv", "HVNormalizer"]


def hypervolume(points: Any, ref: Any, senses: Sequence[Any] | None = None) -> float:
    """Exact hypervolume dominated by ``points`` and bounded by the reference point ``ref``.

    ``ref`` is in the same (unnegated) units and senses as ``points``. Rows that do not strictly
    dominate ``ref`` in every objective, and non-finite rows, are ignored. k=1, 2 are closed
    form; k=3 is a z-sweep over a 2-D staircase (O(n log n) + list moves, fine for n ~ 1e4);
    k>=4 uses optuna's private WFG implementation (``optuna._hypervolume``) when importable.
    """
    x = _as_points(points)
    k = x.shape[1]
    signs = _signs(senses, k)
    r = np.asarray(ref, dtype=float).reshape(-1)
    if r.size != k:
        raise ValueError(f"ref has {r.size} entries but points have {k} objectives")
    if not np.isfinite(r).all():
        raise ValueError("ref must be finite")
    x = x * signs
    r = r * signs
    keep = np.isfinite(x).all(axis=1) & (x < r).all(axis=1)
    x = x[keep]
    if x.shape[0] == 0:
        return 0.0
    x = x[pareto_mask(x)]
    if k == 1:
        return float(r[0] - x[:, 0].min())
    if k == 2:
        return _hv2d(x, r)
    if k == 3:
        return _hv3d(x, r)
    try:
        from optuna._hypervolume import compute_hypervolume
    except ImportError as err:  # pragma: no cover - depends on optuna internals
        raise NotImplementedError(
            f"hypervolume for {k} objectives needs optuna._hypervolume, which is not importable"
        ) from err
    return float(compute_hypervolume(x, r, assume_pareto=True))


def _hv2d(front: np.ndarray, r: np.ndarray) -> float:
    f = front[np.argsort(front[:, 0], kind="stable")]
    xnext = np.append(f[1:, 0], r[0])
    return float(np.sum((xnext - f[:, 0]) * (r[1] - f[:, 1])))


def _hv3d(front: np.ndarray, r: np.ndarray) -> float:
    order = np.argsort(front[:, 2], kind="stable")
    pts = front[order].tolist()
    rx, ry, rz = (float(v) for v in r)
    xs: list[float] = []  # staircase in (x, y): x ascending, y strictly descending
    ys: list[float] = []
    area = 0.0
    vol = 0.0
    n = len(pts)
    for i, (x, y, z) in enumerate(pts):
        j = bisect.bisect_right(xs, x)
        if not (j > 0 and ys[j - 1] <= y):  # otherwise (x, y) adds no area
            lo = bisect.bisect_left(xs, x)
            hi = lo
            while hi < len(xs) and ys[hi] >= y:
                hi += 1
            cur_x = x
            cur_h = ys[lo - 1] if lo > 0 else ry
            gain = 0.0
            for t in range(lo, hi):
                gain += (xs[t] - cur_x) * (cur_h - y)
                cur_x, cur_h = xs[t], ys[t]
            gain += ((xs[hi] if hi < len(xs) else rx) - cur_x) * (cur_h - y)
            area += gain
            xs[lo:hi] = [x]
            ys[lo:hi] = [y]
        znext = pts[i + 1][2] if i + 1 < n else rz
        vol += area * (znext - z)
    return float(vol)


@dataclass(frozen=True)
class HVNormalizer:
    """Maps fronts to a space where the exact front spans [0, 1] per objective, minimized.

    ``ref`` is ``1 + margin`` in every objective (the exact front's nadir scaled by 1+margin),
    so different methods' fronts can be scored by :meth:`ratio` = HV(front) / HV(exact front).
    """

    ideal: np.ndarray
    span: np.ndarray
    signs: np.ndarray
    margin: float
    exact_hv: float

    @property
    def ref(self) -> np.ndarray:
        return np.full(self.ideal.size, 1.0 + self.margin)

    def transform(self, points: Any) -> np.ndarray:
        """Minimized, normalized copy of ``points`` (same senses as the exact front)."""
        x = _as_points(points)
        if x.shape[1] != self.ideal.size:
            raise ValueError(f"points have {x.shape[1]} objectives, expected {self.ideal.size}")
        return (x * self.signs - self.ideal) / self.span

    def hypervolume(self, points: Any) -> float:
        return hypervolume(self.transform(points), self.ref)

    def ratio(self, points: Any) -> float:
        """HV(points) / HV(exact front); 1.0 means the method recovered the exact front."""
        return self.hypervolume(points) / self.exact_hv


def normalize_for_hv(
    exact_front: Any, senses: Sequence[Any] | None = None, *, margin: float = 0.1
) -> HVNormalizer:
    """Build an :class:`HVNormalizer` from an exact (or best known) front.

    Ideal and nadir come from the front's finite non-dominated rows; an objective where they are
    equal gets span 1 so it neither vanishes nor divides by zero.
    """
    if margin <= 0:
        raise ValueError("margin must be > 0 so that every front point adds volume")
    x = _as_points(exact_front)
    signs = _signs(senses, x.shape[1])
    xm = x * signs
    xm = xm[pareto_mask(xm)]
    if xm.shape[0] == 0:
        raise ValueError("exact front has no finite rows")
    ideal = xm.min(axis=0)
    span = xm.max(axis=0) - ideal
    span[~(span > 0)] = 1.0
    norm = HVNormalizer(ideal=ideal, span=span, signs=signs, margin=float(margin), exact_hv=1.0)
    exact = hypervolume((xm - ideal) / span, norm.ref)
    logger.debug("normalize_for_hv: %d front rows, exact HV %.6g", xm.shape[0], exact)
    return HVNormalizer(ideal=ideal, span=span, signs=signs, margin=float(margin), exact_hv=exact)
