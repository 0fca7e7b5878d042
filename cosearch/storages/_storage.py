"""Where studies live (``--storage``), and cleanup of trials orphaned by crashed workers.

Default store: an optuna journal file ``cosearch_studies.journal`` in the working directory,
guarded by an ``O_CREAT|O_EXCL`` lock file (:class:`JournalLock`, optuna's
``JournalFileOpenLock`` with a shorter retry delay) so several processes can append concurrently.
``sqlite:``/``postgresql``/``mysql`` URLs give an ``RDBStorage`` with heartbeats.

A worker killed mid-trial leaves the trial RUNNING forever: journal storage has no heartbeat in
optuna 5, and RDB heartbeats only cover ``study.optimize`` (ask/tell trials never get one). So
every trial is tagged with its owner (host identity, pid, process start time, a random worker
token) via :func:`tag_trial_owner`, and :func:`fail_stale_trials` fails RUNNING trials whose
owner process is provably gone. Trials it cannot judge (untagged, another host) are left alone.
"""
from __future__ import annotations

import logging
import os
import random
import re
import socket
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping

import optuna
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
from optuna.trial import FrozenTrial, Trial, TrialState

from ..errors import CosearchError

logger = logging.getLogger(__name__)

#: File name of the default embedded store, created in the working directory.
DEFAULT_JOURNAL = "cosearch_studies.journal"
#: System attribute holding a trial's owner record.
OWNER_ATTR = "cosearch:owner"
#: RDB heartbeat settings (seconds): a trial is stale after ``GRACE_PERIOD`` without a beat.
HEARTBEAT_INTERVAL = 60
GRACE_PERIOD = 180
#: Seconds a journal writer waits on a lock file whose mtime does not change before breaking it
#: (a holder killed inside the lock's append+fsync window leaves the lock file behind).
JOURNAL_LOCK_GRACE = 30

_RDB_PREFIXES = ("sqlite:", "postgresql", "mysql")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_ALLOWED = ("a journal file path (default ./cosearch_studies.journal), sqlite:///FILE.db, "
            "postgresql://USER@HOST/DB or mysql://USER@HOST/DB")

OwnerAlive = Callable[[Mapping[str, Any]], "bool | None"]


def resolve_storage(url: str | None, *, workdir: Path | None = None) -> BaseStorage:
    """Turn a ``--storage`` value into an optuna storage.

    ``None``: journal file ``workdir/cosearch_studies.journal`` (``workdir`` defaults to the
    current directory at call time). ``sqlite:...``, ``postgresql...``, ``mysql...``: RDBStorage
    with heartbeat; SQLite gets a 60 s busy timeout. Any other string without a ``scheme://``
    prefix is a journal file path, relative to ``workdir``. Anything else raises
    :class:`~cosearch.errors.CosearchError` (a ``ValueError``) naming ``--storage``.
    """
    base = Path.cwd() if workdir is None else Path(workdir)
    if url is None:
        return _journal(base / DEFAULT_JOURNAL)
    if not isinstance(url, str) or not url.strip():
        raise CosearchError("--storage", f"empty value; use {_ALLOWED}")
    url = url.strip()
    if url.startswith(_RDB_PREFIXES):
        return _rdb(url)
    m = _SCHEME.match(url)
    if m is not None:
        raise CosearchError("--storage", f"unsupported scheme {m.group(1)!r} in {url!r}; use {_ALLOWED}")
    path = Path(url).expanduser()
    return _journal(path if path.is_absolute() else base / path)


class JournalLock(JournalFileOpenLock):
    """optuna's ``O_CREAT|O_EXCL`` lock file (NFSv3+ safe) with a short, jittered retry delay.

    optuna's own ``acquire`` doubles its sleep from 1 ms up to 1 s and never resets it, so with
    a few concurrent writers a process often sleeps ~0.5 s for a lock held for a millisecond
    (4 writers: 0.3 s -> 1.5 s for 25 trials each). Here the delay is capped at 20 ms. A lock
    file whose mtime stays unchanged for ``grace_period`` seconds (its holder died inside the
    append) is broken, as optuna does.
    """

    def __init__(self, filepath: str, grace_period: int | None = JOURNAL_LOCK_GRACE) -> None:
        super().__init__(filepath, grace_period=grace_period)
        self._path = filepath + ".lock"
        self._grace = grace_period

    def acquire(self) -> bool:
        delay = 0.0005
        seen_mtime: float | None = None
        seen_at = time.monotonic()
        while True:
            try:
                os.close(os.open(self._path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                return True
            except FileExistsError:
                pass
            if self._grace is not None:
                try:
                    mtime = os.stat(self._path).st_mtime
                except OSError:
                    continue  # released meanwhile: retry at once
                if mtime != seen_mtime:
                    seen_mtime, seen_at = mtime, time.monotonic()
                elif time.monotonic() - seen_at > self._grace:
                    logger.warning("journal lock %s held for over %s s without change: breaking it",
                                   self._path, self._grace)
                    try:
                        self.release()
                    except RuntimeError:
                        pass
                    continue
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.02)

    def release(self) -> None:
        tmp = f"{self._path}{uuid.uuid4()}.rename"
        try:
            os.rename(self._path, tmp)
        except OSError as err:
            raise RuntimeError("Error: did not possess lock") from err
        os.unlink(tmp)


def _check_writable(path: Path) -> None:
    """The journal file (a regular file) and its directory (for the lock file) must be writable:
    a one-line error naming ``--storage`` instead of optuna's PermissionError traceback."""
    import stat

    def fail(why: str) -> CosearchError:
        return CosearchError("--storage", f"journal {str(path)!r} is not writable ({why})")

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and not stat.S_ISREG(path.stat().st_mode):
            raise fail("not a regular file")
        if not os.access(path.parent, os.W_OK | os.X_OK):
            raise fail(f"no write permission on directory {str(path.parent)!r}")
        if path.exists() and not os.access(path, os.R_OK | os.W_OK):
            raise fail("no read/write permission on the file")
        with open(path, "ab"):  # what optuna does; also catches read-only file systems (even as root)
            pass
    except OSError as err:
        raise fail(err.strerror or type(err).__name__) from None


def _journal(path: Path) -> JournalStorage:
    if path.is_dir():
        raise CosearchError("--storage", f"{str(path)!r} is a directory; give a journal file path")
    _check_writable(path)
    lock = JournalLock(str(path), grace_period=JOURNAL_LOCK_GRACE)
    logger.debug("journal storage at %s", path)
    return JournalStorage(JournalFileBackend(str(path), lock_obj=lock))


def _rdb(url: str) -> RDBStorage:
    engine_kwargs: dict[str, Any]
    if url.startswith("sqlite:"):
        # Wait for the database lock instead of failing with "database is locked".
        engine_kwargs = {"connect_args": {"timeout": 60}}
    else:
        engine_kwargs = {"pool_pre_ping": True}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        try:
            return RDBStorage(url, engine_kwargs=engine_kwargs, heartbeat_interval=HEARTBEAT_INTERVAL,
                              grace_period=GRACE_PERIOD)
        except ImportError as err:
            raise CosearchError("--storage", f"cannot open {url!r}: missing driver ({err})") from err
        except Exception as err:  # sqlalchemy errors: bad URL, unreachable server, ...
            msg = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise CosearchError("--storage", f"cannot open {url!r}: {msg}") from err


# --- trial ownership -------------------------------------------------------------------------

_TOKEN = uuid.uuid4().hex


def _new_token() -> None:
    global _TOKEN
    _TOKEN = uuid.uuid4().hex


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_token)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _host_identity() -> dict[str, str]:
    """Hostname, kernel boot id and pid namespace: equal on all three means pids are comparable."""
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = ""
    return {"host": socket.gethostname(), "boot_id": _read("/proc/sys/kernel/random/boot_id"),
            "pidns": pidns}


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks since boot) from /proc/<pid>/stat, if readable."""
    raw = _read(f"/proc/{pid}/stat")
    if not raw or ")" not in raw:
        return None
    fields = raw.rsplit(")", 1)[1].split()  # fields[0] is field 3 (state); starttime is field 22
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def owner_record() -> dict[str, Any]:
    """The record :func:`tag_trial_owner` stores for the calling process."""
    stat = _proc_stat(os.getpid())
    return {**_host_identity(), "pid": os.getpid(), "start": stat[1] if stat else None,
            "token": _TOKEN, "tagged_at": time.time()}


def tag_trial_owner(trial: Trial) -> dict[str, Any]:
    """Record the calling process as the owner of ``trial`` (call right after ``study.ask()``).

    Stored as system attribute ``cosearch:owner`` so it stays out of ``user_attrs`` and
    ``trials_dataframe``. Returns the record.
    """
    record = owner_record()
    trial.storage.set_trial_system_attr(trial._trial_id, OWNER_ATTR, record)
    return record


def trial_owner(trial: FrozenTrial) -> dict[str, Any] | None:
    """The owner record of a (frozen) trial, or ``None`` if it was never tagged."""
    rec = trial.system_attrs.get(OWNER_ATTR)
    return rec if isinstance(rec, dict) else None


def owner_is_alive(owner: Mapping[str, Any]) -> bool | None:
    """True: owner process runs; False: provably gone; None: cannot tell (other host/namespace).

    Gone means: no such pid, a zombie, or a pid reused by a process with another start time.
    """
    pid = owner.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    if pid == os.getpid() and owner.get("token") == _TOKEN:
        return True
    here = _host_identity()
    if any(owner.get(key) != here[key] for key in ("host", "boot_id", "pidns")):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by another user
    stat = _proc_stat(pid)
    if stat is None:
        return True  # alive per kill(0); no /proc to say more
    state, start = stat
    if state in ("Z", "X"):
        return False
    recorded = owner.get("start")
    if isinstance(recorded, int) and recorded != start:
        return False
    return True


def fail_stale_trials(study: optuna.Study, *, owner_alive: OwnerAlive | None = None) -> int:
    """Mark RUNNING trials whose owner process is gone as FAIL; return how many were failed.

    ``owner_alive(record)`` may decide for trials this host cannot judge (e.g. by asking a
    cluster scheduler): True/False decide, None falls back to :func:`owner_is_alive`. Untagged
    trials and trials whose owner's state is unknown are never failed. For RDB storages with a
    heartbeat, optuna's own heartbeat-based cleanup runs too (its failures are counted).
    """
    storage = study._storage
    failed = 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = trial_owner(trial)
        if owner is None:
            continue
        verdict = owner_alive(owner) if owner_alive is not None else None
        if verdict is None:
            verdict = owner_is_alive(owner)
        if verdict is not False:
            continue
        try:
            storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL)
        except UpdateFinishedTrialError:
            continue  # finished or failed meanwhile by someone else
        failed += 1
        logger.warning("trial %d of study %r was RUNNING but its worker (host %s, pid %s) is gone: "
                       "marked FAIL", trial.number, study.study_name, owner.get("host"), owner.get("pid"))
    failed += _fail_heartbeat_stale(study)
    return failed


def _fail_heartbeat_stale(study: optuna.Study) -> int:
    from optuna.storages._heartbeat import is_heartbeat_enabled

    if not is_heartbeat_enabled(study._storage):
        return 0
    before = {t._trial_id for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)
    after = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
    n = sum(1 for t in after if t._trial_id in before)
    if n:
        logger.warning("%d trial(s) of study %r failed by the RDB heartbeat check", n, study.study_name)
    return n
