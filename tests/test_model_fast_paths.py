"""The evaluator's shortcuts (issues 10 and 13: model speed) give exactly what the plain path gives.

The vectorized model skips work where a feature is absent: a batch holding dense and MoE/MLA rows is
evaluated in blocks of one kind (the dense per-layer block is not computed for MoE blocks), single-
valued columns stay 0-d instead of being copied to every row, the spine share is not evaluated on a
full-bisection fabric, and a few categorical codes are compared directly. Each shortcut must be
invisible: these tests hold outputs bit-identical (NaN where NaN) to one row at a time, to fully
broadcast columns, and to the formulas the shortcuts skip.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest

from cosearch.model import INPUT_COLUMNS, evaluate
from cosearch.model import _ops as ops
from cosearch.model import communication as comm
from cosearch.scenario import parse_scenario, scenario_columns

ev = importlib.import_module("cosearch.model.evaluate")

#: dense (MHA, GQA, unfused attention) and extended (MoE with MLA, MoE with GQA, explicit head_dim) models
SCENARIOS = [
    {"model": "gpt3-175b", "training": {"global_batch": 1536, "attention": "standard"},
     "cluster": {"gpu": "a100-80gb", "gpus": 1024}},
    {"model": "llama3-70b", "training": {"global_batch": 1024, "precision": "fp8"}, "cluster": {"gpu": "h100-sxm", "gpus": 512}},
    {"model": "deepseek-v3", "training": {"global_batch": 4096, "precision": "fp8"}, "cluster": {"gpu": "h800", "gpus": 1024},
     "plan": {"tp": 2, "pp": 8, "ep": 32, "sequence_parallel": True}},
    {"model": "mixtral-8x7b", "training": {"global_batch": 1024}, "cluster": {"gpu": "h100-sxm", "gpus": 256},
     "plan": {"tp": 2, "ep": 8, "sequence_parallel": True}},
    {"model": "qwen3-235b-a22b", "training": {"global_batch": 2048}, "cluster": {"gpu": "b200", "gpus": 512},
     "plan": {"tp": 4, "pp": 4, "ep": 8, "sequence_parallel": True}},
]


def _mixed_rows(n: int, seed: int, schedules=(np.nan, np.nan, 0, 1)) -> dict[str, np.ndarray]:
    """``n`` rows drawn from SCENARIOS with random plans (some break a rule: valid is False there).

    A batch holds either no split-backward schedule or only those (``schedules``): the step formula
    is chosen per batch (``split_bwd`` in evaluate.py), and the two forms differ in the last bit."""
    rng = np.random.default_rng(seed)
    bases = [scenario_columns(parse_scenario(s)) for s in SCENARIOS]
    keys = sorted(set().union(*bases))
    pick = rng.integers(len(bases), size=n)
    cols = {k: np.array([b.get(k, INPUT_COLUMNS[k]) for b in bases], dtype=float)[pick] for k in keys}
    choice = lambda *vals: rng.choice(vals, n).astype(float)  # noqa: E731
    tp, pp, dp = choice(1, 2, 4, 8), choice(1, 2, 4, 8), choice(1, 2, 8, 32)
    sched = choice(*schedules)
    cols.update(tp=tp, pp=pp, dp=dp, gpus=tp * pp * dp, microbatch=choice(1, 2), recompute=choice(0, 1, 2),
                zero=choice(0, 1, 3), schedule=sched, interleave=np.where((sched == 1) | (sched == 3), 2.0, 1.0),
                ep=np.where(cols["experts"] > 0, choice(1, 2, 8), 1.0))
    return cols


def _assert_identical(got: dict, want: dict, where: str) -> None:
    assert got.keys() == want.keys(), where
    for key in want:
        a, b = np.asarray(got[key]), np.asarray(want[key])
        assert a.dtype == b.dtype, f"{where}: {key} dtype {a.dtype} != {b.dtype}"
        same = (a == b) | (np.isnan(a) & np.isnan(b)) if a.dtype.kind == "f" else a == b
        assert np.all(same), f"{where}: {key} differs in {np.count_nonzero(~same)} rows"


@pytest.mark.parametrize("schedules", [(np.nan, np.nan, 0.0, 1.0), (2.0, 3.0, 4.0)])
def test_mixed_dense_and_moe_batch_in_blocks_equals_one_row_at_a_time(monkeypatch, schedules):
    cols = _mixed_rows(240, 0, schedules)
    ext = (cols["experts"] > 0) | (cols["mla"] > 0) | ~np.isnan(cols["head_dim"])
    assert 0 < ext.sum() < ext.size  # both kinds: the batch is split
    if 2.0 in schedules:
        assert ext[cols["schedule"] == 2].any()  # zero-bubble MoE rows: the dense GEMM time computed lazily
    monkeypatch.setattr(ev, "CHUNK_ROWS", 32)  # 240 rows > 2 x 32: split, then blocks of 32 rows of one kind
    batch = evaluate(cols)
    monkeypatch.setattr(ev, "CHUNK_ROWS", 10**9)
    for i in range(0, 240, 7):
        one = evaluate({k: v[i:i + 1] for k, v in cols.items()})  # a batch of one row: neither split nor blocks
        _assert_identical(one, {k: v[i:i + 1] for k, v in batch.items()}, f"row {i}")


def test_single_valued_columns_kept_0d_give_the_broadcast_values():
    """evaluate() leaves columns the caller gives as one value (and defaults) 0-d; copying them to every
    row, as broadcast_columns does, changes nothing."""
    cols = _mixed_rows(500, 1)
    n = cols["gpus"].size
    lean = evaluate({k: v for k, v in cols.items()} | {"dropout": 1.0, "tp_comm_overlap": 1.0})
    full_cols = {k: np.full(n, v) for k, v in INPUT_COLUMNS.items() if v is not None}
    full = evaluate(full_cols | cols | {"dropout": np.ones(n), "tp_comm_overlap": np.ones(n)})
    _assert_identical(lean, full, "lean vs broadcast")
    assert all(np.shape(v) == (n,) for v in lean.values())


def test_spine_share_shortcut_equals_the_formula_on_a_full_bisection_fabric():
    """With oversubscription 1 and no leaf size the share is exactly 1.0: a NaN oversubscription in a
    last row forces the formula, which must give 1.0 on every other row, degenerate inputs included."""
    size = np.array([1.0, 2.0, 8.0, 64.0, 512.0, 0.0, np.nan, np.inf, 4.0, 8.0])
    stride = np.array([1.0, 4.0, 8.0, 2.0, 8.0, 1.0, 1.0, 0.0, np.nan, 0.0])
    domain = np.array([8.0, 8.0, 72.0, 8.0, 4.0, 8.0, 8.0, np.inf, 8.0, np.nan])
    s, st, d = (x.ravel() for x in np.meshgrid(size, stride, domain, indexing="ij"))
    over = np.append(np.ones(s.size), np.nan)  # the last row: formula path for all
    s, st, d = np.append(s, 2.0), np.append(st, 1.0), np.append(d, 8.0)
    for a2a in (False, True):
        with np.errstate(divide="ignore", invalid="ignore"):  # 0/0 and inf*0 on the degenerate rows
            formula = comm.spine_share(s, st, d, np.nan, over, all_to_all=a2a)
        assert np.all(formula[:-1] == 1.0)
        assert comm.spine_share(s, st, d, np.nan, 1.0, all_to_all=a2a) == 1.0
        assert comm.spine_share(2.0, 1.0, 8.0, np.nan, 1.0, all_to_all=a2a) == 1.0  # the scalar path


@pytest.mark.parametrize("values", [(0.0, 1.0, 2.0, 3.0), (0.0, 1.0, 3.0, 5.0, 7.0), (4.0,)])
def test_isin_on_codes_equals_numpy(values):
    x = np.array([0.0, -0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 0.5, np.nan, np.inf, -1.0])
    np.testing.assert_array_equal(ops.isin(x, values), np.isin(x, values))
    for v in x:
        assert bool(ops.isin(np.float64(v), values)) == bool(np.isin(v, values))
        assert ops.isin(float(v), values) == bool(np.isin(v, values))
