"""Storage faults of issue 12: each test failed before its fix."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from cosearch.cli import main
from cosearch.errors import CosearchError
from cosearch.storages import resolve_storage
from cosearch.storages._storage import JournalLock, mask_url, normalize_url

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_search_cli import write_space  # noqa: E402


def _cli(args, capsys):
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


# --- PostgreSQL URL and passwords ---------------------------------------------------------------
def test_documented_postgresql_url_gets_an_installed_driver():
    import importlib.util

    url = normalize_url("postgresql://user:pw@host/db")
    has2, has3 = (importlib.util.find_spec(m) is not None for m in ("psycopg2", "psycopg"))
    if has2 and not has3:
        assert url == "postgresql+psycopg2://user:pw@host/db"
    from sqlalchemy.engine import make_url

    make_url(url).get_dialect()  # importable driver: no "missing driver"
    assert normalize_url("postgresql+psycopg2://u@h/d") == "postgresql+psycopg2://u@h/d"
    assert normalize_url("sqlite:///x.db") == "sqlite:///x.db"


def test_errors_never_print_a_password(tmp_path):
    assert mask_url("cannot open postgresql://bob:s3cret@h:5/db now") == "cannot open postgresql://bob:***@h:5/db now"
    with pytest.raises(CosearchError) as err:
        resolve_storage("postgresql://bob:s3cret@127.0.0.1:1/db?connect_timeout=2")
    assert "s3cret" not in str(err.value) and "missing driver" not in str(err.value)
    with pytest.raises(CosearchError) as err:
        resolve_storage("ftp://bob:s3cret@host/x")
    assert "s3cret" not in str(err.value)


# --- journal cut by a crash / corrupt -----------------------------------------------------------
def _journal_with_trials(path: Path, n: int = 3) -> None:
    st = resolve_storage(str(path))
    study = optuna.create_study(study_name="s", storage=st)
    for i in range(n):
        study.add_trial(optuna.trial.create_trial(params={"x": float(i)},
                                                  distributions={"x": optuna.distributions.FloatDistribution(0, 10)},
                                                  value=float(i)))


def test_journal_with_a_cut_last_line_is_recovered(tmp_path, caplog):
    path = tmp_path / "j.journal"
    _journal_with_trials(path)
    with open(path, "ab") as f:
        f.write(b'{"op_code":4,"worker_id":"x","study_id":0,"datetime_sta')  # killed mid-write
    st = resolve_storage(str(path))
    study = optuna.load_study(study_name="s", storage=st)
    assert len(study.trials) == 3
    with caplog.at_level("WARNING"):
        study.add_trial(optuna.trial.create_trial(params={"x": 5.0},
                                                  distributions={"x": optuna.distributions.FloatDistribution(0, 10)},
                                                  value=5.0))
    assert any("partial line" in r.getMessage() for r in caplog.records)
    for line in path.read_bytes().splitlines():
        json.loads(line)  # every line is whole again
    fresh = optuna.load_study(study_name="s", storage=resolve_storage(str(path)))
    assert len(fresh.trials) == 4
    plain = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    assert len(optuna.load_study(study_name="s", storage=plain).trials) == 4


def test_corrupt_journal_never_reads_as_no_studies(tmp_path, capsys):
    path = tmp_path / "j.journal"
    _journal_with_trials(path)
    path.write_bytes(path.read_bytes() + b"garbage that is not json\n")
    with pytest.raises(CosearchError, match="corrupt at line"):
        resolve_storage(str(path))
    bad = tmp_path / "bad.journal"
    bad.write_bytes(b"this is not a journal\n")
    rc, _, err = _cli(["studies", "--storage", str(bad)], capsys)
    assert rc == 2 and "corrupt" in err and err.count("\n") == 1


# --- stale journal lock after SIGKILL -----------------------------------------------------------
def test_lock_of_a_killed_holder_is_broken_at_once(tmp_path):
    path = tmp_path / "j.journal"
    path.touch()
    code = ("import sys, time; sys.path.insert(0, %r)\n"
            "from cosearch.storages._storage import JournalLock\n"
            "JournalLock(%r).acquire(); print('held', flush=True); time.sleep(60)\n") % (str(ROOT), str(path))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert (tmp_path / "j.journal.lock").exists()
    t0 = time.monotonic()
    lock = JournalLock(str(path))
    assert lock.acquire()
    assert time.monotonic() - t0 < 2.0
    lock.release()
    # a live holder is respected
    live = JournalLock(str(path))
    live.acquire()
    other = JournalLock(str(path))
    assert other._holder_dead() is False
    live.release()


# --- fresh SQLite file, many creators -----------------------------------------------------------
def _open_sqlite(url: str, barrier, q) -> None:
    try:
        barrier.wait(10)
        resolve_storage(url)
        q.put("ok")
    except Exception as err:  # noqa: BLE001
        q.put(f"{type(err).__name__}: {err}")


def test_fresh_sqlite_many_creators(tmp_path):
    ctx = mp.get_context("fork")
    for rep in range(3):
        url = f"sqlite:///{tmp_path}/fresh{rep}.db"
        n = 8
        barrier, q = ctx.Barrier(n), ctx.Queue()
        procs = [ctx.Process(target=_open_sqlite, args=(url, barrier, q)) for _ in range(n)]
        for p in procs:
            p.start()
        results = [q.get(timeout=120) for _ in procs]
        for p in procs:
            p.join()
        assert results == ["ok"] * n, results


# --- failed run, read-only commands, workers -----------------------------------------------------
def test_failed_run_leaves_no_empty_study(tmp_path, capsys):
    empty = write_space(tmp_path, constraints={"max_cost_usd": 5.0})
    journal = str(tmp_path / "j.journal")
    for sampler in ("tpe", "random", "exhaustive"):
        rc, _, err = _cli(["run", empty, "--study", f"e-{sampler}", "--sampler", sampler, "--storage", journal], capsys)
        assert rc == 2 and "empty feasible region" in err
    rc, out, _ = _cli(["studies", "--json", "--storage", journal], capsys)
    assert rc == 0 and json.loads(out) == []


@pytest.mark.parametrize("cmd", [["best", "--study", "s"], ["pareto", "--study", "s"], ["studies"],
                                 ["report", "--study", "s", "--out", "r.html"]])
@pytest.mark.parametrize("storage", ["missing.journal", "sqlite:///missing.db", None])
def test_read_only_commands_do_not_create_storage(tmp_path, capsys, monkeypatch, cmd, storage):
    monkeypatch.chdir(tmp_path)
    args = cmd + (["--storage", storage] if storage else [])
    rc, _, err = _cli(args, capsys)
    assert rc == 2 and err.count("\n") == 1 and ("does not exist" in err or "no ./" in err), err
    assert list(tmp_path.iterdir()) == []


def test_workers_above_cores_warn_and_summary_counts_their_trials(tmp_path, monkeypatch):
    sp = write_space(tmp_path)
    journal = str(tmp_path / "w.journal")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cores = len(os.sched_getaffinity(0))
    r = subprocess.run([sys.executable, "-m", "cosearch", "run", sp, "--study", "w", "--storage", journal,
                        "--sampler", "random", "--trials", "40", "--workers", str(cores + 1)],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"exceeds the {cores} usable CPU core" in r.stderr
    assert "(0 new, 0/s)" not in r.stdout
    assert f"40 new by {cores + 1} workers" in r.stdout


def test_cli_error_masks_a_password(tmp_path, capsys):
    rc, out, err = _cli(["best", "--study", "s", "--storage", "postgresql://bob:s3cret@127.0.0.1:1/db"], capsys)
    assert rc == 2 and "s3cret" not in err + out and err.count("\n") == 1


def test_study_half_created_by_a_killed_run_is_completed(tmp_path, capsys, caplog):
    """Killed between optuna's create_study and cosearch's study description (seen in bench_faults)."""
    sp = write_space(tmp_path)
    journal = str(tmp_path / "h.journal")
    optuna.create_study(study_name="h", storage=resolve_storage(journal),
                        directions=["minimize", "minimize"])
    rc, out, err = _cli(["run", sp, "--study", "h", "--storage", journal, "--sampler", "random", "--trials", "20"],
                        capsys)
    assert rc == 0, err
    assert any("half-created" in r.getMessage() for r in caplog.records)
    optuna.create_study(study_name="other", storage=resolve_storage(journal), direction="maximize")
    rc, _, err = _cli(["run", sp, "--study", "other", "--storage", journal, "--sampler", "random", "--trials", "20"],
                      capsys)
    assert rc == 2 and "not made by cosearch" in err


def test_a_finish_write_cut_after_the_metrics_is_redone(tmp_path):
    """A kill can cut a batch's finish after a trial's attribute lines and before its state line: the trial kept
    its metrics, was failed as stale on resume, and still counted as evaluated (a FAIL with metrics is a trial
    whose objective has no value), so the study stopped one short. Failed-as-abandoned trials are redone."""
    from optuna.storages.journal import JournalFileBackend  # noqa: F401 - the op codes below are optuna's
    from optuna.storages.journal._storage import JournalOperation

    from cosearch._study_store import counts_as_trial

    journal = tmp_path / "s.journal"
    space = str(ROOT / "searchspaces" / "codesign-70b.yaml")
    cmd = [sys.executable, "-m", "cosearch", "run", space, "--study", "s", "--storage", str(journal),
           "--sampler", "random", "--trials", "40", "--batch-size", "20"]
    assert subprocess.run(cmd, capture_output=True, text=True, timeout=300).returncode == 0
    lines = journal.read_bytes().splitlines(keepends=True)
    states = [i for i, line in enumerate(lines)
              if json.loads(line).get("op_code") == JournalOperation.SET_TRIAL_STATE_VALUES]
    journal.write_bytes(b"".join(lines[:states[-5]]))  # the last 5 trials: metrics written, no state for them
    study = optuna.load_study(study_name="s", storage=resolve_storage(str(journal)))
    cut = [t for t in study.get_trials(deepcopy=False) if t.state == optuna.trial.TrialState.RUNNING]
    assert cut and "metrics" in cut[0].user_attrs  # the first of them got its attributes before the cut
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    study = optuna.load_study(study_name="s", storage=resolve_storage(str(journal)))
    assert sum(counts_as_trial(t) for t in study.get_trials(deepcopy=False)) == 40
    assert not any(counts_as_trial(t) for t in study.get_trials(deepcopy=False) if t._trial_id == cut[0]._trial_id)
    from cosearch.scaleout import TrialBudget  # the workers' count agrees: a worker joining would not stop short
    assert TrialBudget(study, 40, lock=None, heartbeat=False).counts()["done"] == 40


def test_an_unfinished_exhaustive_study_says_its_front_is_partial(tmp_path, capsys):
    """A run killed before it stored the front left a partial front that pareto, studies and report showed as the
    answer (1 point where the front has 4). They now say the enumeration never finished; a finished one is quiet."""
    journal = tmp_path / "e.journal"
    space = str(ROOT / "searchspaces" / "codesign-70b.yaml")
    assert main(["run", space, "--study", "e", "--storage", str(journal)]) == 0
    capsys.readouterr()
    rc = main(["pareto", "--study", "e", "--storage", str(journal)])
    assert rc == 0 and "never finished" not in capsys.readouterr().err
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join(lines[:3]))  # the study, its description and one trial: the front write cut
    main(["pareto", "--study", "e", "--storage", str(journal)])
    assert "never finished" in capsys.readouterr().err
    assert main(["studies", "--storage", str(journal)]) == 0
    assert "unfinished" in capsys.readouterr().out
