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
