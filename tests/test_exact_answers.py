"""Exact answers (issue 11): `best` on an exhaustive study is exact for every metric and budget,
not only for the objectives its stored front was taken over."""
from __future__ import annotations

import json

import numpy as np
import optuna
import pytest

from cosearch.search.space import direction, parse_space
from cosearch.study import best, run_study

SMALL = {
    "model": "gpt3-175b",
    "training": {"global_batch": 1536, "tokens": 3.0e11, "precision": "bf16"},
    "cluster": {"gpu": ["a100-80gb", "h100-sxm"], "gpus": [512, 1024]},
    "plan": {"tp": [2, 4, 8], "pp": [4, 8, 16], "microbatch": [1, 2], "recompute": ["none", "selective", "full"]},
    "objectives": ["time_to_train_days", "cost_to_train_usd"],
    "constraints": {"max_cost_usd": 2.0e6},
}


@pytest.fixture(scope="module")
def exhaustive():
    sp = parse_space(json.loads(json.dumps(SMALL)))
    res = run_study(sp, "exact", optuna.storages.InMemoryStorage(), sampler="exhaustive")
    m = sp.evaluate_rows(sp.rows_of_flat(np.arange(int(sp.size))))
    return res.study, m


def brute(m, metric, **bounds):
    ok = np.asarray(m["feasible"], dtype=bool).copy()
    for key, b in bounds.items():
        ok &= np.asarray(m[key], dtype=float) <= b
    v = np.asarray(m[metric], dtype=float)[ok]
    return float(v.max() if direction(metric) == "maximize" else v.min())


@pytest.mark.parametrize("metric", ["mfu", "memory_gib", "step_time_s", "tokens_per_s", "energy_to_train_mwh"])
def test_best_off_front_metric_is_exact(exhaustive, metric):
    study, m = exhaustive
    res = best(study, objective=metric)
    assert res["value"] == pytest.approx(brute(m, metric), rel=1e-12)
    assert res["metrics"]["feasible"]


def test_stored_front_misses_the_true_best_mfu(exhaustive):
    """The regression: the best mfu among stored (front) trials is below the space's best."""
    study, m = exhaustive
    stored = max(t.user_attrs["metrics"]["mfu"] for t in study.trials if t.user_attrs.get("feasible"))
    assert stored < brute(m, "mfu")  # the stored front alone would answer wrongly
    assert best(study, objective="mfu")["value"] == pytest.approx(brute(m, "mfu"), rel=1e-12)


def test_budget_not_among_objectives_is_exact(exhaustive):
    study, m = exhaustive
    days = np.sort(np.asarray(m["time_to_train_high_days"], dtype=float)[np.asarray(m["feasible"], dtype=bool)])
    limit = float(days[len(days) // 2])
    res = best(study, objective="cost_to_train_usd", max_days_high=limit)
    assert res["value"] == pytest.approx(brute(m, "cost_to_train_usd", time_to_train_high_days=limit), rel=1e-12)
    res = best(study, objective="mfu", max_gpus=512, max_cost_usd=1.5e6)
    assert res["value"] == pytest.approx(brute(m, "mfu", gpus=512, cost_to_train_usd=1.5e6), rel=1e-12)
    # a budget nothing meets
    assert best(study, objective="mfu", max_days_high=float(days[0]) / 2) is None


def test_on_front_answers_stay_stored(exhaustive):
    study, m = exhaustive
    res = best(study, max_cost_usd=1.5e6)
    assert "source" not in res and res["trial"] is not None
    assert res["value"] == pytest.approx(brute(m, "time_to_train_days", cost_to_train_usd=1.5e6), rel=1e-12)
