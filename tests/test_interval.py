"""The 80 % prediction interval of every estimate (cosearch.model.interval, experiments/prediction_interval.py):
the band holds the estimate, matches the shipped file, is the same on the scalar and vectorized paths, can be
optimized and budgeted, is stored with trials, and covers about 80 % of the published runs held out by source."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest
import yaml
from conftest import experiment_script, random_rows

from cosearch import estimate
from cosearch.errors import CosearchError
from cosearch.model import interval
from cosearch.search.space import parse_space
from cosearch.study import best, pareto_front, run_study

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "cosearch" / "data" / "prediction_interval.yaml"

SMALL = {
    "model": "llama2-7b",
    "training": {"global_batch": 512, "tokens": 1.0e11, "precision": "bf16"},
    "cluster": {"gpu": ["a100-80gb", "h100-sxm"], "gpus": [16, 32, 64]},
    "plan": {"tp": [1, 2, 4], "pp": [1, 2], "microbatch": [1, 2], "recompute": ["none", "full"], "zero": [1, 3]},
    "objectives": ["time_to_train_high_days"],
}


def _space(**over):
    d = json.loads(json.dumps(SMALL))
    d.update(over)
    return parse_space(d)


def _all_rows(space) -> np.ndarray:
    grids = np.meshgrid(*[np.arange(len(d.choices)) for d in space.dims], indexing="ij")
    return np.stack([g.ravel() for g in grids], axis=1).astype(float)


def _script():
    return experiment_script("prediction_interval")


def test_factors_match_the_shipped_file():
    doc = yaml.safe_load(SHIPPED.read_text())
    lo, hi = interval.interval_factors()
    assert doc["coverage"] == 0.8
    assert lo == pytest.approx(math.exp(doc["log_low"]), rel=1e-12)
    assert hi == pytest.approx(math.exp(doc["log_high"]), rel=1e-12)
    assert lo < 1.0 < hi
    assert doc["made_by"] == "experiments/prediction_interval.py" and doc["rows"] > 100


def test_band_contains_the_estimate_on_the_vectorized_path():
    sp = _space()
    rows = random_rows(sp, 300, seed=0)
    m = sp.evaluate_rows(rows)
    lo, hi = interval.interval_factors()
    ok = np.asarray(m["valid"], dtype=bool)
    assert ok.sum() > 50
    for key, low, high in (("step_time_s", "step_time_low_s", "step_time_high_s"),
                           ("time_to_train_days", "time_to_train_low_days", "time_to_train_high_days"),
                           ("cost_to_train_usd", "cost_to_train_low_usd", "cost_to_train_high_usd")):
        v, a, b = (np.asarray(m[k])[ok] for k in (key, low, high))
        assert np.all(a < v) and np.all(v < b), key
        np.testing.assert_allclose(a / v, lo, rtol=1e-12)
        np.testing.assert_allclose(b / v, hi, rtol=1e-12)


def test_cloud_band_is_on_the_expected_values():
    d = {"model": "llama2-7b", "training": {"global_batch": 512, "tokens": 2.0e11, "precision": "bf16"},
         "cloud": {"instance": ["aws/p5.48xlarge", "gcp/a2-ultragpu-8g"], "instances": [2, 4], "pricing": ["on_demand", "spot"]},
         "plan": {"tp": [1, 2], "pp": [1], "microbatch": [1], "recompute": ["full"]},
         "objectives": ["time_to_train_high_days", "cost_to_train_high_usd"]}
    sp = parse_space(d)
    rows = _all_rows(sp)
    m = sp.evaluate_rows(rows)
    lo, hi = interval.interval_factors()
    np.testing.assert_allclose(m["time_to_train_high_days"], m["time_to_train_days"] * hi, rtol=1e-12)
    np.testing.assert_allclose(m["cost_to_train_low_usd"], m["cost_to_train_usd"] * lo, rtol=1e-12)
    i = int(np.flatnonzero(m["valid"] & m["spot_available"])[0])
    r = estimate(sp.scenarios(rows[i:i + 1])[0])
    assert r["time_to_train_interval_days"][1] == pytest.approx(m["time_to_train_high_days"][i], rel=1e-9)


@pytest.mark.parametrize("sampler", ["exhaustive", "tpe"])
def test_pessimistic_objective_best_equals_brute_force(sampler):
    sp = _space()
    st = optuna.storages.InMemoryStorage()
    n = 1000 if sampler == "exhaustive" else 200
    run_study(sp, f"hi-{sampler}", st, sampler=sampler, n_trials=n, seed=0)
    study = optuna.load_study(study_name=f"hi-{sampler}", storage=st)
    res = best(study)
    assert res["objective"] == "time_to_train_high_days"
    m = sp.evaluate_rows(_all_rows(sp))
    feas = np.asarray(m["feasible"], dtype=bool)
    brute = float(np.min(np.asarray(m["time_to_train_high_days"])[feas]))
    if sampler == "exhaustive":
        assert res["value"] == pytest.approx(brute, rel=1e-12)
    else:  # a sampled study: its best is a real point, never better than the true best
        assert res["value"] >= brute * (1 - 1e-12)
    # the stored trial carries its band: best() needs no model run to show it
    band = res["step_time_interval_s"]
    assert band is not None and band[0] < res["metrics"]["step_time_s"] < band[1]
    front = pareto_front(study)
    assert {"step_time_low_s", "step_time_high_s", "time_to_train_low_days", "time_to_train_high_days"} <= set(front.columns)


def test_max_days_high_budget_and_best_limit():
    sp = _space(objectives=["cost_to_train_usd"], constraints={"max_days_high": 3.0})
    st = optuna.storages.InMemoryStorage()
    run_study(sp, "bud", st, sampler="exhaustive")
    study = optuna.load_study(study_name="bud", storage=st)
    m = sp.evaluate_rows(_all_rows(sp))
    ok = np.asarray(m["valid"] & m["fits"], dtype=bool) & (np.asarray(m["time_to_train_high_days"]) <= 3.0)
    res = best(study)
    assert res["metrics"]["time_to_train_high_days"] <= 3.0
    assert res["value"] == pytest.approx(float(np.min(np.asarray(m["cost_to_train_usd"])[ok])), rel=1e-12)
    # best --max-days-high on the stored study, tighter than the space's budget
    tight = best(study, max_days_high=2.0)
    ok2 = ok & (np.asarray(m["time_to_train_high_days"]) <= 2.0)
    assert tight["value"] == pytest.approx(float(np.min(np.asarray(m["cost_to_train_usd"])[ok2])), rel=1e-12)


def test_loso_coverage_of_the_shipped_band():
    """The shipped band covers about its conformal level's share of the published runs' leave-one-source-out
    residuals, recomputed here with the script's own code (so a model change that moves the residuals shows)."""
    pi = _script()
    c = pi.load_candidates()
    r = pi.loso_residuals(c)
    doc = yaml.safe_load(SHIPPED.read_text())
    assert len(r) > 100 and np.isfinite(r).all()
    cov = float(pi.covered(r, doc["log_low"], doc["log_high"]).mean())
    assert doc["level"] - 0.10 <= cov <= doc["level"] + 0.05, (
        f"the shipped band (conformal level {doc['level']:.0%}) covers {cov:.1%} of the current residuals: re-run "
        "python experiments/prediction_interval.py")
    # the band at the shipped level holds its conformal level's share of the residuals (at least the level, barely more)
    level = doc["level"]
    lo, hi = pi.conformal_bounds(r, level)
    assert level <= float(pi.covered(r, lo, hi).mean()) <= level + 3.0 / len(r) + 0.02


def test_conformal_bounds_are_order_statistics():
    from_script = _script().conformal_bounds
    r = np.arange(1.0, 20.0)  # n = 19: k_lo = floor(20 * 0.1) = 2, k_hi = ceil(20 * 0.9) = 18
    assert from_script(r, 0.8) == (2.0, 18.0)
    assert from_script(np.arange(5.0), 0.8) == (-math.inf, math.inf)  # too few for an 80 % band


def test_missing_band_gives_nan_and_a_clear_error(monkeypatch, caplog):
    import cosearch.data

    def missing(name):
        if name == interval.INTERVAL_FILE:
            raise FileNotFoundError(name)
        return original(name)

    original = cosearch.data.data_doc
    scenario = _space().scenarios(random_rows(_space(), 1, seed=0))[0]
    monkeypatch.setattr(cosearch.data, "data_doc", missing)
    interval.reload()
    try:
        with caplog.at_level("WARNING"):
            assert all(math.isnan(f) for f in interval.interval_factors())
        assert "no prediction interval" in caplog.text
        r = estimate(scenario)
        assert r["step_time_interval_s"] is None and r["step_time_high_s"] is None and r["step_time_s"] > 0
        with pytest.raises(CosearchError) as err:
            _space()
        assert "prediction interval" in str(err.value)
    finally:
        monkeypatch.undo()
        interval.reload()
    assert interval.interval_factors()[1] > 1.0


def test_cli_estimate_and_best_print_the_band(tmp_path):
    out = subprocess.run([sys.executable, "-m", "cosearch", "estimate", str(ROOT / "examples" / "gpt3-175b.yaml")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    r = estimate(ROOT / "examples" / "gpt3-175b.yaml")
    lo, hi = r["step_time_interval_s"]
    line = next(ln for ln in out.stdout.splitlines() if "step time" in ln)
    assert f"80 % band {lo:.3g}-{hi:.3g} s" in line
    assert "80 % band" in next(ln for ln in out.stdout.splitlines() if "time to train" in ln)
    js = json.loads(subprocess.run([sys.executable, "-m", "cosearch", "estimate", "--json",
                                    str(ROOT / "examples" / "gpt3-175b.yaml")], capture_output=True, text=True).stdout)
    assert js["step_time_interval_s"] == pytest.approx([lo, hi])
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump(SMALL))
    journal = str(tmp_path / "s.journal")
    run = subprocess.run([sys.executable, "-m", "cosearch", "run", str(space), "--study", "s", "--storage", journal],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "80 % band" in run.stdout
    b = subprocess.run([sys.executable, "-m", "cosearch", "best", "--study", "s", "--storage", journal, "--max-days-high", "5"],
                       capture_output=True, text=True)
    assert b.returncode == 0, b.stderr
    assert "80 % band" in b.stdout and "max_days_high 5" in b.stdout


def test_nested_leave_one_source_out_coverage_keeps_the_80_percent_promise():
    """Each source held out of the band (and of every fit behind it): the band made from the other
    sources holds 75-85 % of the held-out rows (issue 10's goal), recomputed from the current model."""
    pi = _script()
    c = pi.load_candidates()
    r = pi.loso_residuals(c)
    level, nested, _ = pi.smallest_level(r, c.rows["source_id"].to_numpy(), pi.other_sources_residuals(c))
    assert 0.75 <= float(nested.mean()) <= 0.85
    assert level == yaml.safe_load(SHIPPED.read_text())["level"]  # the shipped band was made at today's level


MOE_SCENARIO = {"model": "mixtral-8x7b", "training": {"global_batch": 256, "precision": "bf16", "tokens": 1.0e12},
                "cluster": {"gpu": "h100-sxm", "gpus": 64},
                "plan": {"tp": 2, "pp": 1, "ep": 8, "microbatch": 1, "recompute": "full", "zero": 1,
                         "sequence_parallel": True}}


def test_moe_rows_take_the_moe_band_from_the_shipped_file():
    """A model with routed experts gets the file's ``moe`` band (its errors are wider than dense ones), a dense
    model the dense band; the factors are read from the yaml here, not from the module."""
    doc = yaml.safe_load(SHIPPED.read_text())
    m_lo, m_hi = math.exp(doc["moe"]["log_low"]), math.exp(doc["moe"]["log_high"])
    d_lo, d_hi = math.exp(doc["log_low"]), math.exp(doc["log_high"])
    assert m_hi > d_hi  # the MoE runs' residuals are wider
    r = estimate(MOE_SCENARIO)
    t = r["step_time_s"]
    assert r["step_time_interval_s"] == pytest.approx([t * m_lo, t * m_hi], rel=1e-12)
    assert r["time_to_train_interval_days"] == pytest.approx([r["time_to_train_days"] * m_lo,
                                                              r["time_to_train_days"] * m_hi], rel=1e-12)
    dense = estimate({**MOE_SCENARIO, "model": "llama2-7b", "plan": {**MOE_SCENARIO["plan"], "ep": 1}})
    assert dense["step_time_interval_s"] == pytest.approx([dense["step_time_s"] * d_lo, dense["step_time_s"] * d_hi],
                                                          rel=1e-12)


def test_moe_band_per_row_in_a_mixed_batch():
    """The vectorized path picks the band row by row: dense and MoE rows of one batch each get their own."""
    from cosearch import evaluate
    from cosearch.scenario import load_scenario, scenario_columns
    from cosearch.validation import stack_columns

    rows = [scenario_columns(load_scenario(MOE_SCENARIO)),
            scenario_columns(load_scenario({**MOE_SCENARIO, "model": "llama2-7b", "plan": {**MOE_SCENARIO["plan"], "ep": 1}}))]
    out = evaluate(stack_columns(rows))  # a column only one row sets takes the model's default in the other
    ratio_hi = out["step_time_high_s"] / out["step_time_s"]
    assert ratio_hi[0] == pytest.approx(interval.interval_factors(moe=True)[1], rel=1e-12)
    assert ratio_hi[1] == pytest.approx(interval.interval_factors()[1], rel=1e-12)


def test_file_without_moe_band_gives_moe_rows_the_dense_band(tmp_path, monkeypatch, caplog):
    doc = yaml.safe_load(SHIPPED.read_text())
    doc["moe"] = {"log_low": 0.2, "log_high": 0.5}  # does not hold the estimate: refused, logged
    (tmp_path / interval.INTERVAL_FILE).write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("COSEARCH_DATA_DIR", str(tmp_path))
    interval.reload()
    try:
        with caplog.at_level("WARNING"):
            assert interval.interval_factors(moe=True) == interval.interval_factors()
        assert "moe band" in caplog.text
    finally:
        monkeypatch.undo()
        interval.reload()
    assert interval.interval_factors(moe=True)[1] > interval.interval_factors()[1]


def test_data_dir_band_file_is_read_safely(tmp_path, monkeypatch, caplog):
    """A COSEARCH_DATA_DIR prediction_interval.yaml was parsed by plain yaml.safe_load, past the safe reader's
    caps the data module promises for user files: a billion-laughs alias file (10**9 leaves once anything walks
    it) was taken, its band used. Now it is refused at once, logged with the file's path: no band."""
    import time

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10**9 leaves expanded
    path = tmp_path / interval.INTERVAL_FILE
    path.write_text("\n".join(lines + ["log_low: -0.1", "log_high: 0.1"]) + "\n")
    monkeypatch.setenv("COSEARCH_DATA_DIR", str(tmp_path))
    interval.reload()
    try:
        start = time.perf_counter()
        with caplog.at_level("WARNING"):
            assert all(math.isnan(f) for f in interval.interval_factors())
        assert time.perf_counter() - start < 5.0
        assert "no prediction interval" in caplog.text and "aliases" in caplog.text and str(path) in caplog.text
    finally:
        monkeypatch.undo()
        interval.reload()
    assert interval.interval_factors()[1] > 1.0


def test_moe_band_nested_coverage_keeps_the_80_percent_promise():
    """The MoE band recomputed from the current model: made from the other MoE sources, it holds 75-85 % of each
    held-out source's rows taken together, and the shipped MoE band covers 70-90 % of today's residuals."""
    pi = _script()
    res = pi.moe_analysis()
    assert len(res["residuals"]) >= 60 and np.isfinite(res["residuals"]).all()
    assert 0.75 <= float(res["nested"].mean()) <= 0.85
    moe = yaml.safe_load(SHIPPED.read_text())["moe"]
    cov = float(pi.covered(res["residuals"], moe["log_low"], moe["log_high"]).mean())
    assert 0.70 <= cov <= 0.90, f"the shipped MoE band covers {cov:.1%}: re-run python experiments/prediction_interval.py"


def test_front_table_bands_the_first_banded_objective():
    """The front table shows the band of a column it shows: the first objective that has one (step time here),
    not time to train, which is not a column of a step-time/cost-per-step front."""
    import io

    import pandas as pd
    from rich.console import Console

    from cosearch.cli.study import print_front

    front = pd.DataFrame({"trial": [0], "step_time_s": [2.0], "cost_usd_per_step": [1.0], "mfu": [0.5],
                          "memory_gib": [40.0], "gpus": [64], "time_to_train_days": [3.0],
                          "step_time_low_s": [1.7], "step_time_high_s": [2.3],
                          "time_to_train_low_days": [2.5], "time_to_train_high_days": [3.4]})
    buf = io.StringIO()
    print_front(Console(file=buf, width=400), front, ["step_time_s", "cost_usd_per_step"], rows=5)
    assert "step_time_s 80 % band" in buf.getvalue() and "1.7-2.3" in buf.getvalue()
    buf = io.StringIO()
    print_front(Console(file=buf, width=400), front, ["cost_usd_per_step"], rows=5)
    assert "time_to_train_days 80 % band" in buf.getvalue() and "2.5-3.4" in buf.getvalue()
