"""Storage resolution, crash recovery of RUNNING trials, and concurrent writers on a journal."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import optuna
import pytest
from optuna.storages import JournalStorage, RDBStorage
from optuna.trial import TrialState

from cosearch.storages import (
    DEFAULT_JOURNAL,
    OWNER_ATTR,
    JournalLock,
    fail_stale_trials,
    owner_is_alive,
    resolve_storage,
    tag_trial_owner,
    trial_owner,
)
from cosearch.storages._storage import owner_record

ROOT = Path(__file__).resolve().parents[1]
optuna.logging.set_verbosity(optuna.logging.WARNING)

# A worker: finishes 4 trials, leaves a 5th RUNNING, says READY, then sleeps until killed.
WORKER = textwrap.dedent(
    """
    import sys, time, optuna
    from cosearch.storages import resolve_storage, tag_trial_owner
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path, wid = sys.argv[1], int(sys.argv[2])
    study = optuna.load_study(study_name="s", storage=resolve_storage(path),
                              sampler=optuna.samplers.RandomSampler(seed=wid))
    for i in range(4):
        t = study.ask()
        tag_trial_owner(t)
        t.suggest_float("x", 0.0, 1.0)
        study.tell(t, [wid * 100 + i, -i])
    t = study.ask()
    tag_trial_owner(t)
    t.suggest_float("x", 0.0, 1.0)
    print("READY", t.number, flush=True)
    time.sleep(120)
    """
)

# A writer: ask/tag/tell N trials as fast as possible on the default store of its cwd.
WRITER = textwrap.dedent(
    """
    import sys, optuna
    from cosearch.storages import resolve_storage, tag_trial_owner
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    wid, n = int(sys.argv[1]), int(sys.argv[2])
    study = optuna.load_study(study_name="c", storage=resolve_storage(None),
                              sampler=optuna.samplers.RandomSampler(seed=wid))
    for i in range(n):
        t = study.ask()
        tag_trial_owner(t)
        study.tell(t, wid * 1000 + i)
    """
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _spawn(script: str, *args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, *args], cwd=cwd, env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ready(proc: subprocess.Popen) -> int:
    line = proc.stdout.readline()
    if not line.startswith("READY"):
        proc.kill()
        raise AssertionError(f"worker failed: {line!r} {proc.stderr.read()}")
    return int(line.split()[1])


def _states(study: optuna.Study) -> dict[int, TrialState]:
    return {t.number: t.state for t in study.get_trials(deepcopy=False)}


def test_sigkilled_worker_trial_is_failed_live_worker_untouched(tmp_path):
    path = tmp_path / "crash.journal"
    optuna.create_study(study_name="s", storage=resolve_storage(str(path)), directions=["minimize"] * 2)
    doomed = _spawn(WORKER, str(path), "1", cwd=tmp_path)
    live = _spawn(WORKER, str(path), "2", cwd=tmp_path)
    try:
        doomed_trial, live_trial = _ready(doomed), _ready(live)
        study = optuna.load_study(study_name="s", storage=resolve_storage(str(path)))
        complete_before = {t.number: (t.values, t.params) for t in study.get_trials(states=(TrialState.COMPLETE,))}
        assert len(complete_before) == 8
        assert fail_stale_trials(study) == 0  # both workers alive: nothing to do

        doomed.send_signal(signal.SIGKILL)
        # Not reaped yet: the dead worker is a zombie, which must count as dead too.
        deadline, failed = time.monotonic() + 5, 0
        while failed == 0 and time.monotonic() < deadline:
            failed = fail_stale_trials(study)
            time.sleep(0.02)
        assert failed == 1
        doomed.wait(timeout=5)

        fresh = optuna.load_study(study_name="s", storage=resolve_storage(str(path)))
        states = _states(fresh)
        assert states[doomed_trial] == TrialState.FAIL
        assert states[live_trial] == TrialState.RUNNING
        trials = fresh.get_trials()
        assert len(trials) == 10 and sorted(t.number for t in trials) == list(range(10))
        complete_after = {t.number: (t.values, t.params) for t in fresh.get_trials(states=(TrialState.COMPLETE,))}
        assert complete_after == complete_before
        assert fail_stale_trials(fresh) == 0  # idempotent

        live.send_signal(signal.SIGKILL)
        live.wait(timeout=5)
        assert fail_stale_trials(fresh) == 1
        assert _states(fresh)[live_trial] == TrialState.FAIL
        assert len(fresh.get_trials(states=(TrialState.COMPLETE,))) == 8
    finally:
        for p in (doomed, live):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_owner_checks_in_process(tmp_path):
    study = optuna.create_study(storage=resolve_storage(None, workdir=tmp_path))
    storage = study._storage
    mine = study.ask()
    assert trial_owner(study.get_trials()[0]) is None
    rec = tag_trial_owner(mine)
    assert trial_owner(study.get_trials()[0]) == rec and owner_is_alive(rec) is True

    untagged = study.ask()  # unknown owner: never failed
    reused = study.ask()  # our pid, but another start time and token: a reused pid
    fake = dict(owner_record(), token="someone-else")
    fake["start"] = (fake["start"] or 0) - 1
    storage.set_trial_system_attr(reused._trial_id, OWNER_ATTR, fake)
    remote = study.ask()  # another host: unknown unless the callback knows
    storage.set_trial_system_attr(remote._trial_id, OWNER_ATTR, dict(owner_record(), host="elsewhere", pid=1))

    assert owner_is_alive(fake) is False
    assert fail_stale_trials(study) == 1
    states = _states(study)
    assert states[reused.number] == TrialState.FAIL
    assert states[mine.number] == states[untagged.number] == states[remote.number] == TrialState.RUNNING

    asked = []

    def scheduler(owner):
        asked.append(owner["host"])
        return False if owner["host"] == "elsewhere" else None

    assert fail_stale_trials(study, owner_alive=scheduler) == 1
    assert _states(study)[remote.number] == TrialState.FAIL
    assert _states(study)[mine.number] == TrialState.RUNNING
    assert "elsewhere" in asked
    study.tell(mine, 1.0)


def test_concurrent_writers_on_default_store(tmp_path):
    n_proc, n_trials = 4, 25
    optuna.create_study(study_name="c", storage=resolve_storage(None, workdir=tmp_path))
    procs = [_spawn(WRITER, str(w), str(n_trials), cwd=tmp_path) for w in range(n_proc)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
    study = optuna.load_study(study_name="c", storage=resolve_storage(None, workdir=tmp_path))
    trials = study.get_trials()
    assert len(trials) == n_proc * n_trials
    assert sorted(t.number for t in trials) == list(range(n_proc * n_trials))
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert sorted(t.value for t in trials) == sorted(w * 1000 + i for w in range(n_proc) for i in range(n_trials))
    pids = [trial_owner(t)["pid"] for t in trials]
    assert sorted(pids.count(p.pid) for p in procs) == [n_trials] * n_proc
    assert (tmp_path / DEFAULT_JOURNAL).is_file()
    assert not (tmp_path / (DEFAULT_JOURNAL + ".lock")).exists()


def test_resolve_storage_forms(tmp_path):
    default = resolve_storage(None, workdir=tmp_path)
    assert isinstance(default, JournalStorage) and (tmp_path / DEFAULT_JOURNAL).is_file()
    rel = resolve_storage("runs/a.journal", workdir=tmp_path)
    assert isinstance(rel, JournalStorage) and (tmp_path / "runs" / "a.journal").is_file()
    rdb = resolve_storage(f"sqlite:///{tmp_path / 'x.db'}")
    assert isinstance(rdb, RDBStorage) and rdb.get_heartbeat_interval() == 60
    study = optuna.create_study(storage=rdb)
    with pytest.warns(UserWarning):  # optuna: heartbeat is meant for Study.optimize
        t = study.ask()
    tag_trial_owner(t)
    assert fail_stale_trials(study) == 0


@pytest.mark.parametrize("url", ["redis://localhost:6379", "postgresx://u@h/db", "ftp://x", "file:///tmp/x.journal",
                                 "", "  "])
def test_resolve_storage_bad_scheme(url, tmp_path):
    with pytest.raises(ValueError) as info:
        resolve_storage(url, workdir=tmp_path)
    msg = str(info.value)
    assert msg.startswith("--storage:") and "\n" not in msg
    assert "sqlite:///" in msg and "journal" in msg


def test_resolve_storage_reads_postgres_as_postgresql(monkeypatch):
    """``postgres://`` (refused as an unsupported scheme before) opens as ``postgresql://`` with the installed driver."""
    import cosearch.storages._storage as st

    opened = []
    monkeypatch.setattr(st, "_rdb", lambda url, must_exist=False, base=None: opened.append(url) or "rdb")
    assert resolve_storage("postgres://u:pw@h/db") == "rdb"
    assert resolve_storage("postgres+psycopg2://u@h/db") == "rdb"
    assert opened == [st.normalize_url("postgresql://u:pw@h/db"), "postgresql+psycopg2://u@h/db"]
    assert opened[0].startswith("postgresql") and opened[0].endswith("://u:pw@h/db")


def test_journal_lock_breaks_lock_left_by_dead_holder(tmp_path):
    path = str(tmp_path / "x.journal")
    Path(path + ".lock").touch()  # what a writer SIGKILLed inside an append leaves behind
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # optuna warns that a 1 s grace period is short
        lock = JournalLock(path, grace_period=1)
    t0 = time.monotonic()
    assert lock.acquire()
    assert 0.9 < time.monotonic() - t0 < 5
    assert Path(path + ".lock").exists()
    lock.release()
    assert not Path(path + ".lock").exists()
    with pytest.raises(RuntimeError):
        lock.release()


_WRITER = """
import sys, optuna
from optuna.distributions import IntDistribution
from cosearch.storages import resolve_storage
from cosearch.storages.rdb_batch import create_trials
from optuna.trial import TrialState
st = resolve_storage(sys.argv[1])
sid = st.get_study_id_from_name("race")
for _ in range(60):
    create_trials(st, sid, [{"params": {"x": 1}, "system_attrs": {}, "state": TrialState.COMPLETE, "values": [1.0]}] * 8,
                  {"x": IntDistribution(0, 9)})
"""


def test_concurrent_sqlite_writers_keep_trial_numbers_unique(tmp_path):
    """Two processes batch-creating trials in one SQLite study: numbers were counted before the insert (SQLite takes
    no lock on the SELECT), so both read the same count and hundreds of trials shared a number, hidden from
    load_study. Counted after the insert, as optuna does, they stay unique and gap-free."""
    import subprocess
    import sys

    import optuna

    url = f"sqlite:///{tmp_path / 'race.db'}"
    optuna.create_study(study_name="race", storage=resolve_storage(url))
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, url]) for _ in range(4)]
    assert all(p.wait(timeout=240) == 0 for p in procs)
    trials = resolve_storage(url).get_all_trials(resolve_storage(url).get_study_id_from_name("race"), deepcopy=False)
    assert sorted(t.number for t in trials) == list(range(4 * 60 * 8))
    assert len(optuna.load_study(study_name="race", storage=url).get_trials(deepcopy=False)) == 4 * 60 * 8


def test_a_dead_workers_trials_are_failed_with_one_warning_line(tmp_path, caplog):
    """Each stale trial of a killed worker logged its own WARNING line (50 lines for one worker); now one line per
    dead worker, with the count."""
    import logging

    import optuna

    from cosearch.storages import fail_stale_trials

    st = resolve_storage(str(tmp_path / "s.journal"))
    study = optuna.create_study(study_name="s", storage=st)
    dead = {"host": __import__("socket").gethostname(), "pid": 2 ** 22 + 12345, "token": "x", "boot": None}
    for _ in range(5):
        t = study.ask()
        st.set_trial_system_attr(t._trial_id, OWNER_ATTR, dead)
    with caplog.at_level(logging.WARNING):
        assert fail_stale_trials(study, owner_alive=lambda rec: False) == 5
    lines = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(lines) == 1 and "5 trial(s)" in lines[0].getMessage()


def test_study_lock_sits_on_the_storages_own_file(tmp_path):
    """The study lock of a relative SQLite URL was taken on /NAME (sqlite:///rel.db -> /rel.db, created in the root
    folder, impossible for other users), and of sqlite:///:memory: on /:memory:; it is the database file itself,
    where resolve_storage puts it, as for journals."""
    from cosearch.storages import study_lock
    from cosearch.errors import CosearchError

    assert study_lock("sqlite:///rel.db", "s", workdir=tmp_path).path == tmp_path / "rel.db"
    assert study_lock("sqlite:///sub/x.db?timeout=3", "s", workdir=tmp_path).path == tmp_path / "sub" / "x.db"
    assert study_lock("sqlite:////abs/x.db", "s", workdir=tmp_path).path == Path("/abs/x.db")
    assert study_lock("j.journal", "s", workdir=tmp_path).path == tmp_path / "j.journal"
    with pytest.raises(CosearchError):
        study_lock("sqlite:///:memory:", "s")


def test_jsonable_nulls_non_finite_values_and_never_alters_a_string():
    """jsonable replaced the text "NaN" in the dumped JSON, so a user string "NaN" became "null" and "xNaNx"
    "xnullx", while inf and -inf came back as floats JSON cannot hold. Now by value: every non-finite float is None."""
    import json

    import numpy as np

    from cosearch.storages._writer import jsonable

    strings = {"a": "NaN", "b": "xNaNx", "c": "Infinity", "d": "-Infinity", "e": ["NaN", ("xNaNx",)]}
    assert jsonable(strings) == {**strings, "e": ["NaN", ["xNaNx"]]}
    got = jsonable({"nan": float("nan"), "inf": float("inf"), "-inf": -float("inf"), "ok": 1.5,
                    "np": [np.float64("inf"), np.float32("nan"), np.float32(2.0), np.int64(3), np.bool_(True)],
                    "deep": {"x": (float("-inf"), "NaN")}})
    assert got == {"nan": None, "inf": None, "-inf": None, "ok": 1.5, "np": [None, None, 2.0, 3, True],
                   "deep": {"x": [None, "NaN"]}}
    json.dumps(got, allow_nan=False)  # strict JSON
