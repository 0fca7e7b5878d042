"""Exact answers (issue 11): `best` on an exhaustive study is exact for every metric and budget,
not only for the objectives its stored front was taken over."""
from __future__ import annotations

import json

import numpy as np
import optuna
import pytest

from cosearch.search.space import direction, parse_space
from cosearch.study import best, run_study, why_nothing
from conftest import GPT3_SMALL_SPACE, run_cli

SMALL = {**GPT3_SMALL_SPACE, "constraints": {"max_cost_usd": 2.0e6}}


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


@pytest.mark.parametrize("budget, metric, objective", [
    ("max_days_high", "time_to_train_high_days", "cost_to_train_usd"),
    ("max_cost_usd_high", "cost_to_train_high_usd", "step_time_s"),  # best --max-cost-usd-high
])
def test_pessimistic_budget_off_the_objectives_is_exact(exhaustive, budget, metric, objective):
    """A bound on the 80 % band's upper end (not an objective): exact against brute force; one out of reach
    answers nothing, and why_nothing names it with the lowest value in the space."""
    study, m = exhaustive
    values = np.sort(np.asarray(m[metric], dtype=float)[np.asarray(m["feasible"], dtype=bool)])
    limit = float(values[len(values) // 2])
    res = best(study, objective=objective, **{budget: limit})
    assert res["value"] == pytest.approx(brute(m, objective, **{metric: limit}), rel=1e-12)
    assert res["metrics"][metric] <= limit
    assert best(study, objective=objective, **{budget: float(values[0]) / 2}) is None
    msg = why_nothing(study, objective=objective, **{budget: float(values[0]) / 2})
    assert f"--{budget.replace('_', '-')}" in msg and f"lowest {metric} in the space: {values[0]:,.4g}" in msg


def test_budgets_not_among_objectives_are_exact(exhaustive):
    study, m = exhaustive
    res = best(study, objective="mfu", max_gpus=512, max_cost_usd=1.5e6)
    assert res["value"] == pytest.approx(brute(m, "mfu", gpus=512, cost_to_train_usd=1.5e6), rel=1e-12)


def test_on_front_answers_stay_stored(exhaustive):
    study, m = exhaustive
    res = best(study, max_cost_usd=1.5e6)
    assert "source" not in res and res["trial"] is not None
    assert res["value"] == pytest.approx(brute(m, "time_to_train_days", cost_to_train_usd=1.5e6), rel=1e-12)


# ------------------------------------------------------------------------------------- calibration
DOC_CSV = """# illustrative numbers
name,model,seq_len,global_batch,gpu,gpus,network_gbps,tp,pp,microbatch,recompute,zero,measured_step_time_s
7b-1node,llama2-7b,4096,256,h100-sxm,8,,1,1,2,selective,3,9.81
7b-4node,llama2-7b,4096,256,h100-sxm,32,100,1,1,2,selective,3,3.02
13b-4node,llama2-13b,4096,256,h100-sxm,32,100,2,1,1,selective,1,5.77
"""
PUBLISHED = __import__("pathlib").Path(__file__).resolve().parents[1] / "experiments/data/validation/published_runs_public.csv"


def test_fitted_matmul_scale_never_beats_the_measured_large_gemm():
    from cosearch.calibration import FITTABLE
    from cosearch.hardware import catalog

    hi = FITTABLE["matmul_scale"][1]
    for gid, e in catalog().items():
        for eta, frac in ((e["matmul_efficiency"], e["efficiency"]["large_gemm_bf16"]),
                          (e["matmul_efficiency_fp8"], e["efficiency"].get("large_gemm_fp8"))):
            if frac is not None:
                assert eta * hi <= frac + 1e-9, gid
    for name, (lo, up) in FITTABLE.items():
        assert 0 <= lo < up, name
        if name.endswith(("efficiency", "overlap")):
            assert up <= 1.0, name


def test_doc_example_is_refused_without_force(tmp_path, capsys):
    csv = tmp_path / "m.csv"
    csv.write_text(DOC_CSV)  # pasted from docs/calibration.md, '#' line included
    out = tmp_path / "p.yaml"
    rc, stdout, err = run_cli(capsys, "calibrate", str(csv), "--out", str(out), "--json")
    r = json.loads(stdout)
    assert rc == 1 and not out.exists() and r["worse_than_base"] and not r["written"]
    assert "worse than the base profile" in err and "--force" in err and len(err.strip().splitlines()) == 1
    assert r["fitted"]["matmul_scale"] <= __import__("cosearch.calibration", fromlist=["FITTABLE"]).FITTABLE["matmul_scale"][1]
    rc, stdout, err = run_cli(capsys, "calibrate", str(csv), "--out", str(out), "--force")
    assert rc == 0 and out.exists() and "worse than the base profile" in stdout
    # the forced profile cannot push GPT-3 on A100 past the GPU's measured large-GEMM fraction
    from cosearch import estimate
    from cosearch.calibration import read_profile_file

    prof, _ = read_profile_file(out)
    sc = {"model": "gpt3-175b", "training": {"global_batch": 1536}, "cluster": {"gpu": "a100-80gb", "gpus": 1024},
          "plan": {"tp": 8, "pp": 16, "microbatch": 1, "recompute": "selective", "sequence_parallel": True, "zero": 1}}
    assert estimate(sc, prof)["mfu"] < 0.76


def test_published_runs_refit_of_the_default_is_refused(tmp_path, capsys):
    """The default profile was fitted on these runs: a refit holds out worse and is not written."""
    out = tmp_path / "p.yaml"
    rc, stdout, err = run_cli(capsys, "calibrate", str(PUBLISHED), "--out", str(out), "--folds", "3", "--json")
    r = json.loads(stdout)
    assert r["format"] == "published"
    worse = r["after_held_out"]["median"] > r["before"]["median"] or r["after_held_out"]["p90"] > r["before"]["p90"]
    assert r["worse_than_base"] == worse
    assert (rc == 1 and not out.exists()) if worse else (rc == 0 and out.exists())


def test_why_nothing_reports_the_space_minimum(exhaustive):
    study, m = exhaustive
    low = brute(m, "time_to_train_high_days")
    msg = why_nothing(study, objective="mfu", max_days_high=low / 2)
    assert "lowest time_to_train_high_days in the space" in msg and f"{low:,.4g}" in msg and "\n" not in msg


def test_best_refuses_when_the_stored_space_is_not_the_enumerated_one():
    """A study whose stored space cannot reproduce its enumeration: a one-line refusal, not a wrong answer."""
    from cosearch.errors import CosearchError

    sp = parse_space(json.loads(json.dumps(SMALL)))
    st = optuna.storages.InMemoryStorage()
    study = run_study(sp, "bad", st, sampler="exhaustive").study
    info = dict(study.user_attrs["cosearch"])
    info["summary"] = {**info["summary"], "points": int(sp.size) + 1}
    study.set_user_attr("cosearch", info)
    with pytest.raises(CosearchError, match="cannot answer mfu exactly"):
        best(study, objective="mfu")


def test_cli_best_on_exhaustive_journal_study_is_exact(tmp_path, capsys):
    import yaml

    sp = tmp_path / "space.yaml"
    sp.write_text(yaml.safe_dump(SMALL))
    journal = str(tmp_path / "j.journal")
    rc, _, err = run_cli(capsys, "run", str(sp), "--study", "ex", "--storage", journal, "--sampler", "exhaustive")
    assert rc == 0, err
    space = parse_space(json.loads(json.dumps(SMALL)))
    m = space.evaluate_rows(space.rows_of_flat(np.arange(int(space.size))))
    for metric in ("mfu", "memory_gib"):
        rc, out, err = run_cli(capsys, "best", "--study", "ex", "--storage", journal, "--objective", metric, "--json")
        assert rc == 0, err
        assert json.loads(out)["value"] == pytest.approx(brute(m, metric), rel=1e-12)
    rc, out, _ = run_cli(capsys, "best", "--study", "ex", "--storage", journal, "--objective", "mfu")
    assert rc == 0 and "re-enumerated" in out


def test_calibration_reports_constants_at_their_bound(tmp_path, capsys):
    csv = tmp_path / "m.csv"
    csv.write_text(DOC_CSV)
    rc, stdout, _ = run_cli(capsys, "calibrate", str(csv), "--out", str(tmp_path / "p.yaml"), "--json")
    r = json.loads(stdout)
    from cosearch.calibration import FITTABLE
    assert "network_efficiency" in r["at_bound"]  # the 3 rows want a faster network than exists
    for name in r["at_bound"]:  # (and, on 32 GPUs paced by the slowest, a GEMM at the best measured one)
        lo, hi = FITTABLE[name]
        assert min(abs(r["fitted"][name] - lo), abs(r["fitted"][name] - hi)) < 1e-3 * hi, name


def test_a_gpu_without_a_price_stays_a_candidate():
    """b300 has no price in the catalog, so its cost is missing. The exhaustive front counted a missing cost
    as a reason to drop the point: `best` named an H100 plan at 2.6x the step time of the fastest (b300) one,
    where a sampled study (cost None ranks last) finds b300. A missing cost now ranks worst, not out."""
    space = {"model": "llama3-8b", "training": {"global_batch": 64, "precision": "bf16", "tokens": 1.0e11},
             "cluster": {"gpu": ["h100-sxm", "b300"], "gpus": [8]},
             "plan": {"tp": [1, 2], "microbatch": [1, 2], "recompute": ["none", "full"]},
             "objectives": ["step_time_s"]}
    sp = parse_space(space)
    m = sp.evaluate_rows(sp.rows_of_flat(np.arange(int(sp.size))))
    feas = np.asarray(m["feasible"], dtype=bool)
    assert np.isnan(np.asarray(m["cost_to_train_usd"], dtype=float)[feas]).any()  # the case under test
    study = run_study(sp, "unpriced", optuna.storages.InMemoryStorage(), sampler="exhaustive").study
    res = best(study)
    assert res["scenario"]["cluster"]["gpu"] == "b300"
    assert res["value"] == pytest.approx(brute(m, "step_time_s"), rel=1e-12)
    for metric in ("mfu", "memory_gib"):  # re-enumerated answers (off the stored front) keep it too
        assert best(study, objective=metric)["value"] == pytest.approx(brute(m, metric), rel=1e-12)
    # a cost budget cannot hold a plan whose cost is unknown
    capped = best(study, max_cost_usd=1.0e12)
    assert capped["scenario"]["cluster"]["gpu"] == "h100-sxm"
    assert capped["value"] == pytest.approx(brute(m, "step_time_s", cost_to_train_usd=1.0e12), rel=1e-12)


def test_best_point_of_an_objective_no_point_has_is_none():
    """Every point of this space is on an unpriced GPU: no cost to rank by (was an IndexError)."""
    from cosearch.samplers import best_point

    sp = parse_space({"model": "llama3-8b", "training": {"global_batch": 64, "precision": "bf16", "tokens": 1.0e11},
                      "cluster": {"gpu": ["b300"], "gpus": [8]}, "plan": {"tp": [1, 2]}, "objectives": ["step_time_s"]})
    flat, counts = best_point(sp, "cost_to_train_usd", {})
    assert flat is None and counts["feasible"] == 2
    assert best_point(sp, "step_time_s", {})[0] is not None


MIXED = {"model": "llama3-8b", "training": {"global_batch": 64, "precision": "bf16", "tokens": 1.0e11},
         "cluster": {"gpu": ["h100-sxm", "b300"], "gpus": [8, 16]},
         "plan": {"tp": [1, 2], "microbatch": [1, 2], "recompute": ["none", "full"]},
         "objectives": ["time_to_train_days", "cost_to_train_usd"]}


def _mixed(**over):
    sp = parse_space(json.loads(json.dumps(dict(MIXED, **over))))
    return sp, sp.evaluate_rows(sp.rows_of_flat(np.arange(int(sp.size))))


def _front_rows(points):
    return sorted(tuple(None if v is None or v != v else round(float(v), 6) for v in p) for p in points)


@pytest.mark.parametrize("sampler", ["exhaustive", "grid", "random"])
def test_an_unpriced_gpu_wins_on_time_with_cost_an_objective(sampler):
    """Objectives [time, cost] with b300 (no price) among the GPUs: its trials have no cost, so they were
    FAIL (sampled) or dropped from the front (exhaustive), and `best` named a 9.84-day H100 plan where a
    2.97-day b300 plan exists. A missing cost now ranks worst, never out, and every sampler that covers the
    space gives the brute-force answer and front; a cost budget still never holds an unknown cost."""
    from cosearch.search.pareto import pareto_mask
    from cosearch.study import pareto_front

    sp, m = _mixed()
    feas = np.asarray(m["feasible"], dtype=bool)
    time_, cost = (np.asarray(m[k], dtype=float)[feas] for k in ("time_to_train_days", "cost_to_train_usd"))
    assert np.isnan(cost).any() and np.isfinite(cost).any()  # the case under test
    res = run_study(sp, "mixed", optuna.storages.InMemoryStorage(), sampler=sampler,
                    n_trials=int(sp.size) if sampler == "grid" else 400, seed=1)
    study = res.study
    if sampler == "random":  # seeded: it visits every point, so its answers are exact too
        assert len({json.dumps(t.params, sort_keys=True) for t in study.trials}) == int(sp.size)
    fastest = best(study)
    assert fastest["scenario"]["cluster"]["gpu"] == "b300"
    assert fastest["value"] == pytest.approx(float(time_.min()), rel=1e-12)
    assert fastest["values"] == {"time_to_train_days": fastest["value"], "cost_to_train_usd": None}
    pts = np.stack([time_, cost], axis=1)
    want = pts[pareto_mask(np.where(np.isnan(pts), 1e300, pts))]  # a missing cost: worse than any real one
    got = pareto_front(study)[["time_to_train_days", "cost_to_train_usd"]].to_numpy(dtype=float)
    assert _front_rows(got) == _front_rows(want) and len(want) == 3  # b300 (cost unknown) and two H100 plans
    capped = best(study, max_cost_usd=1.0e12)
    assert capped["scenario"]["cluster"]["gpu"] == "h100-sxm"
    assert capped["value"] == pytest.approx(float(time_[np.isfinite(cost)].min()), rel=1e-12)
    assert best(study, objective="cost_to_train_usd")["value"] == pytest.approx(float(np.nanmin(cost)), rel=1e-12)
    for metric in ("mfu", "memory_gib"):
        v = np.asarray(m[metric], dtype=float)[feas]
        assert best(study, objective=metric)["value"] == pytest.approx(
            float(v.max() if direction(metric) == "maximize" else v.min()), rel=1e-12)
    assert res.n_feasible == sum(1 for t in study.trials if t.user_attrs.get("feasible"))  # FAIL ones count


def test_exhaustive_and_swept_fronts_keep_points_without_an_objective_value():
    """The single-process and the (dask) range sweeps keep the b300 points, whose cost objective is
    missing, and count the objectives' front as `pareto` lists it."""
    from cosearch.distributed import sweep
    from cosearch.samplers import run_exhaustive
    from cosearch.study import pareto_front

    sp, _ = _mixed()
    one = run_exhaustive(sp, chunk=7)
    swept = sweep(sp, task_size=5, sub_chunk=3).to_exhaustive(sp)
    assert np.array_equal(one.rows, swept.rows)
    assert any(s["cluster"]["gpu"] == "b300" for s in sp.scenarios(one.rows))
    study = run_study(sp, "ex", optuna.storages.InMemoryStorage(), sampler="exhaustive").study
    n = len(pareto_front(study))
    assert n == 3 and one.summary["objective_front_size"] == swept.summary["objective_front_size"] == n
