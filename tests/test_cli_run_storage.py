"""How much of its storage one `cosearch run` reads: the list of every study (a query over all studies on a
database) at most once, and `run --workers` opens the storage once."""
from __future__ import annotations

import pytest
import yaml
from optuna.storages import RDBStorage

import cosearch.scaleout
import cosearch.storages._storage as storage_module
from cosearch.cli import main
from test_search_cli import SPACE


@pytest.fixture
def space(tmp_path):
    p = tmp_path / "space.yaml"
    p.write_text(yaml.safe_dump(SPACE))
    return str(p)


@pytest.fixture
def listings(monkeypatch):
    """Counts ``get_all_studies`` calls on RDB storages."""
    calls = []
    real = RDBStorage.get_all_studies

    def counted(self, *a, **k):
        calls.append(1)
        return real(self, *a, **k)

    monkeypatch.setattr(RDBStorage, "get_all_studies", counted)
    return calls


@pytest.mark.parametrize("url", ["sqlite:///{tmp}/s.db", "sqlite:///:memory:"])
@pytest.mark.parametrize("sampler", ["auto", "tpe"])
def test_a_sampled_run_lists_the_studies_at_most_once(tmp_path, space, listings, capsys, url, sampler):
    """At most one listing per run (none now): opening or creating the study, and ``--sampler auto``'s lookup of
    the method the study stored (``_study_store.stored_method``), look the study up by name. It read the list 4
    times on a database file (5 with auto): twice to know whether the study existed, once per ``_open_study`` (the
    shared budget's and the run's), and auto's lookup."""
    url = url.format(tmp=tmp_path)
    for method, trials in (("tpe", "20"), (sampler, "40")):  # a new study, then resuming it (auto: with tpe)
        listings.clear()
        rc = main(["run", space, "--study", "s", "--sampler", method, "--trials", trials, "--storage", url])
        assert rc == 0, capsys.readouterr().err
        assert len(listings) <= 1


def test_a_failed_run_still_removes_only_the_study_it_created(tmp_path, space, monkeypatch, capsys):
    """With the 'existed' checks gone, the study a failed first run created is still removed; a resumed one kept."""
    import cosearch.study

    url = f"sqlite:///{tmp_path}/s.db"

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(cosearch.study, "_run_optuna", boom)
    with pytest.raises(RuntimeError):
        main(["run", space, "--study", "s", "--sampler", "tpe", "--trials", "20", "--storage", url])
    assert RDBStorage(url).get_all_studies() == []
    monkeypatch.undo()
    assert main(["run", space, "--study", "s", "--sampler", "tpe", "--trials", "20", "--storage", url]) == 0
    monkeypatch.setattr(cosearch.study, "_run_optuna", boom)
    with pytest.raises(RuntimeError):
        main(["run", space, "--study", "s", "--sampler", "tpe", "--trials", "40", "--storage", url])
    assert [s.study_name for s in RDBStorage(url).get_all_studies()] == ["s"]
    capsys.readouterr()


@pytest.mark.parametrize("url", ["sqlite:///{tmp}/s.db", "{tmp}/s.journal"])
def test_ctrl_c_in_a_new_studys_first_evaluation_leaves_no_study(tmp_path, space, monkeypatch, capsys, url):
    """Ctrl-C before a new study stored a trial (here in the feasibility check that evaluates the space before the
    first batch) exits 130 and removes the study this run created, as any other error does: the study was created
    by the shared budget, so run_study (which drops a study it created) found it existing, and `run` returned 130
    before its own cleanup, leaving an empty study behind."""
    import cosearch._study_runs

    url = url.format(tmp=tmp_path)

    def interrupt(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cosearch._study_runs, "_precheck", interrupt)
    assert main(["run", space, "--study", "s", "--sampler", "tpe", "--trials", "20", "--storage", url]) == 130
    assert "interrupted" in capsys.readouterr().err
    assert storage_module.resolve_storage(url).get_all_studies() == []


@pytest.mark.parametrize("sampler", ["auto", "tpe"])
def test_run_with_workers_opens_the_storage_once(tmp_path, space, monkeypatch, capsys, sampler):
    """`run --workers 2` opens its storage once and passes it on (resolving ``auto``, the workers' study, the
    front): it opened it three times with ``auto``. The workers are not started here; the run finishes the trials."""
    url = f"sqlite:///{tmp_path}/s.db"
    assert main(["run", space, "--study", "s", "--sampler", "tpe", "--trials", "20", "--storage", url]) == 0
    opens = []
    real = storage_module._rdb

    def counted(*a, **k):
        opens.append(1)
        return real(*a, **k)

    monkeypatch.setattr(storage_module, "_rdb", counted)
    monkeypatch.setattr(cosearch.scaleout, "spawn_workers", lambda argvs: [])
    monkeypatch.setattr(cosearch.scaleout, "wait_workers", lambda procs, on_tick=None: [])
    rc = main(["run", space, "--study", "s", "--sampler", sampler, "--trials", "40", "--workers", "2", "--storage", url])
    assert rc == 0, capsys.readouterr().err
    assert len(opens) == 1


@pytest.fixture
def opens(monkeypatch):
    """Counts the opens (and checks) of a study: ``_open_study`` calls, wherever they come from."""
    import cosearch.study

    calls = []
    real = cosearch.study._open_study

    def counted(*a, **k):
        calls.append(a[1])
        return real(*a, **k)

    monkeypatch.setattr(cosearch.study, "_open_study", counted)
    return calls


@pytest.mark.parametrize("url", ["{tmp}/s.journal", "sqlite:///{tmp}/s.db", "sqlite:///:memory:"])
@pytest.mark.parametrize("sampler", ["tpe", "random", "exhaustive", "auto"])
def test_a_run_opens_its_study_once(tmp_path, space, opens, capsys, url, sampler):
    """A plain sampled run opened and checked its study twice: once for the shared trial budget (open_for_workers)
    and again in run_study. run_study now makes the budget from the study it opened. Resuming opens once too, and the
    budget still holds: the study stores --trials as its target, and the run reports only its own trials as new."""
    from cosearch.scaleout import get_target
    from cosearch.study import load_study

    url = url.format(tmp=tmp_path)
    first = "random" if sampler == "auto" else sampler  # auto resumes a study with its stored method
    for method, trials in ((first, "20"), (sampler, "30")):
        opens.clear()
        rc = main(["run", space, "--study", "s", "--sampler", method, "--trials", trials, "--storage", url])
        out, err = capsys.readouterr()
        assert rc == 0, err
        assert opens == ["s"]
        if sampler != "exhaustive" and url != "sqlite:///:memory:":  # (each run has its own in-memory database)
            assert ": 20 trials (20 new," in out if trials == "20" else ": 30 trials (10 new," in out, out
    if sampler != "exhaustive" and url != "sqlite:///:memory:":
        assert get_target(load_study("s", url)) == 30


@pytest.mark.parametrize("sampler", ["auto", "tpe"])
def test_run_with_workers_opens_the_study_twice_in_the_parent(tmp_path, space, opens, monkeypatch, capsys, sampler):
    """The parent of `run --workers 2` opened the study three times (for the workers, for the final run's budget,
    in run_study); now twice: once to create and check it and store the target the workers read before they start,
    once in the final run that prints the front. The workers are not started here; the final run does the trials."""
    url = f"sqlite:///{tmp_path}/s.db"
    assert main(["run", space, "--study", "s", "--sampler", "tpe", "--trials", "20", "--storage", url]) == 0
    monkeypatch.setattr(cosearch.scaleout, "spawn_workers", lambda argvs: [])
    monkeypatch.setattr(cosearch.scaleout, "wait_workers", lambda procs, on_tick=None: [])
    opens.clear()
    rc = main(["run", space, "--study", "s", "--sampler", sampler, "--trials", "40", "--workers", "2", "--storage", url])
    assert rc == 0, capsys.readouterr().err
    assert opens == ["s", "s"]


@pytest.mark.parametrize("url", ["{tmp}/s.journal", "sqlite:///{tmp}/s.db"])
def test_a_run_whose_study_lock_fails_leaves_no_study(tmp_path, space, monkeypatch, capsys, url):
    """The shared budget created the study before it took the study lock, outside the run's cleanup: a lock that
    could not be had (a lost database server) left an empty study behind. run_study now makes the budget, inside
    the cleanup of a study it created."""
    from cosearch.errors import CosearchError

    url = url.format(tmp=tmp_path)

    def no_lock(*a, **k):
        raise CosearchError("--storage", "cannot lock")

    import cosearch.storages._scaleout

    monkeypatch.setattr(cosearch.scaleout, "study_lock", no_lock)  # where the run took it before
    monkeypatch.setattr(cosearch.storages._scaleout, "study_lock", no_lock)
    rc = main(["run", space, "--study", "s", "--sampler", "tpe", "--trials", "20", "--storage", url])
    assert rc == 2 and capsys.readouterr().err.strip() == "error: --storage: cannot lock"
    assert storage_module.resolve_storage(url).get_all_studies() == []


@pytest.mark.parametrize("sampler", ["exhaustive", "tpe"])
def test_a_run_that_loses_the_race_to_create_its_study_opens_the_winners(tmp_path, space, monkeypatch, capsys, sampler):
    """Two processes creating one study at once: the loser's create raises optuna's DuplicatedStudyError. The retry
    was only on the shared budget's path (a sampled run; an exhaustive one printed the traceback); it is now in
    _open_study, for every run."""
    import optuna

    import cosearch._study_store as store

    url = f"sqlite:///{tmp_path}/s.db"
    assert main(["run", space, "--study", "s", "--sampler", sampler, "--trials", "20", "--storage", url]) == 0
    capsys.readouterr()
    looked = []
    real = store._has_study

    def stale(storage, name):  # the first look-up misses the study another process creates just then
        looked.append(name)
        return False if len(looked) == 1 else real(storage, name)

    monkeypatch.setattr(store, "_has_study", stale)
    rc = main(["run", space, "--study", "s", "--sampler", sampler, "--trials", "30", "--storage", url])
    assert rc == 0, capsys.readouterr().err
    assert len(looked) >= 2
    assert [s.study_name for s in optuna.get_all_study_summaries(RDBStorage(url))] == ["s"]


def test_a_study_not_made_by_cosearch_is_looked_at_again_then_refused(tmp_path, space, monkeypatch, capsys):
    """_open_study waits a while for a study found without cosearch's description (its creator may not have
    described it yet), for every run, then refuses it in one line."""
    import optuna

    import cosearch._study_store as store

    url = f"sqlite:///{tmp_path}/s.db"
    optuna.create_study(study_name="s", storage=url, direction="maximize")
    monkeypatch.setattr(store, "OPEN_RETRY_PAUSE_S", 0.0)
    tries = []
    real = store._open_or_create
    monkeypatch.setattr(store, "_open_or_create", lambda *a, **k: tries.append(1) or real(*a, **k))
    for sampler in ("exhaustive", "tpe"):
        tries.clear()
        rc = main(["run", space, "--study", "s", "--sampler", sampler, "--trials", "20", "--storage", url])
        err = capsys.readouterr().err
        assert rc == 2 and err.strip() == "error: --study: study 's' exists but was not made by cosearch; use another name"
        assert len(tries) == store.OPEN_ATTEMPTS
    # one with trials is refused at once (cosearch describes a study before its first trial): it waited 5 s
    optuna.load_study(study_name="s", storage=url).add_trial(optuna.trial.create_trial(value=1.0))
    tries.clear()
    assert main(["run", space, "--study", "s", "--sampler", "exhaustive", "--storage", url]) == 2
    assert "not made by cosearch" in capsys.readouterr().err and len(tries) == 1


@pytest.mark.parametrize("flag, value, message", [
    ("--trials", "0", "error: --trials: must be a positive integer (got 0)"),
    ("--batch-size", "0", "error: --batch-size: must be a positive integer (got 0)")])
def test_a_worker_refuses_a_bad_count_before_it_creates_the_study(tmp_path, space, capsys, flag, value, message):
    """`cosearch worker --trials 0` (or --batch-size 0) created the study, then refused the value: an empty study
    was left behind. The values are checked first; nothing is created."""
    journal = tmp_path / "w.journal"
    argv = ["worker", space, "--study", "new", "--storage", str(journal), "--trials", "5", flag, value]
    before = sorted(tmp_path.iterdir())
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == message
    assert sorted(tmp_path.iterdir()) == before  # no journal, no study


@pytest.mark.parametrize("flag, value", [("--trials", "0"), ("--batch-size", "0"), ("--rows", "0"),
                                         ("--timeout", "-1")])
def test_run_with_workers_refuses_a_bad_flag_before_a_worker_starts(tmp_path, space, monkeypatch, capsys, flag, value):
    """`run --workers 2 --trials 0` ran 1000 trials in its workers (``trials or 1000``), then the final run refused
    --trials 0; now `run`'s flags are checked before anything starts, as a one-process run checks them."""
    def no_workers(argvs):
        raise AssertionError("workers started")

    monkeypatch.setattr(cosearch.scaleout, "spawn_workers", no_workers)
    journal = tmp_path / "w.journal"
    before = sorted(tmp_path.iterdir())
    rc = main(["run", space, "--study", "s", "--sampler", "random", "--trials", "10", "--workers", "2",
               "--storage", str(journal), flag, value])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith(f"error: {flag}: ") and "\n" not in err
    assert sorted(tmp_path.iterdir()) == before


def test_a_worker_refuses_a_space_of_one_configuration_before_it_creates_the_study(tmp_path, capsys, monkeypatch):
    """`cosearch worker` (and `run --workers`) created the study, then run_study refused the space ("a single
    configuration"): an empty study was left behind. The space is checked before the study is created."""
    import optuna

    def no_workers(argvs):
        raise AssertionError("workers started")

    monkeypatch.setattr(cosearch.scaleout, "spawn_workers", no_workers)
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"model": "llama3-8b", "training": {"global_batch": 512, "tokens": 1.0e11},
                                   "cluster": {"gpu": "h100-sxm", "gpus": 64}, "plan": {"tp": 1, "microbatch": 1},
                                   "objectives": ["time_to_train_days"]}))
    url = f"sqlite:///{tmp_path}/w.db"
    for argv in (["worker", str(one), "--study", "w", "--trials", "5", "--storage", url],
                 ["run", str(one), "--study", "w", "--trials", "5", "--sampler", "tpe", "--workers", "2", "--storage", url]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert "single configuration" in err and err.count("\n") == 0 and "Traceback" not in err
        assert optuna.get_all_study_summaries(url) == []  # no study left behind
