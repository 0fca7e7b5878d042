"""`cosearch best --json` writes counts (GPUs, parallel degrees, micro-batches, tokens, parameters) as JSON integers,
as the Pareto CSV does, and yes/no metrics (valid, fits, feasible, ...) as true/false: metrics store every value as a
float, and the record printed ``"gpus": 1024.0``, ``"fits": 1.0`` and ``"tokens": 300000000000.0``."""
from __future__ import annotations

import csv
import json

import pytest

from cosearch.cli import main
from cosearch.study_queries import _ints_for_counts
from test_search_cli import write_space

#: Metric keys that count, and must come out as ints (whole numbers in every model row).
COUNT_METRICS = ("gpus", "dp", "num_microbatches", "params", "active_params")
#: Metric keys that are yes/no, and must come out as bools (every model row's boolean columns).
FLAG_METRICS = ("valid", "fits", "feasible", "within_budget", "expansion_fits")
#: Metric keys that are measurements, and stay as stored even when whole (memory 80.0 GiB is a float).
NOT_COUNTS = ("memory_gib", "step_time_s", "time_to_train_days")


def _cli(capsys, *args):
    rc = main(list(args))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """One exhaustive and one sampled study of the small test space, in one journal."""
    tmp = tmp_path_factory.mktemp("best")
    space, journal = write_space(tmp), str(tmp / "s.journal")
    assert main(["run", space, "--study", "ex", "--sampler", "exhaustive", "--storage", journal]) == 0
    assert main(["run", space, "--study", "tpe", "--sampler", "tpe", "--trials", "40", "--storage", journal]) == 0
    return tmp, journal


def _assert_counts_are_ints(res):
    m, sc = res["metrics"], res["scenario"]
    for key in COUNT_METRICS:
        assert type(m[key]) is int, (key, m[key])
    for key in FLAG_METRICS:
        assert m[key] is True, (key, m[key])  # best answers feasible points only
    for section, keys in (("cluster", ("gpus",)), ("training", ("global_batch", "tokens")),
                          ("plan", ("tp", "pp", "microbatch"))):
        for key in keys:
            assert type(sc[section][key]) is int, (section, key, sc[section][key])
    assert m["gpus"] == sc["cluster"]["gpus"]
    assert m["dp"] * sc["plan"]["tp"] * sc["plan"]["pp"] * sc["plan"].get("cp", 1) == m["gpus"]
    for key in NOT_COUNTS:
        assert type(m[key]) is float, key


@pytest.mark.parametrize("study", ["ex", "tpe"])
@pytest.mark.parametrize("extra", [[], ["--max-gpus", "1024"], ["--objective", "gpus"], ["--objective", "mfu"]])
def test_best_json_counts_are_integers(studies, capsys, study, extra):
    """Stored trials (sampled; the exhaustive front) and re-enumerated answers (an exhaustive study asked about a
    metric its front does not cover: mfu) alike."""
    _, journal = studies
    out = _cli(capsys, "best", "--study", study, "--storage", journal, "--json", *extra)
    res = json.loads(out)
    _assert_counts_are_ints(res)
    if study == "ex" and extra[-1:] == ["mfu"]:  # not a metric the stored front is exact over
        assert res["source"].startswith("re-enumerated")
    if extra[:1] == ["--max-gpus"]:
        assert res["limits"] == {"max_gpus": 1024} and type(res["limits"]["max_gpus"]) is int
        assert res["metrics"]["gpus"] <= 1024
    if extra == ["--objective", "gpus"]:
        assert type(res["value"]) is int and res["value"] == res["metrics"]["gpus"] == 512  # the space's smallest


def test_best_json_counts_match_the_pareto_csv(studies, capsys):
    """The best trial's counts read the same in `best --json` and in the Pareto CSV row of that trial."""
    tmp, journal = studies
    res = json.loads(_cli(capsys, "best", "--study", "tpe", "--storage", journal, "--json"))
    front = tmp / "front.csv"
    _cli(capsys, "pareto", "--study", "tpe", "--storage", journal, "--csv", str(front))
    row = next(r for r in csv.DictReader(front.open()) if int(r["trial"]) == res["trial"])
    assert row["gpus"] == json.dumps(res["metrics"]["gpus"]) == json.dumps(res["scenario"]["cluster"]["gpus"])
    assert row["plan.tp"] == json.dumps(res["scenario"]["plan"]["tp"])
    assert row["training.tokens"] == json.dumps(res["scenario"]["training"]["tokens"]) == "300000000000"


def test_best_json_prints_flags_as_true_false_and_counts_as_ints(studies, capsys):
    """The text of the record, as a reader of `best --json` sees it (the space writes tokens as 3.0e11)."""
    _, journal = studies
    out = _cli(capsys, "best", "--study", "tpe", "--storage", journal, "--json")
    for key in FLAG_METRICS:
        assert f'"{key}": true' in out, key
        assert f'"{key}": 1.0' not in out, key
    assert '"tokens": 300000000000\n' in out and '"params": ' in out and '"params": 174575321088.0' not in out


def test_flags_are_the_models_boolean_metrics(studies):
    """_FLAGS names every boolean column the model returns (stored as 1.0 / 0.0), and nothing else."""
    import numpy as np

    from cosearch.search.space import load_space
    from cosearch.study_queries import _FLAGS

    tmp, _ = studies
    space = load_space(tmp / "space.yaml")
    m = space.evaluate_rows(np.zeros((2, len(space.dims))))
    assert {k for k, v in m.items() if np.asarray(v).dtype == bool} == set(_FLAGS) == set(FLAG_METRICS)


def test_flags_as_bool_converts_zero_and_one_only():
    from cosearch.study_queries import _flags_as_bool

    got = _flags_as_bool({"fits": 1.0, "valid": 0.0, "feasible": True, "within_budget": None, "expansion_fits": 0.5,
                          "mfu": 1.0, "gpus": 1})
    assert got == {"fits": True, "valid": False, "feasible": True, "within_budget": None, "expansion_fits": 0.5,
                   "mfu": 1.0, "gpus": 1}
    assert got["fits"] is True and got["valid"] is False and type(got["mfu"]) is float and type(got["gpus"]) is int


def test_ints_for_counts_converts_whole_counts_only():
    got = _ints_for_counts({"gpus": 64.0, "dp": 2.5, "tp": float("nan"), "memory_gib": 80.0, "mfu": 1.0,
                            "cluster": {"gpus": 8.0, "inventory": {"h100-sxm": 16.0}}, "plan": {"ep": None},
                            "training": {"tokens": 3.0e11}, "tokens_per_s": 4.0e5})
    assert got == {"gpus": 64, "dp": 2.5, "tp": got["tp"], "memory_gib": 80.0, "mfu": 1.0,
                   "cluster": {"gpus": 8, "inventory": {"h100-sxm": 16}}, "plan": {"ep": None},
                   "training": {"tokens": 300000000000}, "tokens_per_s": 4.0e5}
    assert type(got["training"]["tokens"]) is int and type(got["tokens_per_s"]) is float
    assert type(got["gpus"]) is int and type(got["memory_gib"]) is float and type(got["mfu"]) is float
    assert type(got["cluster"]["inventory"]["h100-sxm"]) is int and got["tp"] != got["tp"]  # NaN stays NaN
