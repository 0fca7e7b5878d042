"""The public API refuses arguments of the wrong type in one line naming the argument (a
CosearchError, exit code 2 from the CLI) instead of an AttributeError / TypeError deep inside; and
``cosearch run`` without ``--sampler`` resumes a study with the method it was started with."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

import cosearch
from cosearch.cli import main
from cosearch.errors import CosearchError
from conftest import GPT3_SMALL_SPACE

SPACE = GPT3_SMALL_SPACE
NOT_A_PATH = [None, {}, [], 1.5, np.int64(3), 0]  # 0 would be os.stat of stdin, np.int64 "embedded null character"


def refused(call, field: str, *words: str) -> CosearchError:
    """``call()`` raises a one-line CosearchError naming ``field`` (and saying ``words``)."""
    with pytest.raises(CosearchError) as info:
        call()
    err = info.value
    assert err.field == field and "\n" not in str(err), str(err)
    assert all(w in err.message for w in words), str(err)
    return err


@pytest.fixture
def space_file(tmp_path: Path) -> str:
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(SPACE))
    return str(p)


# ------------------------------------------------------------------------------ bug 1: best / pareto_front
@pytest.mark.parametrize("study", [None, {}, "c70", 3])
def test_study_queries_refuse_what_is_not_a_study(study):
    for query in (cosearch.best, cosearch.pareto_front):
        refused(lambda: query(study), "study", "optuna study", "load_study")


def test_study_queries_still_answer_a_study(tmp_path):
    res = cosearch.run_study(SPACE, "q", str(tmp_path / "q.journal"), sampler="random", n_trials=8)
    assert len(cosearch.pareto_front(res.study)) >= 1 and cosearch.best(res.study) is not None


# ------------------------------------------------------------------------------ bug 2: front
@pytest.mark.parametrize("df", [{}, [], "df.csv", None])
def test_front_refuses_what_is_not_a_dataframe(df):
    refused(lambda: cosearch.front(df), "df", "DataFrame")


# ------------------------------------------------------------------------------ bug 3: load_space / run_study
@pytest.mark.parametrize("path", NOT_A_PATH, ids=repr)
def test_load_space_refuses_what_is_not_a_path(path):
    refused(lambda: cosearch.load_space(path), "path", "os.PathLike")


@pytest.mark.parametrize("space", [x for x in NOT_A_PATH if x != {}], ids=repr)
def test_run_study_refuses_what_is_not_a_space(space, tmp_path):
    journal = tmp_path / "r.journal"
    refused(lambda: cosearch.run_study(space, "r", str(journal)), "space", "SearchSpace", "dict", "path")


def test_space_paths_and_dicts_still_load(space_file):
    assert cosearch.load_space(Path(space_file)).size == cosearch.load_space(space_file).size == 216
    assert cosearch.sweep(SPACE).shape[0] == 216


# ------------------------------------------------------------------------------ bug 4: estimate(profile=...)
@pytest.mark.parametrize("profile", ["x", {}, 3, "profile.yaml"])
def test_estimate_and_sweep_refuse_what_is_not_a_profile(profile, gpt3_scenario):
    refused(lambda: cosearch.estimate(gpt3_scenario, profile=profile), "profile", "Profile")
    refused(lambda: cosearch.sweep(SPACE, profile=profile), "profile", "Profile")


def test_estimate_takes_a_profile_or_none(gpt3_scenario):
    from cosearch.model.profile import DEFAULT_PROFILE

    assert cosearch.estimate(gpt3_scenario, profile=DEFAULT_PROFILE) == cosearch.estimate(gpt3_scenario)


# ------------------------------------------------------------------------------ bug 5: scenario_columns
def test_scenario_columns_reads_a_dict_like_a_scenario(gpt3_scenario):
    assert cosearch.scenario_columns(gpt3_scenario) == cosearch.scenario_columns(cosearch.load_scenario(gpt3_scenario))


@pytest.mark.parametrize("sc", [None, 3, [], np.int64(3)], ids=repr)
def test_scenario_columns_refuses_the_rest(sc):
    refused(lambda: cosearch.scenario_columns(sc), "scenario", "mapping")


# ------------------------------------------------------------------------------ bug 6: resuming without --sampler
def run_cli(args, capsys):
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_run_without_sampler_resumes_a_sampled_study(space_file, tmp_path, capsys):
    """A finite space's `auto` is exhaustive for a new study, but resumes a tpe study with tpe."""
    common = [space_file, "--study", "d", "--storage", str(tmp_path / "x.journal")]
    assert run_cli(["run", *common, "--sampler", "tpe", "--trials", "10"], capsys)[0] in (0, 1)
    rc, out, err = run_cli(["run", *common, "--trials", "14"], capsys)
    assert rc in (0, 1) and not err.startswith("error"), err
    assert "method tpe" in out and "d: 14 trials (4 new" in out


def test_run_refuses_trials_before_the_study_kind(space_file, tmp_path, capsys):
    common = [space_file, "--study", "d", "--storage", str(tmp_path / "x.journal")]
    assert run_cli(["run", *common, "--sampler", "tpe", "--trials", "6"], capsys)[0] in (0, 1)
    rc, _, err = run_cli(["run", *common, "--trials", "0"], capsys)
    assert rc == 2 and err.startswith("error: --trials: must be a positive integer") and err.count("\n") == 1
    rc, _, err = run_cli(["run", *common, "--sampler", "exhaustive"], capsys)
    assert rc == 2 and err.count("\n") == 1 and "a exhaustive" not in err, err
    assert "study 'd' is sampled (--sampler tpe)" in err and "use --sampler tpe or another --study name" in err


def test_run_study_auto_resumes_with_the_stored_method(tmp_path):
    storage = str(tmp_path / "s.journal")
    assert cosearch.run_study(SPACE, "s", storage, sampler="random", n_trials=5).method == "random"
    res = cosearch.run_study(SPACE, "s", storage, n_trials=9)  # sampler auto
    assert res.method == "random" and res.n_trials == 9
    refused(lambda: cosearch.run_study(SPACE, "s", storage, n_trials=0), "--trials", "positive integer")
    assert cosearch.run_study(SPACE, "new", storage).method == "exhaustive"  # a new study: auto picks as before
