"""Workers sharing one study through its storage: exact trial budget, study lock, heartbeats.

Several processes (on one machine or many) share one optuna study through its storage. Before a
worker writes a batch of new RUNNING trials it takes a lock shared by every worker of the study,
counts the trials that count, and creates only

    granted = min(batch, target - (evaluated trials + RUNNING/WAITING trials))

so the study never holds more than ``target`` such trials and ends with exactly ``target``
evaluated ones. A trial failed because its worker died (SIGKILL, lost machine) stops counting and
is replaced by whichever worker comes next. The target is stored in the study's user attribute
``cosearch:n_trials`` so a worker that joins later knows when to stop.

The lock is the storage's own where it can be: a PostgreSQL session advisory lock (or MySQL
``GET_LOCK``, untested) for RDB servers, which the server releases when the holder's connection
dies; an ``flock`` on the journal file or SQLite database file itself for the embedded stores
(released by the kernel when the holder dies). It covers only counting and writing the new
trials; sampling and model evaluation run outside it.

Dead workers: every trial carries its owner record (host, pid, process start time, set when it
is created), so :func:`cosearch.storages.fail_stale_trials` fails a dead local worker's trials at
once. On RDB storages a heartbeat thread also beats every trial this process runs, so workers on
other machines fail them after the storage's grace period when this process disappears.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import optuna
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import TrialState

from ..errors import CosearchError
from ._owners import ABANDONED_ATTR, fail_stale_trials, failed_with_result
from ._storage import normalize_url, storage_file, storage_kind  # noqa: F401  (storage_kind: re-exported)

logger = logging.getLogger(__name__)

__all__ = ["DONE_STATES", "METRICS_ATTR", "TARGET_ATTR", "SharedBudget", "TrialBudget", "get_target", "set_target",
           "storage_kind", "study_lock"]

#: Study user attribute holding the requested number of finished trials.
TARGET_ATTR = "cosearch:n_trials"
#: Finished states that always count; FAIL counts only with metrics (an evaluated point).
DONE_STATES = (TrialState.COMPLETE, TrialState.PRUNED)
#: Trial user attribute every trial cosearch evaluated carries.
METRICS_ATTR = "metrics"


# ------------------------------------------------------------------------------------ target
def set_target(study: optuna.Study, n_trials: int) -> None:
    """Store the requested number of finished trials (workers stop there); a target already stored is not
    written again."""
    if int(n_trials) < 0:
        raise CosearchError("--trials", f"must be >= 0 (got {n_trials})")
    if get_target(study) != int(n_trials):
        study.set_user_attr(TARGET_ATTR, int(n_trials))


def get_target(study: optuna.Study) -> int | None:
    value = study.user_attrs.get(TARGET_ATTR)
    return int(value) if isinstance(value, (int, float)) else None


# ------------------------------------------------------------------------------------ locks
def _key64(text: str) -> int:
    """A signed 64-bit advisory-lock key from a name."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big", signed=True)


class _FileLock:
    """Exclusive ``flock`` on the store's own file; the kernel releases it when the holder dies.

    ``flock`` locks are separate from the ``fcntl`` record locks SQLite uses and from optuna's
    journal lock file, so they guard cosearch's counting without touching the store's own locking.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> "_FileLock":
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CREAT, 0o644)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._fd is not None
        fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class _SqlLock:
    """PostgreSQL session advisory lock or MySQL named lock, on a dedicated connection.

    The server releases it if this process dies (its connection closes). The connection is
    opened lazily and re-opened after an error.
    """

    def __init__(self, url: str, name: str) -> None:
        import sqlalchemy

        self._sa = sqlalchemy
        self.kind = storage_kind(url)
        self.name = name
        self.key = _key64(name)
        # a dedicated connection, never one of the storage's pool; the driver resolve_storage picks
        self._engine = sqlalchemy.create_engine(normalize_url(url), poolclass=sqlalchemy.pool.NullPool)
        self._conn: Any = None

    def _connection(self) -> Any:
        if self._conn is None:
            self._conn = self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        return self._conn

    def __enter__(self) -> "_SqlLock":
        text = self._sa.text
        for attempt in range(3):
            try:
                conn = self._connection()
                if self.kind == "postgresql":
                    conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": self.key})
                else:
                    got = conn.execute(text("SELECT GET_LOCK(:n, 600)"), {"n": self.name[:64]}).scalar()
                    if got != 1:
                        raise TimeoutError(f"could not get lock {self.name!r} in 600 s")
                return self
            except self._sa.exc.DBAPIError:
                self.close()
                if attempt == 2:
                    raise
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    def __exit__(self, *exc: Any) -> None:
        text = self._sa.text
        try:
            if self.kind == "postgresql":
                self._connection().execute(text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
            else:
                self._connection().execute(text("SELECT RELEASE_LOCK(:n)"), {"n": self.name[:64]})
        except self._sa.exc.DBAPIError:
            self.close()  # a closed connection released the lock anyway

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None


def study_lock(storage_url: str | None, study_name: str, *, workdir: Path | None = None) -> Any:
    """A cross-process lock for ``study_name`` on that storage (a reusable context manager)."""
    kind = storage_kind(storage_url)
    if kind in ("postgresql", "mysql"):
        return _SqlLock(storage_url, f"cosearch:{study_name}")
    path = storage_file(storage_url, None if workdir is None else Path(workdir))  # the journal or SQLite file
    if path is None:
        raise CosearchError("--storage", "in-memory SQLite cannot be shared by workers; give a file")
    return _FileLock(path)


# ------------------------------------------------------------------------------------ budget
class TrialBudget:
    """Lets workers add trials to ``study`` so that it ends with exactly ``target`` trials.

    A trial counts when it is RUNNING or WAITING, or finished with metrics (what cosearch
    evaluated: COMPLETE, or FAIL for a point whose objectives are not finite); a trial failed
    because its worker died does not count, and is replaced. Use as::

        with budget.slots(k) as n:      # holds the study lock; n <= k trials may be created
            ids = writer.create_running(rows[:n], ...)
            budget.track(ids)           # heartbeats (RDB) while they run

    :meth:`done` says whether the target is reached; :meth:`wait` sleeps while the remaining
    budget is held by trials other workers run.
    """

    def __init__(self, study: optuna.Study, target: int, lock: Any, *, heartbeat: bool = True,
                 poll_s: float = 0.5, stale_check_s: float = 5.0) -> None:
        self.study = study
        self.target = int(target)
        self.lock = lock
        self.poll_s = poll_s
        self.stale_check_s = stale_check_s
        self._last_stale_check = -float("inf")
        self.storage = study._storage
        self.study_id = study._study_id
        self.mine: set[int] = set()
        self.granted = 0
        self.failed_stale = 0
        self._beat: _Heartbeat | None = None
        if heartbeat and _heartbeat_enabled(self.storage):
            self._beat = _Heartbeat(self)
            self._beat.start()

    # -- counting
    def counts(self) -> dict[str, int]:
        """``running`` (RUNNING + WAITING), ``done`` (finished with metrics), ``failed`` (FAIL
        without metrics: crashed workers, abandoned batches)."""
        if isinstance(self.storage, RDBStorage):
            try:
                return _rdb_counts(self.storage, self.study_id)
            except Exception as err:  # pragma: no cover - schema drift: fall back
                logger.debug("RDB count query failed (%s); counting through optuna", err)
        out = {"running": 0, "done": 0, "failed": 0}
        for t in self.storage.get_all_trials(self.study_id, deepcopy=False):
            if t.state in (TrialState.RUNNING, TrialState.WAITING):
                out["running"] += 1
            elif t.state in DONE_STATES or failed_with_result(t):
                out["done"] += 1
            elif t.state == TrialState.FAIL:
                out["failed"] += 1
        return out

    def n_done(self) -> int:
        return self.counts()["done"]

    def done(self) -> bool:
        return self.n_done() >= self.target

    def _fail_stale(self, force: bool = False) -> None:
        """Fail trials of dead workers (at most every ``stale_check_s`` unless forced)."""
        now = time.monotonic()
        if force or now - self._last_stale_check >= self.stale_check_s:
            self._last_stale_check = now
            self.failed_stale += fail_stale_trials(self.study)

    # -- reserving
    @contextlib.contextmanager
    def slots(self, k: int) -> Iterator[int]:
        """Hold the study lock and yield how many of ``k`` new trials may be created now.

        Create them (RUNNING, with their owner record) inside the block: the next worker
        counts them. Yields 0 when the budget is used up or held by running trials."""
        with self.lock:
            self._fail_stale()
            c = self.counts()
            grant = max(0, min(int(k), self.target - c["done"] - c["running"]))
            self.granted += grant
            yield grant

    def track(self, trial_ids: Sequence[int]) -> None:
        """Trials this process runs now: heartbeats on RDB storages until they finish."""
        if self._beat is not None and trial_ids:
            self.mine.update(trial_ids)
            self._beat.wake()  # first beat at once, from the heartbeat thread

    def wait(self) -> bool:
        """Sleep while every remaining trial of the budget runs in another worker.

        Returns True when the study is done, False when this worker may add trials again (one
        finished short of the target, or one was failed because its worker died)."""
        while True:
            with self.lock:
                self._fail_stale(force=True)
                c = self.counts()
            if c["done"] >= self.target:
                return True
            if c["done"] + c["running"] < self.target:
                return False
            time.sleep(self.poll_s)

    def close(self) -> None:
        if self._beat is not None:
            self._beat.stop()
            self._beat = None
        close = getattr(self.lock, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> "TrialBudget":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SharedBudget:
    """The :class:`TrialBudget` of a study not opened yet: pass it as ``run_study(budget=...)``, which calls it
    with the study once it has opened (or created) it, so the study is opened and checked once.

    Called, it stores ``target`` as the study's trial target (a `cosearch worker` that joins later stops there) and
    returns the study's budget on the study lock of ``storage_url`` (:func:`study_lock`). The caller closes it
    (:meth:`close`) and reads :attr:`granted`: the trials this process created."""

    def __init__(self, storage_url: str | None, target: int) -> None:
        if int(target) < 1:
            raise CosearchError("--trials", f"must be a positive integer (got {target})")
        self.storage_url = storage_url
        self.target = int(target)
        self.budget: TrialBudget | None = None

    def __call__(self, study: optuna.Study) -> TrialBudget:
        if self.budget is not None:
            raise RuntimeError("SharedBudget: one study per instance")
        set_target(study, self.target)
        self.budget = TrialBudget(study, self.target, study_lock(self.storage_url, study.study_name))
        return self.budget

    @property
    def granted(self) -> int:
        return 0 if self.budget is None else self.budget.granted

    def close(self) -> None:
        if self.budget is not None:
            self.budget.close()


def _rdb_counts(storage: RDBStorage, study_id: int) -> dict[str, int]:
    """The same counts as :meth:`TrialBudget.counts` in two SQL aggregates.

    A FAIL trial counts as done as :func:`failed_with_result` has it: with metrics, and not marked
    :data:`ABANDONED_ATTR` (optuna stores a system attribute's value as JSON, ``true`` for the mark)."""
    import json

    import sqlalchemy
    from optuna.storages._rdb import models

    T, A, S = models.TrialModel, models.TrialUserAttributeModel, models.TrialSystemAttributeModel
    by_state = (sqlalchemy.select(T.state, sqlalchemy.func.count())
                .where(T.study_id == study_id).group_by(T.state))
    failed_with_metrics = (sqlalchemy.select(sqlalchemy.func.count()).select_from(T)
                           .where(T.study_id == study_id, T.state == TrialState.FAIL,
                                  sqlalchemy.exists().where(A.trial_id == T.trial_id, A.key == METRICS_ATTR),
                                  ~sqlalchemy.exists().where(S.trial_id == T.trial_id, S.key == ABANDONED_ATTR,
                                                             S.value_json == json.dumps(True))))
    n: dict[TrialState, int] = dict.fromkeys(TrialState, 0)
    with storage.engine.connect() as conn:
        for state, count in conn.execute(by_state):
            n[state if isinstance(state, TrialState) else TrialState[str(state)]] = int(count)
        fm = int(conn.execute(failed_with_metrics).scalar() or 0)
    return {"running": n[TrialState.RUNNING] + n[TrialState.WAITING],
            "done": sum(n[s] for s in DONE_STATES) + fm, "failed": n[TrialState.FAIL] - fm}


def _heartbeat_enabled(storage: BaseStorage) -> bool:
    from optuna.storages._heartbeat import is_heartbeat_enabled

    return is_heartbeat_enabled(storage)


class _Heartbeat(threading.Thread):
    """Records a heartbeat for every RUNNING trial this process holds, every interval."""

    def __init__(self, budget: TrialBudget) -> None:
        super().__init__(name="cosearch-heartbeat", daemon=True)
        self.budget = budget
        self.interval = float(getattr(budget.storage, "heartbeat_interval", 60) or 60)
        self._halt = threading.Event()
        self._wake = threading.Event()
        self._beaten: set[int] = set()

    def wake(self) -> None:
        self._wake.set()

    def beat(self, trial_id: int) -> None:
        try:
            self.budget.storage.record_heartbeat(trial_id)
        except Exception as err:  # a lost connection must not kill the worker
            logger.warning("heartbeat for trial id %d failed: %s", trial_id, err)

    def run(self) -> None:
        last_full = time.monotonic()
        while not self._halt.is_set():
            woken = self._wake.wait(self.interval)
            self._wake.clear()
            if self._halt.is_set():
                break
            full = not woken or time.monotonic() - last_full >= self.interval
            storage = self.budget.storage
            for tid in list(self.budget.mine):
                if not full and tid in self._beaten:
                    continue  # woken for new trials: beat only those
                try:
                    if storage.get_trial(tid).state.is_finished():
                        self.budget.mine.discard(tid)
                        self._beaten.discard(tid)
                        continue
                except Exception:  # pragma: no cover - transient storage error
                    pass
                self.beat(tid)
                self._beaten.add(tid)
            if full:
                last_full = time.monotonic()

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()
