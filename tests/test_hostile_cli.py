"""Hostile CLI input found by fuzzing: each case failed before its fix with a traceback
(KeyError, TypeError, AttributeError, IsADirectoryError, FileExistsError, ValueError), invalid
JSON (``Infinity``), a cut-off message, or a doc the code did not keep (a worker after a
single-process ``run``). Now: one line ``error: FIELD: ...`` on stderr and exit code 2."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_search_cli import SPACE  # noqa: E402

DEEPPOOL = str(ROOT / "searchspaces" / "deeppool-burst.yaml")  # no training.tokens


def _one_line_error(rc, err, *words):
    assert rc == 2, err[-2000:]
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err[-2000:]
    for w in words:
        assert w in err, err


@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    """A journal with an exhaustive DeepPool study ``dp`` and a sampled one ``dpr`` (random, 12 trials)."""
    d = tmp_path_factory.mktemp("hostile_cli")
    journal = str(d / "s.journal")
    from cosearch.cli import main

    assert main(["run", DEEPPOOL, "--study", "dp", "--storage", journal]) == 0
    assert main(["run", DEEPPOOL, "--study", "dpr", "--storage", journal, "--sampler", "random", "--trials", "12"]) == 0
    return {"dir": d, "journal": journal}


# --- 1. a journal line of valid JSON in the wrong shape ------------------------------------------
BAD_LINES = [
    ('{"op_code":0,"worker_id":"x"}', "lacks field 'study_name'"),
    ("[1,2,3]", "JSON array"),
    ('"text"', "JSON string"),
    ("7", "JSON number"),
    ('{"op_code":99,"worker_id":"x"}', "op_code 99"),
    ('{"op_code":0,"worker_id":"x","study_name":"z","directions":[7]}', "'directions'"),
    ('{"op_code":4,"worker_id":"x","study_id":"zero","datetime_start":null}', "'study_id'"),
    ('{"op_code":6,"worker_id":"x","trial_id":0,"state":1,"values":[1.0]}', "'datetime_complete'"),
    ('{"op_code":2,"worker_id":"x","study_id":0,"user_attr":{}}', "'user_attr'"),
    ('{"op_code":5,"worker_id":"x","trial_id":0,"param_name":"a","param_value_internal":9,'
     '"distribution":"{\\"name\\": \\"CategoricalDistribution\\", \\"attributes\\": {\\"choices\\": [1, 2]}}"}',
     "does not fit"),
]


@pytest.mark.parametrize("line, why", BAD_LINES)
def test_journal_line_of_the_wrong_shape_is_reported_as_corrupt(studies, tmp_path, capsys, line, why):
    bad = tmp_path / "bad.journal"
    shutil.copy(studies["journal"], bad)
    n = len(bad.read_bytes().splitlines()) + 1
    with open(bad, "a") as f:
        f.write(line + "\n" + '{"op_code":0,"worker_id":"x","study_name":"later","directions":[1]}\n')
    for args in (["studies"], ["best", "--study", "dp"], ["run", DEEPPOOL, "--study", "dp"]):
        rc, _, err = run_cli(capsys, *args, "--storage", str(bad))
        _one_line_error(rc, err, "--storage", str(bad), f"corrupt at line {n}", why)


def test_journal_wrong_shape_in_a_cut_last_line_is_still_skipped(studies, tmp_path, capsys):
    bad = tmp_path / "cut.journal"
    shutil.copy(studies["journal"], bad)
    with open(bad, "a") as f:
        f.write('[1,2,')  # a write cut by a crash: no newline, dropped as before
    rc, out, _ = run_cli(capsys, "studies", "--storage", str(bad), "--json")
    assert rc == 0 and {r["study"] for r in json.loads(out)} == {"dp", "dpr"}


def test_every_line_optuna_and_cosearch_write_has_the_right_shape(studies, tmp_path):
    from cosearch.storages import resolve_storage
    from cosearch.storages._journal import log_problem

    path = tmp_path / "optuna.journal"
    study = optuna.create_study(study_name="o", storage=resolve_storage(str(path)))
    dists = {"x": optuna.distributions.FloatDistribution(0, 10), "c": optuna.distributions.CategoricalDistribution(["a", "b"])}
    study.add_trial(optuna.trial.create_trial(params={"x": 1.0, "c": "b"}, distributions=dists, value=1.0,
                                              user_attrs={"u": 1}, system_attrs={"s": 2}))
    t = study.ask(dists)
    t.report(0.5, 1)
    t.set_user_attr("k", [1, 2])
    study.tell(t, 3.0)
    study.enqueue_trial({"x": 2.0})
    study.tell(study.ask(dists), float("inf"))
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    study.set_user_attr("a", {"b": None})
    for journal in (path, Path(studies["journal"])):
        for line in journal.read_bytes().splitlines():
            assert log_problem(json.loads(line)) is None, line[:300]


# --- 2. --catalog YAML of the wrong shape ---------------------------------------------------------
@pytest.mark.parametrize("text, where", [
    ("providers: [1]", "providers:"),
    ("providers: {x: 5}", "providers.x:"),
    ("providers: {x: {instances: [1]}}", "providers.x.instances:"),
    ("providers: {x: {instances: {i1: 5}}}", "providers.x.instances.i1:"),
    ("providers: {aws: {instances: {p5.48xlarge: [1]}}}", "providers.aws.instances.p5.48xlarge:"),
    ("defaults: [1]", "defaults:"),
])
def test_catalog_of_the_wrong_shape_names_the_key_path(tmp_path, capsys, text, where):
    from cosearch.cloud.catalog import clear_cache

    cat = tmp_path / "cat.yaml"
    cat.write_text(text + "\n")
    clear_cache()
    rc, _, err = run_cli(capsys, "catalog", "--catalog", str(cat), "--json")
    _one_line_error(rc, err, str(cat), where, "must be a mapping")
    scenario = tmp_path / "sc.yaml"
    scenario.write_text(yaml.safe_dump({
        "model": "gpt3-1.3b", "training": {"global_batch": 512, "tokens": 1e10},
        "cloud": {"instance": "aws/p5.48xlarge", "instances": 2, "catalog": str(cat)}, "plan": {"tp": 1, "pp": 1}}))
    rc, _, err = run_cli(capsys, "estimate", str(scenario))
    _one_line_error(rc, err, where, "must be a mapping")


def test_catalog_override_of_the_right_shape_still_merges(tmp_path, capsys):
    cat = tmp_path / "cat.yaml"
    cat.write_text("providers: {aws: {instances: {p5.48xlarge: {on_demand_usd_per_hour: 1.5}}}, new: {instances: null}}\n")
    rc, out, err = run_cli(capsys, "catalog", "--catalog", str(cat), "--provider", "aws", "--json")
    assert rc == 0, err
    assert {r["instance"]: r["on_demand_usd_per_hour"] for g in json.loads(out) for r in g["instances"]}["p5.48xlarge"] == 1.5


# --- 3. output paths that cannot be written -------------------------------------------------------
def test_unwritable_output_paths_name_the_flag(studies, tmp_path, capsys):
    journal = studies["journal"]
    folder = tmp_path / "folder"
    for name in ("folder", "folder.png", "folder.html"):
        (tmp_path / name).mkdir()
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    cases = [
        (["report", "--out", str(folder)], "--out"),
        (["report", "--out", str(tmp_path / "r.html"), "--png", str(a_file)], "--png"),
        (["pareto", "--plot", str(tmp_path / "folder.png")], "--plot"),
        (["pareto", "--plot", str(tmp_path / "folder.html")], "--plot"),
        (["pareto", "--plot", str(a_file / "x.png")], "--plot"),
        (["pareto", "--csv", str(folder)], "--csv"),
    ]
    if Path("/proc/self").is_dir():
        cases.append((["pareto", "--plot", "/proc/x.png"], "--plot"))
    for args, flag in cases:
        rc, _, err = run_cli(capsys, *args, "--study", "dp", "--storage", journal)
        _one_line_error(rc, err, flag, "cannot write", repr(args[-1]))
    assert a_file.read_text() == "x"


def test_unwritable_output_paths_of_the_other_commands_name_the_flag(tmp_path, capsys):
    """export --out, catalog --csv and calibrate --out write through the same one writer as report/pareto."""
    folder = tmp_path / "folder"
    folder.mkdir()
    scenario = tmp_path / "sc.yaml"
    scenario.write_text(yaml.safe_dump({"model": "gpt3-1.3b", "training": {"global_batch": 512},
                                        "cluster": {"gpu": "h100-sxm", "gpus": 8}, "plan": {"tp": 1, "pp": 1}}))
    published = ROOT / "experiments" / "data" / "validation" / "published_runs_public.csv"
    for args, flag in ((["export", str(scenario), "--format", "megatron", "--out", str(folder)], "--out"),
                       (["catalog", "--csv", str(folder)], "--csv"),
                       (["calibrate", str(published), "--params", "matmul_scale", "--force", "--out", str(folder)],
                        "--out")):
        rc, _, err = run_cli(capsys, *args)
        _one_line_error(rc, err, flag, "cannot write", repr(str(folder)))


# --- 4. --dask with a malformed address -----------------------------------------------------------
@pytest.mark.parametrize("address", ["bogus", "h:abc", "foo://x:1", "tcp://h:99999", "h:0"])
def test_malformed_dask_address_names_the_flag_and_the_form(tmp_path, capsys, address):
    pytest.importorskip("distributed")
    rc, _, err = run_cli(capsys, "run", DEEPPOOL, "--study", "d", "--storage", str(tmp_path / "d.journal"),
                         "--sampler", "exhaustive", "--dask", address)
    _one_line_error(rc, err, "--dask", "tcp://HOST:PORT")


# --- 5. best: finite budgets, an objective without a value ----------------------------------------
@pytest.mark.parametrize("flag", ["--max-days-high", "--max-cost-usd", "--max-gpus", "--max-days"])
def test_best_refuses_an_infinite_budget(studies, capsys, flag):
    rc, out, err = run_cli(capsys, "best", "--study", "dpr", "--storage", studies["journal"], flag, "inf", "--json")
    _one_line_error(rc, err, flag, "finite positive")
    assert "Infinity" not in out


@pytest.mark.parametrize("study", ["dp", "dpr"])
@pytest.mark.parametrize("extra, flag", [([], "--objective"), (["--max-gpus", "1000"], "--objective"),
                                         (["--objective", "total_tokens_per_s", "--max-days", "3"], "--max-days")])
def test_best_says_when_a_metric_has_no_value_in_the_study(studies, capsys, study, extra, flag):
    args = ["--objective", "time_to_train_days", *extra] if flag == "--objective" else extra
    rc, _, err = run_cli(capsys, "best", "--study", study, "--storage", studies["journal"], *args)
    _one_line_error(rc, err, flag, "time_to_train_days has no value", "training.tokens")


# --- 6. a worker after a single-process run -------------------------------------------------------
def test_worker_after_a_single_process_run_uses_its_trial_target(tmp_path, capsys):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    journal = str(tmp_path / "w.journal")
    rc, _, err = run_cli(capsys, "run", str(space), "--study", "w", "--storage", journal, "--sampler", "random",
                         "--trials", "10")
    assert rc in (0, 1), err
    rc, out, err = run_cli(capsys, "worker", str(space), "--study", "w", "--storage", journal)
    assert rc == 0, err
    assert "holds 10 trials" in out
    rc, _, err = run_cli(capsys, "run", str(space), "--study", "w", "--storage", journal, "--sampler", "random",
                         "--trials", "14")
    assert rc in (0, 1), err
    from cosearch.scaleout import get_target
    from cosearch.storages import resolve_storage

    assert get_target(optuna.load_study(study_name="w", storage=resolve_storage(journal))) == 14
    # an exhaustive study stores no trial count
    rc, _, err = run_cli(capsys, "run", str(space), "--study", "x", "--storage", journal, "--sampler", "exhaustive")
    assert rc in (0, 1), err
    assert get_target(optuna.load_study(study_name="x", storage=resolve_storage(journal))) is None


def test_user_text_with_brackets_is_printed_literally(tmp_path, capsys):
    """Study names, paths and catalog entries are user text, not rich markup: '[/]' crashed run (MarkupError) after
    storing the study, and then every `studies`/`best` on that storage; '[red]x' printed as 'x'."""
    journal = str(tmp_path / "s.journal")
    for name in ("[/]", "[red]x"):
        rc, out, err = run_cli(capsys, "run", DEEPPOOL, "--study", name, "--storage", journal)
        assert rc == 0 and "Traceback" not in err, err[-2000:]
        assert name in out, out[-2000:]
        rc, out, err = run_cli(capsys, "best", "--study", name, "--storage", journal)
        assert rc == 0 and name in out, (out + err)[-2000:]
    rc, out, err = run_cli(capsys, "studies", "--storage", journal)
    assert rc == 0 and "[/]" in out and "[red]x" in out, (out + err)[-2000:]


def test_overlong_study_name_is_refused_at_once(tmp_path, capsys):
    rc, _, err = run_cli(capsys, "run", DEEPPOOL, "--study", "x" * 20_000, "--storage", str(tmp_path / "s.journal"))
    _one_line_error(rc, err, "--study", "at most 512 characters")


@pytest.mark.parametrize("args,flag", [
    (["run", DEEPPOOL, "--sampler", "random", "--trials", "4", "--seed", "-1"], "--seed"),
    (["run", DEEPPOOL, "--sampler", "random", "--trials", "4", "--seed", str(2 ** 32)], "--seed"),
    (["run", DEEPPOOL, "--sampler", "random", "--trials", "4", "--workers", "100000"], "--workers"),
    (["run", DEEPPOOL, "--sampler", "random", "--trials", "4", "--workers", "0"], "--workers"),
    (["run", DEEPPOOL, "--sampler", "random", "--trials", "4", "--rows", "-1"], "--rows"),
    (["worker", DEEPPOOL, "--trials", "4", "--seed", "-1"], "--seed"),
])
def test_out_of_range_run_flags_are_one_line(tmp_path, capsys, args, flag):
    """--seed outside the samplers' 0..2**32-1 raised ValueError tracebacks; --workers 100000 started processes
    until killed and 0 ran as 1; --rows -1 dropped a front row."""
    rc, _, err = run_cli(capsys, *args, "--study", "s", "--storage", str(tmp_path / "s.journal"))
    _one_line_error(rc, err, flag)


def test_pareto_rows_and_explain_top_must_be_positive(studies, capsys):
    rc, _, err = run_cli(capsys, "pareto", "--study", "dp", "--storage", studies["journal"], "--rows", "-1")
    _one_line_error(rc, err, "--rows")
    rc, _, err = run_cli(capsys, "explain", str(ROOT / "examples" / "gpt3-175b.yaml"), "--top", "-1")
    _one_line_error(rc, err, "--top")


def test_a_device_or_pipe_as_storage_is_refused_at_once(tmp_path, capsys):
    """studies --storage /dev/zero read without end (1.1 GB in 6 s); a FIFO hung waiting for a writer."""
    import os
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in ("/dev/zero", str(fifo)):
        for cmd in (["studies"], ["best", "--study", "x"]):
            rc, _, err = run_cli(capsys, *cmd, "--storage", path)
            _one_line_error(rc, err, "--storage", "not a regular file")


def test_an_output_path_that_is_an_input_is_refused(studies, tmp_path, capsys):
    """report --out on the study's journal wrote HTML over it (every later command: 'corrupt at line 1');
    calibrate --out on the measured CSV overwrote it (with --force); the inputs stay as they were."""
    import shutil
    journal = tmp_path / "copy.journal"
    shutil.copy(studies["journal"], journal)
    before = journal.read_bytes()
    for args, flag in ((["report", "--study", "dp", "--storage", str(journal), "--out", str(journal)], "--out"),
                       (["pareto", "--study", "dp", "--storage", str(journal), "--csv", str(journal)], "--csv")):
        rc, _, err = run_cli(capsys, *args)
        _one_line_error(rc, err, flag, "storage")
    assert journal.read_bytes() == before
    csv = tmp_path / "runs.csv"
    shutil.copy(ROOT / "experiments" / "data" / "validation" / "published_runs_public.csv", csv)
    before = csv.read_bytes()
    rc, _, err = run_cli(capsys, "calibrate", str(csv), "--params", "matmul_scale", "--out", str(csv), "--force")
    _one_line_error(rc, err, "--out", "measured CSV")
    assert csv.read_bytes() == before


def test_messages_that_misled(tmp_path, capsys):
    """A SQLite file given as a journal was 'corrupt at line 1 ... remove that line'; a CSV whose first row has a
    field more than the header was read shifted ('model: unknown preset 4096'); an exhaustive --timeout 0.001
    said it 'takes about 0 s, more than the 0.001 s allowed'."""
    import sqlite3
    db = tmp_path / "x.db"
    sqlite3.connect(db).execute("create table t (x)").connection.commit()
    rc, _, err = run_cli(capsys, "studies", "--storage", str(db))
    _one_line_error(rc, err, "--storage", "is a SQLite database", f"sqlite:///{db}")
    csv = tmp_path / "m.csv"
    csv.write_text("model,gpu,gpus,global_batch,tp,pp,step_time_s\ngpt3-1.3b,h100-sxm,8,512,1,1,1.0,4096\n")
    rc, _, err = run_cli(capsys, "calibrate", str(csv), "--out", str(tmp_path / "p.yaml"))
    _one_line_error(rc, err, "more fields than the header")
    rc, _, err = run_cli(capsys, "run", DEEPPOOL, "--study", "t", "--storage", str(tmp_path / "s.journal"),
                         "--sampler", "exhaustive", "--timeout", "0.000001")
    _one_line_error(rc, err, "--timeout")
    assert "about 0 s" not in err
