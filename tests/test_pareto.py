"""Pareto masks, front merging and hypervolume against independent brute-force references."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cosearch.search import pareto
from cosearch.search.hypervolume import hypervolume, normalize_for_hv
from cosearch.search.pareto import merge_fronts, pareto_mask


def brute_mask(x: np.ndarray, senses=None) -> np.ndarray:
    """O(n^2) definition: finite row i is kept unless another finite row j is <= in every
    objective and either differs somewhere or is an earlier exact duplicate."""
    y = np.asarray(x, dtype=float).copy()
    if senses is not None:
        for j, s in enumerate(senses):
            if s == "max":
                y[:, j] = -y[:, j]
    n = len(y)
    fin = np.isfinite(y).all(axis=1)
    keep = np.zeros(n, dtype=bool)
    for i in range(n):
        if not fin[i]:
            continue
        keep[i] = True
        for j in range(n):
            if j == i or not fin[j]:
                continue
            if np.all(y[j] <= y[i]) and (np.any(y[j] < y[i]) or j < i):
                keep[i] = False
                break
    return keep


def vector_brute_mask(y: np.ndarray) -> np.ndarray:
    """Same definition, vectorized O(n^2 k) memory, for a few thousand finite minimized rows."""
    n = len(y)
    le = np.all(y[:, None, :] <= y[None, :, :], axis=2)  # le[j, i]: j weakly dominates i
    eq = np.all(y[:, None, :] == y[None, :, :], axis=2)
    earlier = np.arange(n)[:, None] < np.arange(n)[None, :]
    beaten = le & (~eq | earlier)
    np.fill_diagonal(beaten, False)
    return ~beaten.any(axis=0)


def random_points(rng: np.random.Generator, n: int, k: int, *, levels: int = 5, nan_frac: float = 0.0):
    x = rng.integers(0, levels, size=(n, k)).astype(float)  # few levels: ties and duplicates
    if n and nan_frac:
        bad = rng.random(n) < nan_frac
        x[bad, rng.integers(0, k)] = rng.choice([np.nan, np.inf, -np.inf])
    return x


@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_mask_matches_brute_force_small(k):
    rng = np.random.default_rng(k)
    for _ in range(60):
        n = int(rng.integers(0, 50))
        x = random_points(rng, n, k, levels=int(rng.integers(2, 7)), nan_frac=0.1)
        assert np.array_equal(pareto_mask(x), brute_mask(x))


@pytest.mark.parametrize("k", [2, 3, 4])
def test_mask_with_max_senses(k):
    rng = np.random.default_rng(10 + k)
    for _ in range(30):
        x = random_points(rng, int(rng.integers(1, 40)), k) + rng.random((1, k))
        senses = [str(s) for s in rng.choice(["min", "max"], size=k)]
        assert np.array_equal(pareto_mask(x, senses), brute_mask(x, senses))
    assert np.array_equal(pareto_mask(x, ["maximize"] * k), pareto_mask(-x))


@pytest.mark.parametrize("k", [2, 3, 4])
def test_mask_large_uses_prefilter_and_blocks(k, monkeypatch):
    """Large inputs go through the prefilter, block scan and both elimination modes; shrink the
    thresholds so every path runs on arrays a brute force can still check."""
    rng = np.random.default_rng(20 + k)
    monkeypatch.setattr(pareto, "_PREFILTER_MIN_ROWS", 64)
    monkeypatch.setattr(pareto, "_BLOCK", 16)
    monkeypatch.setattr(pareto, "_LOOP_THRESHOLD", 100)
    for levels, n, step in [(4, 1500, 1.0), (30, 1500, 0.1), (10**6, 1500, 1.0)]:
        x = random_points(rng, n, k, levels=levels) * step  # step 0.1: ties without exact keys
        assert np.array_equal(pareto_mask(x), vector_brute_mask(x))
    # anti-correlated: many rows on the front
    u = rng.random((1200, k))
    u = np.round(u / u.sum(axis=1, keepdims=True), 2)
    assert np.array_equal(pareto_mask(u), vector_brute_mask(u))


@pytest.mark.parametrize("levels", [3, 20, 10**6])
def test_mask_3d_sweep_for_large_fronts(levels, monkeypatch):
    """k=3 switches to a sweep once the front grows; force it early and compare."""
    rng = np.random.default_rng(levels)
    monkeypatch.setattr(pareto, "_BLOCK", 32)
    monkeypatch.setattr(pareto, "_SWEEP_RATIO", 0.0)
    u = rng.random((1500, 3))
    x = np.round(levels * u / u.sum(axis=1, keepdims=True)) + rng.integers(0, 2, size=(1500, 3))
    x[7] = x[1200]  # an exact duplicate, later copy first in input
    assert np.array_equal(pareto_mask(x), vector_brute_mask(x))
    assert np.array_equal(pareto_mask(x[::-1]), vector_brute_mask(x[::-1]))


def test_mask_default_thresholds_with_duplicates():
    rng = np.random.default_rng(7)
    x = random_points(rng, 4200, 3, levels=12)  # just above the prefilter threshold
    x[100] = x[4000]  # duplicate of a later row
    assert np.array_equal(pareto_mask(x), vector_brute_mask(x))


def test_rounding_ties_in_the_sort_key():
    """q = p + 1 ulp in one objective gets the same float sort key as p; p must still win."""
    q, p = [1.0, 1.0 + 2.0**-52, 5.0], [1.0, 1.0, 5.0]
    assert pareto_mask(np.array([q, p])).tolist() == [False, True]
    rng = np.random.default_rng(3)
    x = np.vstack([np.tile([q, p], (50, 1)), rng.random((200, 3)) + 0.5])
    assert np.array_equal(pareto_mask(x), brute_mask(x))


def test_duplicates_keep_first_and_nonfinite_never_on_front():
    x = np.array([[1.0, 2.0], [1.0, 2.0], [np.nan, 0.0], [-np.inf, 5.0], [2.0, 1.0], [2.0, 1.0]])
    assert pareto_mask(x).tolist() == [True, False, False, False, True, False]
    assert pareto_mask(np.empty((0, 3))).shape == (0,)
    with pytest.raises(ValueError):
        pareto_mask(np.zeros((3, 2)), ["min", "sideways"])
    with pytest.raises(ValueError):
        pareto_mask(np.zeros(3))


@pytest.mark.parametrize("k", [2, 3, 4])
def test_merge_fronts_equals_front_of_whole(k):
    rng = np.random.default_rng(30 + k)
    for _ in range(20):
        n = int(rng.integers(1, 300))
        x = random_points(rng, n, k, levels=int(rng.integers(3, 9)), nan_frac=0.05)
        expected = np.flatnonzero(brute_mask(x) if n < 120 else pareto_mask(x))
        cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, int(rng.integers(0, 6))), replace=False))
        chunks = np.split(np.arange(n), cuts)
        fronts = []
        for idx in chunks:
            m = pareto_mask(x[idx])
            fronts.append((x[idx][m], idx[m]))
        pts, ids = merge_fronts(fronts)
        assert np.array_equal(ids, expected)
        assert np.array_equal(pts, x[expected])
        # streaming: fold chunk by chunk
        acc = fronts[0]
        for f in fronts[1:]:
            acc = merge_fronts([acc, f])
        assert np.array_equal(acc[1], expected)


def test_merge_fronts_dataframe_payload_and_senses():
    x = np.array([[1.0, 1.0], [2.0, 3.0], [3.0, 2.0], [0.0, 0.0]])
    df = pd.DataFrame({"name": list("abcd")}, index=[10, 11, 12, 13])
    pts, out = merge_fronts([(x[:2], df.iloc[:2]), (x[2:], df.iloc[2:])], senses=["max", "max"])
    assert out["name"].tolist() == ["b", "c"]
    assert out.index.tolist() == [11, 12]
    assert np.array_equal(pts, x[[1, 2]])
    pts, none = merge_fronts([(x, None)])
    assert none is None and np.array_equal(pts, x[[3]])
    with pytest.raises(ValueError):
        merge_fronts([(x, np.arange(3))])


def test_hypervolume_hand_computed():
    # unit boxes
    assert hypervolume([[0.0, 0.0]], [1.0, 1.0]) == pytest.approx(1.0)
    assert hypervolume([[0.0, 0.0, 0.0]], [1.0, 1.0, 1.0]) == pytest.approx(1.0)
    # 2D staircase: (0,2),(1,1),(2,0) with ref (3,3): 3 + 2 + 1 = 6
    assert hypervolume([[0, 2], [1, 1], [2, 0], [2, 2]], [3, 3]) == pytest.approx(6.0)
    # 3D: two unit-corner points in a 2-cube: 4 + 4 - 2 (overlap [1,2]x[0,2]x[1,2]) = 6
    assert hypervolume([[1, 0, 0], [0, 0, 1]], [2, 2, 2]) == pytest.approx(6.0)
    # three axis points in a 2-cube: everything except the [0,1)^3 corner no point reaches: 8 - 1
    assert hypervolume([[1, 0, 0], [0, 1, 0], [0, 0, 1]], [2, 2, 2]) == pytest.approx(7.0)
    # maximization mirrors minimization
    assert hypervolume([[1, 1]], [0, 0], senses=["max", "max"]) == pytest.approx(1.0)
    # points not strictly dominating ref, non-finite rows and dominated rows add nothing
    assert hypervolume([[0, 0], [1, 5], [np.nan, 0], [0.5, 0.5]], [1, 1]) == pytest.approx(1.0)
    assert hypervolume([[2, 2]], [1, 1]) == 0.0
    assert hypervolume(np.empty((0, 3)), [1, 1, 1]) == 0.0
    assert hypervolume([[0.25]], [1.0]) == pytest.approx(0.75)


def test_hypervolume_3d_monte_carlo():
    rng = np.random.default_rng(5)
    u = rng.random((150, 3))
    f = u / np.linalg.norm(u, axis=1, keepdims=True)  # points on the unit sphere: all non-dominated
    ref = np.array([1.0, 1.0, 1.0])
    hv = hypervolume(f, ref)
    samples = rng.random((60_000, 3))
    hit = np.zeros(len(samples), dtype=bool)
    for s in range(0, len(samples), 20_000):
        blk = samples[s : s + 20_000]
        hit[s : s + 20_000] = np.any(np.all(f[None, :, :] <= blk[:, None, :], axis=2), axis=1)
    mc = hit.mean()
    se = np.sqrt(mc * (1 - mc) / len(samples))
    assert abs(hv - mc) < 4 * se + 1e-3
    # analytically the sphere's outside in the unit cube is 1 - pi/6; a dense front approaches it
    assert 0.4 < hv < 1 - np.pi / 6 + 1e-9


@pytest.mark.parametrize("k", [2, 3, 4])
def test_hypervolume_matches_optuna(k):
    hv_mod = pytest.importorskip("optuna._hypervolume")
    rng = np.random.default_rng(40 + k)
    for _ in range(15):
        x = random_points(rng, int(rng.integers(1, 40)), k, levels=6) + rng.random((1, k)) * 0.1
        ref = np.full(k, 6.0)
        ours = hypervolume(x, ref)
        theirs = hv_mod.compute_hypervolume(x, ref)
        assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-9)
    # random 3D front bigger than optuna's fast paths
    u = rng.random((300, 3))
    f = u / np.linalg.norm(u, axis=1, keepdims=True)
    assert hypervolume(f, [1.2] * 3) == pytest.approx(hv_mod.compute_hypervolume(f, np.full(3, 1.2)), rel=1e-9)


def test_normalize_for_hv_ratio():
    exact = np.array([[1.0, 100.0], [2.0, 50.0], [4.0, 10.0]])
    norm = normalize_for_hv(exact)
    assert norm.ratio(exact) == pytest.approx(1.0)
    assert norm.ratio(exact[[0, 2]]) < 1.0
    assert norm.ratio(exact[:0]) == 0.0
    assert np.allclose(norm.transform(exact).min(axis=0), 0) and np.allclose(norm.transform(exact).max(axis=0), 1)
    # by hand in normalized space: points (0,1), (1/3, 4/9), (1, 0), ref 1.1
    pts = [(0, 1), (1 / 3, 4 / 9), (1, 0)]
    area = sum((x2 - x1) * (1.1 - y1) for (x1, y1), (x2, _) in zip(pts, pts[1:] + [(1.1, 0)]))
    assert norm.exact_hv == pytest.approx(area)
    # senses: maximizing the first objective of the negated front gives the same ratios
    flipped = exact * [-1, 1]
    n2 = normalize_for_hv(flipped, ["max", "min"])
    assert n2.ratio(flipped[[0, 2]]) == pytest.approx(norm.ratio(exact[[0, 2]]))
    # a dominated subset of rows passed as the "exact" front is reduced to its front
    assert normalize_for_hv(np.vstack([exact, [[5.0, 200.0]]])).exact_hv == pytest.approx(area)


def test_mask_permutation_invariant_as_a_set():
    rng = np.random.default_rng(9)
    x = rng.random((3000, 3))
    perm = rng.permutation(len(x))
    m1 = set(map(tuple, x[pareto_mask(x)]))
    m2 = set(map(tuple, x[perm][pareto_mask(x[perm])]))
    assert m1 == m2 and len(m1) == pareto_mask(x).sum()
