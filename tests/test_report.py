"""cosearch report: a self-contained HTML file with the expected plots, correct front and budget
table, PNGs, and studies where some plots cannot be drawn."""
import json
import re
import numpy as np
import optuna
import pytest

from _studies import built_report, make_study, real_study
from cosearch.visualization import best_per_budget, param_importances, study_data, write_report
from cosearch.visualization._data import pareto_mask


@pytest.fixture(scope="module")
def built():
    return built_report()


def _without_plotlyjs(text):
    start = text.index("<script type='text/javascript' id='plotlyjs'>")
    end = text.index("</script>", start)
    return text[:start] + text[end:], text[start:end]


def test_report_is_self_contained(built):
    text, bundle = _without_plotlyjs(built["html"].read_text())
    assert text.startswith("<!DOCTYPE html>")
    # no external script, stylesheet, font or image
    assert not re.search(r"<script[^>]+src\s*=", text, re.I)
    assert not re.search(r"<link[^>]+href\s*=", text, re.I)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text, re.I)
    assert "@import" not in text and "url(http" not in text
    # plotly.js itself is inlined, exactly once
    assert text.count("Plotly.newPlot") == len(built["plots"])
    assert "plotly.js v" in bundle and len(bundle) > 3_000_000
    assert "plotly.js v" not in text  # inlined once


def test_report_has_the_expected_plot_divs_and_tables(built):
    text = built["html"].read_text()
    for div in built["plots"]:
        assert re.search(rf'<div id="{div}" class="plotly-graph-div"', text), div
    assert text.count('class="plotly-graph-div"') == len(built["plots"])
    meta = json.loads(re.search(r"<script type='application/json' id='cosearch-report'>(.*?)</script>", text).group(1)
                      .replace("&quot;", '"'))
    assert meta["plots"] == built["plots"]
    assert "<table class='budget'>" in text and "Best configuration per budget" in text
    # hover texts carry the plan
    assert "recompute=" in text and "tp=" in text and "dp=" in text
    assert "wrote" in built["stdout"] and "plots: pareto-front" in built["stdout"]


def test_pngs_are_written(built):
    names = sorted(p.name for p in built["png_dir"].iterdir())
    assert names == ["history.png", "importance.png", "memory_breakdown.png", "pareto.png", "time_breakdown.png"]
    for p in built["png_dir"].iterdir():
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_front_matches_brute_force_and_budget_table_is_the_best_within_budget(built):
    study = optuna.load_study(study_name=built["study"], storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(built["journal"]))))
    data = study_data(study)
    feas = data.feasible
    pts = feas[data.objectives].to_numpy(float)
    brute = [i for i in range(len(pts))  # non-dominated, and the first of identical points (TPE repeats some)
             if not any(np.all(pts[j] <= pts[i]) and np.any(pts[j] < pts[i]) for j in range(len(pts)))
             and not any(np.array_equal(pts[j], pts[i]) for j in range(i))]
    assert sorted(feas.iloc[brute]["trial"]) == sorted(data.front["trial"])
    table = best_per_budget(data)
    assert len(table) >= 2
    for row in table.to_dict("records"):
        ok = feas[feas["cost_to_train_usd"] <= row["budget"]]
        assert row["trial"] == ok.loc[ok["time_to_train_days"].idxmin(), "trial"]
    assert data.info["constraints"]["max_cost_usd"] in list(table["budget"])  # the study's own budget is a level


def test_importance_is_seeded_and_normalized(built):
    study = optuna.load_study(study_name=built["study"], storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(str(built["journal"]))))
    data = study_data(study)
    a, b = param_importances(data), param_importances(data)
    assert a.ok and a.values == b.values
    for obj in data.objectives:
        assert sum(a.values[obj].values()) == pytest.approx(1.0)
        assert "plan.tp" in a.values[obj]  # ':index' stripped from parameter names


@pytest.mark.parametrize("real", [True, False], ids=["run_study", "plain-optuna"])
def test_exhaustive_study_has_no_history_or_importance(tmp_path, real):
    if real:  # cosearch's own exhaustive enumeration (its front has a single point here)
        study = real_study(tmp_path / "s.journal", "exh", sampler="exhaustive", space="searchspaces/gpt3-175b-parallelism.yaml")
    else:  # a front of several points
        study = make_study(None, "exh", n_trials=120, kind="exhaustive")
    rep = write_report(study, tmp_path / "r.html")
    assert rep.plots == ["pareto-front", "time-breakdown", "memory-breakdown"]
    text = (tmp_path / "r.html").read_text()
    assert "No search history" in text and "Parameter importance is not shown" in text
    assert len(rep.data.front) >= 1


def test_single_objective_and_empty_feasible_studies(tmp_path):
    single = study_data(make_study(None, "one", n_trials=40, objectives=["time_to_train_days"]))
    assert single.front_objectives == ["time_to_train_days", "cost_to_train_usd"]
    assert single.front["time_to_train_days"].min() == single.feasible["time_to_train_days"].min()
    tiny = make_study(None, "few", n_trials=2, seed=3)
    rep = write_report(tiny, tmp_path / "few.html")  # too few trials for importance: a note, no crash
    assert "param-importance" not in rep.plots and any("importance" in n for n in rep.notes)


def test_pareto_mask_keeps_first_duplicate_and_ignores_nan():
    pts = np.array([[1, 2], [1, 2], [2, 1], [2, 2], [np.nan, 0]], float)
    assert pareto_mask(pts, ["minimize", "minimize"]).tolist() == [True, False, True, False, False]
    assert pareto_mask(pts, ["maximize", "minimize"]).tolist() == [False, False, True, False, False]


def test_cli_errors_are_one_line(tmp_path, built, capsys, monkeypatch):
    from cosearch.cli import main

    assert main(["report", "--study", "nope", "--storage", str(built["journal"]), "--out", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --study") and built["study"] in err and len(err.splitlines()) == 1
    monkeypatch.chdir(tmp_path)  # no default journal here
    assert main(["report", "--study", "x", "--out", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert "cosearch_studies.journal" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "cosearch_studies.journal").exists() and not (tmp_path / "x.html").exists()


@pytest.mark.parametrize("sampler", ["exhaustive", "grid"])
def test_a_front_point_without_a_cost_stays_on_the_report(tmp_path, sampler):
    """One objective (step time) traded off against cost, on h100 (priced) and b300 (no price): the fastest
    plan is a b300 one with no cost. The report's front dropped it (a NaN row is never on a front), so its
    front, plots and breakdowns showed only H100 plans, 3.3x slower. A missing cost now ranks worst: the
    b300 plan is on the front, its cost shows as missing ("-"), and the plots draw it as a dotted line."""
    from cosearch.search.space import parse_space
    from cosearch.study import run_study
    from cosearch.visualization._data import fmt_metric
    from cosearch.visualization._pareto import plot_pareto_front
    from cosearch.visualization._static import pareto_png

    space = {"model": "llama3-8b", "training": {"global_batch": 64, "precision": "bf16", "tokens": 1.0e11},
             "cluster": {"gpu": ["h100-sxm", "b300"], "gpus": [8, 16]},
             "plan": {"tp": [1, 2], "microbatch": [1, 2], "recompute": ["none", "full"]}, "objectives": ["step_time_s"]}
    sp = parse_space(space)
    m = sp.evaluate_rows(sp.rows_of_flat(np.arange(int(sp.size))))
    feas = np.asarray(m["feasible"], dtype=bool)
    fastest = float(np.asarray(m["step_time_s"], dtype=float)[feas].min())
    study = run_study(sp, "mixed", optuna.storages.InMemoryStorage(), sampler=sampler, n_trials=int(sp.size)).study
    data = study_data(study)
    assert data.front_objectives == ["step_time_s", "cost_to_train_usd"]
    top = data.front.iloc[0]
    assert top["step_time_s"] == pytest.approx(fastest, rel=1e-12) and np.isnan(top["cost_to_train_usd"])
    assert data.scenarios[data.trials.index.get_loc(top.name)]["cluster"]["gpu"] == "b300"
    assert fmt_metric("cost_to_train_usd", top["cost_to_train_usd"]) == "-"
    fig = plot_pareto_front(data)
    assert [s.x0 for s in fig.layout.shapes] == [pytest.approx(fastest, rel=1e-12)]  # the dotted line
    assert pareto_png(data, tmp_path / "p.png").stat().st_size > 0
    table = best_per_budget(data)  # a budget on cost never holds the b300 plan
    assert not table.empty and all(np.isfinite(table["cost_to_train_usd"].astype(float)))
