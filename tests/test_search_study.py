"""Studies: exhaustive fronts against brute force, every sampler on a tiny space, constraints,
budget queries, resume, and the stored trial contract."""
from __future__ import annotations

import json
import math

import numpy as np
import optuna
import pytest

from cosearch.errors import CosearchError
from cosearch.samplers import METHODS, front_metrics, run_exhaustive
from cosearch.search.space import direction, parse_space
from cosearch.study import best, feasible_trials, list_studies, pareto_front, run_study, why_nothing
from conftest import GPT3_SMALL_SPACE

TINY = {**GPT3_SMALL_SPACE, "constraints": {"max_cost_usd": 1.0e6}}


def space(**over):
    d = json.loads(json.dumps(TINY))
    d.update(over)
    return parse_space(d)


def brute_front(points: np.ndarray, senses) -> set[int]:
    """O(n^2) definition over finite rows: i is kept unless some j is <= everywhere and < somewhere,
    or equal and earlier."""
    y = points * np.array([-1.0 if s == "maximize" else 1.0 for s in senses])
    keep = set()
    for i in range(len(y)):
        dominated = False
        for j in range(len(y)):
            if j != i and np.all(y[j] <= y[i]) and (np.any(y[j] < y[i]) or j < i):
                dominated = True
                break
        if not dominated:
            keep.add(i)
    return keep


@pytest.mark.parametrize("over", [
    {},
    {"objectives": ["step_time_s", "memory_gib", "mfu"], "constraints": {"max_gpus": 1000}},
    {"objectives": ["cost_to_train_usd"], "constraints": {"max_days": 30, "max_cost_usd": 2.0e6}},
])
def test_exhaustive_front_equals_brute_force(over):
    sp = space(**over)
    metrics = front_metrics(sp)
    res = run_exhaustive(sp, chunk=50)  # many chunks: exercises merge_fronts
    flat = np.arange(int(sp.size))
    m = sp.evaluate_rows(sp.rows_of_flat(flat))
    feas = np.flatnonzero(m["feasible"])
    pts = np.stack([m[k][feas] for k in metrics], axis=1)
    expect = sorted(feas[i] for i in brute_front(pts, [direction(k) for k in metrics]))
    got = sorted(np.ravel_multi_index(res.rows.T.astype(int), [len(d.choices) for d in sp.dims]).tolist())
    assert got == expect
    assert res.summary["points"] == sp.size and res.summary["feasible"] == len(feas)


def test_exhaustive_study_stores_front_and_summary():
    st = optuna.storages.InMemoryStorage()
    sp = space()
    res = run_study(sp, "ex", st, sampler="exhaustive")
    info = res.study.user_attrs["cosearch"]
    assert info["kind"] == "exhaustive" and info["summary"]["complete"] and info["summary"]["points"] == sp.size
    assert res.n_trials == info["summary"]["front_size"] > 0
    assert all(t.user_attrs["feasible"] for t in res.study.trials)
    # answered from the stored front: same as scanning every point
    m = sp.evaluate_rows(sp.rows_of_flat(np.arange(int(sp.size))))
    costs = np.sort(m["cost_to_train_usd"][m["feasible"]])
    for limit in (costs[0], costs[len(costs) // 2], costs[-1], 2 * costs[-1]):
        ok = m["feasible"] & (m["cost_to_train_usd"] <= limit)
        b = best(res.study, max_cost_usd=limit)
        assert b["value"] == pytest.approx(m["time_to_train_days"][ok].min())
    # running it again adds nothing
    again = run_study(sp, "ex", st, sampler="exhaustive")
    assert again.n_trials == res.n_trials and again.n_new == 0


def test_exhaustive_study_uses_the_given_profile():
    """With a slower profile the stored exact front is the brute-force front under that profile
    (not the default profile's front re-labelled)."""
    from cosearch.model.profile import DEFAULT_PROFILE

    slow = DEFAULT_PROFILE.model_copy(update={"matmul_scale": 0.5})
    sp = space(objectives=["time_to_train_days"], constraints={"max_days": 40})
    res = run_study(sp, "slow", optuna.storages.InMemoryStorage(), sampler="exhaustive", profile=slow)
    m = sp.evaluate_rows(sp.rows_of_flat(np.arange(int(sp.size))), slow)
    d = sp.evaluate_rows(sp.rows_of_flat(np.arange(int(sp.size))))
    assert res.summary["feasible"] == int(m["feasible"].sum()) < int(d["feasible"].sum())  # fewer meet 40 days
    assert best(res.study)["value"] == pytest.approx(float(m["time_to_train_days"][m["feasible"]].min()), rel=1e-12)


@pytest.mark.parametrize("method", [m for m in METHODS if m != "exhaustive"])
def test_every_sampler_finds_feasible_points(method):
    if method == "gp":
        pytest.importorskip("torch")
    single = method == "cmaes"
    sp = space(objectives=["step_time_s"]) if single else space()
    n = 11 if method == "gp" else 60  # GP: 10 random start-up trials, then one GP step (slow on CPU)
    res = run_study(sp, f"s-{method}", optuna.storages.InMemoryStorage(), sampler=method, n_trials=n, seed=1)
    assert res.n_trials == n and res.n_new == n
    trials = res.study.get_trials()
    assert len(trials) == n
    assert res.n_feasible > 0
    front = pareto_front(res.study)
    assert len(front) >= 1
    for t in trials:
        assert set(t.user_attrs) >= {"scenario", "metrics", "feasible"}
        json.dumps(t.user_attrs)  # JSON-able
        if t.state == optuna.trial.TrialState.COMPLETE:
            assert t.values == [t.user_attrs["metrics"][o] for o in sp.objectives]
            assert (max(t.constraints.values()) <= 0) == t.user_attrs["feasible"]


def test_cmaes_refuses_several_objectives():
    with pytest.raises(CosearchError, match="one objective"):
        run_study(space(), "c", optuna.storages.InMemoryStorage(), sampler="cmaes", n_trials=5)


def test_unknown_sampler_and_grid_limits():
    with pytest.raises(CosearchError, match="unknown sampler 'annealing'"):
        run_study(space(), "x", optuna.storages.InMemoryStorage(), sampler="annealing", n_trials=5)
    res = run_study(space(), "g", optuna.storages.InMemoryStorage(), sampler="grid", n_trials=10_000)
    assert res.n_trials == space().size  # the grid stops at its size


def test_infeasible_points_never_reported():
    st = optuna.storages.InMemoryStorage()
    sp = space(constraints={"max_cost_usd": 8.0e5})
    res = run_study(sp, "inf", st, sampler="random", n_trials=120, seed=3)
    trials = res.study.get_trials()
    assert any(not t.user_attrs["feasible"] for t in trials)  # some infeasible points were tried
    front = pareto_front(res.study)
    feas_numbers = {t.number for t in feasible_trials(res.study)}
    assert set(front["trial"]) <= feas_numbers
    for t in trials:
        if t.number in set(front["trial"]):
            assert t.user_attrs["metrics"]["cost_to_train_usd"] <= 8.0e5
    b = best(res.study, objective="mfu")
    assert b["metrics"]["feasible"] == 1.0 and b["trial"] in feas_numbers
    # the best mfu over all trials, feasible or not, is at least as high
    assert max(t.user_attrs["metrics"]["mfu"] or 0 for t in trials) >= b["value"]


def test_budget_queries_pick_the_right_stored_trial():
    st = optuna.storages.InMemoryStorage()
    res = run_study(space(constraints={}), "bq", st, sampler="random", n_trials=150, seed=0)
    feas = feasible_trials(res.study)
    costs = sorted(t.user_attrs["metrics"]["cost_to_train_usd"] for t in feas)
    limit = costs[len(costs) // 3]
    b = best(res.study, max_cost_usd=limit)
    ok = [t for t in feas if t.user_attrs["metrics"]["cost_to_train_usd"] <= limit]
    assert b["value"] == min(t.user_attrs["metrics"]["time_to_train_days"] for t in ok)
    assert b["metrics"]["cost_to_train_usd"] <= limit
    b2 = best(res.study, max_gpus=512, max_days=1e9)
    assert b2["metrics"]["gpus"] <= 512
    assert best(res.study, max_cost_usd=costs[0] / 2) is None
    msg = why_nothing(res.study, max_cost_usd=costs[0] / 2)
    assert "max-cost-usd" in msg and "lowest cost_to_train_usd" in msg and "\n" not in msg
    with pytest.raises(CosearchError, match="unknown metric"):
        best(res.study, objective="speed")


def test_resume_continues_to_n_and_reseeds():
    st = optuna.storages.InMemoryStorage()
    sp = space()
    r1 = run_study(sp, "res", st, sampler="random", n_trials=30, seed=5)
    r2 = run_study(sp, "res", st, sampler="random", n_trials=70, seed=5)
    assert (r1.n_trials, r2.n_trials, r2.n_new) == (30, 70, 40)
    runs = r2.summary["runs"]
    assert runs[0]["seed_used"] == 5 and runs[1]["seed_used"] != 5
    r3 = run_study(sp, "res", st, sampler="tpe", n_trials=70, seed=5)
    assert r3.n_new == 0
    # a different space under the same name is refused
    with pytest.raises(CosearchError, match="different space"):
        run_study(space(constraints={"max_cost_usd": 2.0e6}), "res", st, sampler="random", n_trials=80)
    rows = list_studies(st)
    assert rows[0]["study"] == "res" and rows[0]["trials"] == 70


def test_duplicates_keep_constraints():
    """A point asked twice (common in discrete spaces) must carry its constraints both times."""
    st = optuna.storages.InMemoryStorage()
    sp = space(plan={"tp": 8, "pp": [8, 16], "microbatch": 1, "recompute": ["none", "full"]},
               cluster={"gpu": "a100-80gb", "gpus": 1024}, constraints={})
    res = run_study(sp, "dup", st, sampler="random", n_trials=40, seed=0)
    assert res.summary["cache_hits"] > 0
    by_point: dict = {}
    for t in res.study.get_trials():
        by_point.setdefault(json.dumps(t.params, sort_keys=True), []).append(t)
    for ts in by_point.values():
        assert all(t.constraints == ts[0].constraints for t in ts)
        assert all(t.user_attrs["feasible"] == ts[0].user_attrs["feasible"] for t in ts)


def test_empty_feasible_region_is_an_error():
    with pytest.raises(CosearchError, match="empty feasible region"):
        run_study(space(constraints={"max_cost_usd": 10.0}), "e", optuna.storages.InMemoryStorage(), sampler="tpe",
                  n_trials=10)
    with pytest.raises(CosearchError, match="empty feasible region"):
        run_study(space(constraints={"max_cost_usd": 10.0}), "e2", optuna.storages.InMemoryStorage(), sampler="exhaustive")


def test_journal_storage_roundtrip(tmp_path):
    path = tmp_path / "s.journal"
    res = run_study(space(), "j", str(path), sampler="nsga2", n_trials=60, seed=0)
    assert res.n_trials == 60
    from cosearch.study import load_study

    st = load_study("j", str(path))
    assert len(st.get_trials()) == 60
    assert all(t.state.is_finished() for t in st.get_trials())
    front = pareto_front(st)
    assert not front.empty and math.isfinite(front["time_to_train_days"].iloc[0])


def test_auto_method_enumerates_small_spaces_and_samples_large_ones():
    from cosearch.samplers import AUTO_EXHAUSTIVE_POINTS, resolve_method

    small = space()
    assert small.size <= AUTO_EXHAUSTIVE_POINTS and resolve_method("auto", small) == "exhaustive"
    big = dict(json.loads(json.dumps(TINY)))
    big["cluster"] = {"gpu": ["a100-80gb", "h100-sxm"], "gpus": {"min": 64, "max": 8192, "step": 64},
                      "network_gbps": {"min": 100, "max": 800, "step": 1}}
    big["plan"] = dict(big["plan"], zero=[0, 1, 2, 3], sequence_parallel=[False, True], interleave=[1, 2, 4])
    large = parse_space(big)
    assert large.is_finite() and large.size > AUTO_EXHAUSTIVE_POINTS
    assert resolve_method("auto", large) == "nsga2"
    assert resolve_method("auto", parse_space({**big, "objectives": ["step_time_s"], "constraints": {}})) == "tpe"
    cont = parse_space({**TINY, "cluster": {"gpu": "a100-80gb", "gpus": 1024, "network_gbps": {"min": 100.0, "max": 800.0}}})
    assert not cont.is_finite() and resolve_method("auto", cont) == "nsga2"
    assert resolve_method("TPE", small) == "tpe"  # explicit choices pass through
    # a study run with auto on a small space is the exact enumeration
    res = run_study(small, "auto", optuna.storages.InMemoryStorage())
    assert res.method == "exhaustive" and res.study.user_attrs["cosearch"]["kind"] == "exhaustive"


def test_scipy_heuristics_rank_a_zero_cost_as_the_cheapest_not_as_missing():
    """A cluster priced at 0 (owned hardware) makes every cost 0: differential evolution and dual annealing
    scored log(0) as missing, so every point looked infeasible and the search lost its objective."""
    from cosearch.samplers._scipy import PENALTY, _log_objectives, _score

    sp = space(cluster={"gpu": "h100-sxm", "gpus": [512, 1024], "price_usd_per_gpu_hour": 0.0}, constraints={})
    m = sp.evaluate_rows(sp.rows_of_flat(np.arange(int(sp.size))))
    feas = np.asarray(m["feasible"], dtype=bool)
    assert feas.any() and np.all(np.asarray(m["cost_to_train_usd"], dtype=float)[feas] == 0.0)
    score = _score(sp, m, 0, None)
    time_ = np.asarray(m["time_to_train_days"], dtype=float)
    assert np.all(score[feas] < PENALTY) and np.all(score[~feas] >= PENALTY)
    assert int(np.argmin(score)) == int(np.argmin(np.where(feas, time_, np.inf)))  # the fastest feasible plan
    # 0 is the best value of a minimized metric and the worst of a maximized one; NaN stays missing
    sp2 = space(objectives=["cost_to_train_usd", "mfu"])
    lv = _log_objectives(sp2, {"cost_to_train_usd": np.array([0.0, 5.0, np.nan]), "mfu": np.array([0.0, 0.5, np.nan])})
    assert lv[0, 0] < lv[1, 0] and lv[0, 1] > lv[1, 1] and np.isnan(lv[2]).all()
