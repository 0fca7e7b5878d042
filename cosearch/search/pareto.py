"""Pareto fronts (masks and chunk merges) for large numpy arrays of objective values.

Hypervolume lives in :mod:`cosearch.search.hypervolume`.

Conventions shared by every function here:

* ``points`` is an ``(n, k)`` array, one row per configuration, one column per objective.
* ``senses`` gives one of ``"min"``/``"max"`` (or ``"minimize"``/``"maximize"``) per column;
  ``None`` means minimize everything. Internally every column is turned into a minimization.
* A row with any NaN or +-inf is never on a front and never dominates anything.
* Fronts are sets: of several identical rows only the first (lowest index) is kept. This makes
  :func:`merge_fronts` exact for chunked enumeration (chunks concatenated in order).

``p`` weakly dominates ``q`` when ``p <= q`` in every (minimized) objective; ``q`` is on the front
when no other row dominates it and no earlier row equals it.
"""
from __future__ import annotations

import bisect
import logging
from typing import Any, Sequence, TypeVar

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["pareto_mask", "merge_fronts", "missing_as_worst"]

_MIN = {"min", "minimize", "minimise"}
_MAX = {"max", "maximize", "maximise"}

# Work budget for one broadcast dominance test (elements of an (rows, pivots, k) bool array).
_BROADCAST_BUDGET = 1 << 22
# Above this many candidate rows, eliminate pivot by pivot (compacting when >1/8 are dead);
# below it, broadcast rows x pivots.
_LOOP_THRESHOLD = 20_000
_BLOCK = 512
# k=3: the sweep costs about this many elementary comparisons per candidate row.
_SWEEP_RATIO = 500.0
# Prefilter (one O(n) pass per pivot) only above this size, stop when a pivot removes < 5%.
_PREFILTER_MIN_ROWS = 4096
_PREFILTER_MAX_PIVOTS = 16
_PREFILTER_MIN_GAIN = 0.05


def _signs(senses: Sequence[Any] | None, k: int) -> np.ndarray:
    """+1 for a minimized column, -1 for a maximized one (accepts optuna StudyDirection too)."""
    if senses is None:
        return np.ones(k)
    if isinstance(senses, str):
        senses = [senses]
    if len(senses) != k:
        raise ValueError(f"senses has {len(senses)} entries but points have {k} objectives")
    out = np.empty(k)
    for j, s in enumerate(senses):
        name = str(getattr(s, "name", s)).lower()
        if name in _MIN:
            out[j] = 1.0
        elif name in _MAX:
            out[j] = -1.0
        else:
            raise ValueError(f"sense {s!r} for objective {j}: use 'min' or 'max'")
    return out


def _as_points(points: Any) -> np.ndarray:
    arr = np.asarray(points, dtype=float)
    if arr.ndim != 2:
        raise ValueError(f"points must be a 2-D (n, k) array, got shape {arr.shape}")
    return arr


def _minimized(points: Any, senses: Sequence[Any] | None) -> np.ndarray:
    arr = _as_points(points)
    signs = _signs(senses, arr.shape[1])
    return arr * signs if np.any(signs < 0) else arr


#: Stand-in for a missing value (NaN, +-inf): finite, so the row stays a candidate, and worse than any real value.
WORST = float(np.finfo(np.float64).max)


def missing_as_worst(points: Any, senses: Sequence[Any] | None = None, keep: int = 0) -> np.ndarray:
    """``points`` (a float copy) with each missing value (NaN, +-inf) replaced by the worst stand-in of
    its column (:data:`WORST`, negated for a maximized one), so that a point with a missing value (the
    cost on a GPU without a price) still ranks on the values it has instead of never being on a front.
    The first ``keep`` columns must have values, and a row needs at least one: other rows stay NaN."""
    arr = np.array(_as_points(points), dtype=float)
    signs = _signs(senses, arr.shape[1])
    bad = ~np.isfinite(arr)
    if not bad.any():
        return arr
    drop = bad[:, :keep].any(axis=1) | bad.all(axis=1)
    arr = np.where(bad, signs * WORST, arr)
    arr[drop] = np.nan
    return arr


def pareto_mask(points: Any, senses: Sequence[Any] | None = None) -> np.ndarray:
    """Boolean mask of the non-dominated rows of an ``(n, k)`` array.

    Exact duplicates: only the first occurrence is marked. Non-finite rows are never marked.
    Large inputs first lose every row strictly dominated by a few min-sum rows (O(n) each, no
    sort). Then k=1 takes the first minimum; k=2 is an O(n log n) sort-and-scan; k>=3 sorts by a
    normalized sum (a dominator always sorts first) and repeatedly confirms the front of the next
    block of survivors, dropping every survivor the new front rows dominate. Python loops run
    over blocks and confirmed front rows only, so typical fronts (hundreds of rows) of 1e6 rows
    take ~0.1-0.2 s. Large fronts: k=3 switches to an exact sweep over the remaining candidates
    (one Python step per candidate: seconds for 1e6 rows with half on the front); k>=4 costs
    O(candidates * front * k).
    """
    x = _minimized(points, senses)
    n, k = x.shape
    mask = np.zeros(n, dtype=bool)
    if n == 0 or k == 0:
        return mask
    rows = np.flatnonzero(np.isfinite(x).all(axis=1))  # candidate row numbers, ascending
    if rows.size == 0:
        return mask
    xf = x if rows.size == n else x[rows]
    if k == 1:
        mask[rows[int(np.argmin(xf[:, 0]))]] = True
        return mask
    key, exact = _sum_key(xf)
    keep = _prefilter(xf, key)
    if keep is not None:
        rows, xf, key = rows[keep], xf[keep], key[keep]
    on = _front_2d(xf) if k == 2 else _front_nd(xf, key, exact)
    mask[rows[on]] = True
    return mask


def _sum_key(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """Sum of columns scaled by powers of two near their max |value|, and whether it is exact.

    Every step is a monotone float operation, so p <= q componentwise implies key(p) <= key(q):
    sorting by it puts dominators first. For integer-valued columns the scaling and the sum are
    exact (checked), so equal keys with p <= q imply p == q and ties need no tie-breaking sort.
    """
    k = x.shape[1]
    _, e = np.frexp(np.abs(x).max(axis=0))  # max|x_j| < 2**e_j
    inv = np.ldexp(1.0, -e)
    key = x[:, 0] * inv[0]
    for j in range(1, k):
        key = key + x[:, j] * inv[j]
    exact = int(e.max()) + k.bit_length() <= 52 and bool(np.all(x == np.floor(x)))
    return key, exact


def _prefilter(x: np.ndarray, key: np.ndarray) -> np.ndarray | None:
    """Cheap O(n) pass before any sort: drop rows strictly dominated by the current min-key row.

    Repeats with the next min-key survivor while that removes a sizeable share. Returns the
    ascending positions that survive, or ``None`` when the array is small or nothing was
    removed. Strict dominance keeps exact duplicates for the exact pass's first-wins rule.
    """
    n, k = x.shape
    if n <= _PREFILTER_MIN_ROWS:
        return None
    pos = np.arange(n)
    cols = [x[:, j] for j in range(k)]
    kk = key
    for _ in range(_PREFILTER_MAX_PIVOTS):
        if pos.size <= _PREFILTER_MIN_ROWS:
            break
        i = int(np.argmin(kk))
        p = [c[i] for c in cols]
        ge = cols[0] >= p[0]
        gt = cols[0] > p[0]
        for j in range(1, k):
            ge &= cols[j] >= p[j]
            gt |= cols[j] > p[j]
        dom = ge & gt
        removed = int(np.count_nonzero(dom))
        if removed:
            alive = ~dom
            pos, kk = pos[alive], kk[alive]
            cols = [c[alive] for c in cols]
        if removed < _PREFILTER_MIN_GAIN * (pos.size + removed):
            break
    if pos.size == n:
        return None
    logger.debug("pareto prefilter kept %d of %d rows", pos.size, n)
    return pos


def _sort_order(primary: np.ndarray, tie_cols: np.ndarray, exact: bool = False) -> np.ndarray:
    """Order by ``primary`` such that a weak dominator (or an earlier duplicate) comes first.

    Stable argsort, then only the runs of equal ``primary`` are re-sorted lexicographically by
    ``tie_cols`` (index order kept for identical rows). ``exact`` says equal primaries can only
    come from identical or incomparable rows, so the stable order already suffices.
    """
    order = np.argsort(primary, kind="stable")
    if exact or order.size < 2:
        return order
    sp = primary[order]
    eq = sp[1:] == sp[:-1]
    if not eq.any():
        return order
    tie = np.zeros(order.size, dtype=bool)
    tie[1:] |= eq
    tie[:-1] |= eq
    pos = np.flatnonzero(tie)
    start = np.ones(pos.size, dtype=bool)
    start[1:] = ~eq[pos[1:] - 1]
    run = np.cumsum(start)
    sub = order[pos]
    keys = tuple(tie_cols[sub, j] for j in range(tie_cols.shape[1] - 1, -1, -1)) + (run,)
    order[pos] = sub[np.lexsort(keys)]
    return order


def _front_2d(x: np.ndarray) -> np.ndarray:
    order = _sort_order(x[:, 0], x[:, 1:])
    y = x[order, 1]
    best = np.minimum.accumulate(y)
    on = np.empty(y.size, dtype=bool)
    on[0] = True
    on[1:] = y[1:] < best[:-1]
    out = np.zeros(x.shape[0], dtype=bool)
    out[order[on]] = True
    return out


def _front_nd(x: np.ndarray, key: np.ndarray, exact: bool = False) -> np.ndarray:
    """Exact front of finite minimized rows, k >= 3 (``key``, ``exact`` from :func:`_sum_key`).

    For k=3, block elimination (cost ~ rows * front * k) gives way to the sweep as soon as the
    work spent plus the next block's bound exceeds ``_SWEEP_RATIO`` per remaining row.
    """
    n, k = x.shape
    order = _sort_order(key, x, exact)
    xs = np.ascontiguousarray(x[order])
    cols = [np.ascontiguousarray(xs[:, j]) for j in range(k)]

    on = np.zeros(n, dtype=bool)  # in sorted positions
    rem = np.arange(n)
    n_on = 0
    spent = 0.0
    while rem.size:
        blk = rem[: _BLOCK]
        b = xs[blk]
        # weak[j, i]: block row j weakly dominates block row i; only earlier rows count.
        weak = np.ones((blk.size, blk.size), dtype=bool)
        for j in range(k):
            weak &= b[:, None, j] <= b[None, :, j]
        keep = ~np.triu(weak, 1).any(axis=0)
        pivots = blk[keep]
        on[pivots] = True
        n_on += pivots.size
        rest = rem[blk.size:]
        if k == 3 and rest.size > _BLOCK and spent + pivots.size * rest.size * k > _SWEEP_RATIO * (rest.size + n_on):
            sel = np.concatenate([np.flatnonzero(on), rest])
            sel.sort()
            on[sel] = _front_3d_sweep(xs[sel])
            logger.debug("pareto: front of %d rows so far, sweeping %d candidates", n_on, sel.size)
            break
        rem, work = _eliminate(rest, cols, xs[pivots])
        spent += work
    out = np.zeros(n, dtype=bool)
    out[order[on]] = True
    return out


def _front_3d_sweep(x: np.ndarray) -> np.ndarray:
    """Exact 3-D front by a sweep over (x0, x1, x2, position) order, keeping the 2-D staircase
    of (x1, x2) seen so far: O(m log m) plus list moves, one Python step per candidate row.
    Rows must be given so that exact duplicates appear in original-index order."""
    m = x.shape[0]
    order = np.lexsort((np.arange(m), x[:, 2], x[:, 1], x[:, 0]))
    ys = x[order, 1].tolist()
    zs = x[order, 2].tolist()
    keep = np.zeros(m, dtype=bool)
    sy: list[float] = []  # staircase: y ascending, z strictly descending
    sz: list[float] = []
    bl, br = bisect.bisect_left, bisect.bisect_right
    for i in range(m):
        y, z = ys[i], zs[i]
        j = br(sy, y)
        if j and sz[j - 1] <= z:
            continue  # an earlier row has x0, x1, x2 all <=
        keep[i] = True
        lo = bl(sy, y)
        hi = lo
        while hi < len(sy) and sz[hi] >= z:
            hi += 1
        sy[lo:hi] = [y]
        sz[lo:hi] = [z]
    out = np.zeros(m, dtype=bool)
    out[order[keep]] = True
    return out


def _eliminate(rest: np.ndarray, cols: list[np.ndarray], pivots: np.ndarray) -> tuple[np.ndarray, float]:
    """Positions in ``rest`` (ascending) weakly dominated by no row of ``pivots``, and the work
    done (row-objective comparisons)."""
    if rest.size == 0 or pivots.shape[0] == 0:
        return rest, 0.0
    k = pivots.shape[1]
    sub = [c[rest] for c in cols]
    start = 0
    work = 0.0
    # Many candidates: one pivot at a time, compacting as we go (early pivots prune the most).
    pending: np.ndarray | None = None  # dominated rows not yet compacted away
    n_pending = 0
    while start < pivots.shape[0] and rest.size > _LOOP_THRESHOLD:
        p = pivots[start]
        start += 1
        work += rest.size * k
        dom = sub[0] >= p[0]
        for j in range(1, k):
            dom &= sub[j] >= p[j]
        hits = int(np.count_nonzero(dom))
        if hits:
            if pending is None:
                pending = dom
            else:
                pending |= dom
            n_pending += hits
            if 8 * n_pending > rest.size:  # compact only once it pays off
                alive = ~pending
                rest = rest[alive]
                sub = [c[alive] for c in sub]
                pending, n_pending = None, 0
    if pending is not None:
        alive = ~pending
        rest = rest[alive]
        sub = [c[alive] for c in sub]
    if start >= pivots.shape[0] or rest.size == 0:
        return rest, work
    # Few candidates: broadcast against the remaining pivots in chunks.
    piv = np.ascontiguousarray(pivots[start:].T)  # (k, P): contiguous rows per objective
    dead = np.zeros(rest.size, dtype=bool)
    step = max(1, _BROADCAST_BUDGET // max(1, rest.size))
    dom = np.empty((rest.size, min(step, piv.shape[1])), dtype=bool)
    tmp = np.empty_like(dom)
    for s in range(0, piv.shape[1], step):
        pc = piv[:, s : s + step]
        d, t = dom[:, : pc.shape[1]], tmp[:, : pc.shape[1]]
        np.greater_equal(sub[0][:, None], pc[0][None, :], out=d)
        for j in range(1, k):
            np.greater_equal(sub[j][:, None], pc[j][None, :], out=t)
            d &= t
        dead |= d.any(axis=1)
    work += float(rest.size) * piv.shape[1] * k
    return rest[~dead], work


Payload = TypeVar("Payload")


def merge_fronts(
    fronts: Sequence[tuple[Any, Payload]], senses: Sequence[Any] | None = None
) -> tuple[np.ndarray, Payload]:
    """Front of the union of several (points, payload) chunks, e.g. per-chunk fronts.

    ``payload`` is anything row-aligned with its points: a numpy array (typically the rows'
    global indices), a pandas DataFrame (rows kept by position, index labels preserved), or
    ``None`` for all chunks. Exact: since a row off its chunk's front is dominated (or an earlier
    duplicate) inside that chunk, ``merge_fronts`` of per-chunk fronts equals the front of all
    rows, with the same first-duplicate rule when chunks are given in their original order.
    """
    if len(fronts) == 0:
        raise ValueError("merge_fronts needs at least one (points, payload) pair")
    pts = [_as_points(p) for p, _ in fronts]
    ks = {p.shape[1] for p in pts}
    if len(ks) != 1:
        raise ValueError(f"fronts have different numbers of objectives: {sorted(ks)}")
    payloads = [pl for _, pl in fronts]
    for p, pl in zip(pts, payloads):
        if pl is not None and len(pl) != p.shape[0]:
            raise ValueError(f"payload of length {len(pl)} does not match {p.shape[0]} points")
    allp = np.concatenate(pts, axis=0) if len(pts) > 1 else pts[0]
    mask = pareto_mask(allp, senses)
    front = allp[mask]
    if all(pl is None for pl in payloads):
        return front, None  # type: ignore[return-value]
    if any(pl is None for pl in payloads):
        raise ValueError("either every chunk or no chunk has a payload")
    first = payloads[0]
    if _is_dataframe(first):
        import pandas as pd

        merged = pd.concat(payloads, axis=0) if len(payloads) > 1 else first
        return front, merged.iloc[np.flatnonzero(mask)]  # type: ignore[union-attr]
    merged_arr = np.concatenate([np.asarray(pl) for pl in payloads], axis=0)
    return front, merged_arr[mask]  # type: ignore[return-value]


def _is_dataframe(obj: Any) -> bool:
    return type(obj).__module__.startswith("pandas") and hasattr(obj, "iloc")
