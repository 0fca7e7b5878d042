"""Where studies live (``--storage``), and cleanup of trials orphaned by crashed workers.

Default store: an optuna journal file ``cosearch_studies.journal`` in the working directory,
guarded by a lock file (:class:`JournalLock`: optuna's ``JournalFileOpenLock`` protocol with a
shorter retry delay, the holder's pid inside, and a dead holder's lock broken at once) so several
processes can append concurrently; :class:`JournalBackend` drops a line cut by a crash before the
next append and refuses a corrupt line. ``sqlite:``/``postgresql``/``mysql`` URLs give an
``RDBStorage`` with heartbeats (``postgresql://`` gets the installed driver; messages never show
a password; a fresh SQLite file's tables are created under a file lock).

A worker killed mid-trial leaves the trial RUNNING forever: journal storage has no heartbeat in
optuna 5, and RDB heartbeats only cover ``study.optimize`` (ask/tell trials never get one). So
every trial is tagged with its owner (host identity, pid, process start time, a random worker
token) via :func:`tag_trial_owner`, and :func:`fail_stale_trials` fails RUNNING trials whose
owner process is provably gone. Trials it cannot judge (untagged, another host) are left alone.
"""
from __future__ import annotations

import fcntl
import json
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
from optuna.storages.journal._file import get_lock_file
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


_PASSWORD = re.compile(r"(://[^:/@\s]*:)([^@\s]*)@")


def mask_url(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@host`` URL in it masked."""
    return _PASSWORD.sub(r"\1***@", str(text))


def _module_available(name: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def normalize_url(url: str) -> str:
    """The documented ``postgresql://`` (or ``postgres://``) URL with a driver that is installed.

    SQLAlchemy 2.1 maps a bare ``postgresql://`` to psycopg 3, while the ``[postgres]`` extra
    installs psycopg2: pick ``postgresql+psycopg2://`` when only psycopg2 is importable.
    """
    m = re.match(r"^(postgresql|postgres)://", url)
    if m is None:
        return url
    if _module_available("psycopg2") and not _module_available("psycopg"):
        return "postgresql+psycopg2://" + url[m.end():]
    return "postgresql://" + url[m.end():]


def resolve_storage(url: str | None, *, workdir: Path | None = None, must_exist: bool = False) -> BaseStorage:
    """Turn a ``--storage`` value into an optuna storage.

    ``None``: journal file ``workdir/cosearch_studies.journal`` (``workdir`` defaults to the
    current directory at call time). ``sqlite:...``, ``postgresql...``, ``mysql...``: RDBStorage
    with heartbeat; SQLite gets a 60 s busy timeout. Any other string without a ``scheme://``
    prefix is a journal file path, relative to ``workdir``. Anything else raises
    :class:`~cosearch.errors.CosearchError` (a ``ValueError``) naming ``--storage``.
    ``must_exist`` (read-only commands): a missing journal or SQLite file is an error instead of
    being created. No message ever shows a password.
    """
    from ._compat import check_optuna

    check_optuna()
    base = Path.cwd() if workdir is None else Path(workdir)
    if url is None:
        return _journal(base / DEFAULT_JOURNAL, must_exist)
    if not isinstance(url, str) or not url.strip():
        raise CosearchError("--storage", f"empty value; use {_ALLOWED}")
    url = url.strip()
    if url.startswith(_RDB_PREFIXES):
        return _rdb(normalize_url(url), must_exist, base)
    m = _SCHEME.match(url)
    if m is not None:
        raise CosearchError("--storage", f"unsupported scheme {m.group(1)!r} in {mask_url(url)!r}; use {_ALLOWED}")
    path = Path(url).expanduser()
    return _journal(path if path.is_absolute() else base / path, must_exist)


class JournalLock(JournalFileOpenLock):
    """optuna's lock file protocol (a ``.lock`` file that exists while held; NFS safe) with a
    short, jittered retry delay and immediate recovery from a dead holder.

    optuna's own ``acquire`` doubles its sleep from 1 ms up to 1 s and never resets it, so with
    a few concurrent writers a process often sleeps ~0.5 s for a lock held for a millisecond
    (4 writers: 0.3 s -> 1.5 s for 25 trials each). Here the delay is capped at 20 ms.

    The lock file is created atomically *with* its holder's record (host identity, pid, process
    start time) by ``link(2)``-ing a private temporary file to the lock name. A waiter that finds
    the holder provably dead (same host, pid gone or reused) breaks the lock at once; breakers are
    serialised by an ``flock`` (released by the kernel) on ``<journal>.lock.break`` and break
    only the very lock file they judged. A lock whose holder cannot be judged (other host, empty
    record) is broken after ``grace_period`` seconds without change, as optuna does.
    """

    def __init__(self, filepath: str, grace_period: int | None = JOURNAL_LOCK_GRACE) -> None:
        super().__init__(filepath, grace_period=grace_period)
        self._path = filepath + ".lock"
        self._grace = grace_period

    def _create(self) -> bool:
        tmp = f"{self._path}.{os.getpid()}.{uuid.uuid4().hex[:12]}.tmp"
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            os.write(fd, _lock_record())
        finally:
            os.close(fd)
        try:
            os.link(tmp, self._path)
            return True
        except FileExistsError:
            return False
        except OSError:  # file systems without hard links: plain O_EXCL (record written after)
            try:
                fd = os.open(self._path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            try:
                os.write(fd, _lock_record())
            finally:
                os.close(fd)
            return True
        finally:
            os.unlink(tmp)

    def _holder_dead(self) -> bool:
        try:
            with open(self._path, "rb") as f:
                raw = f.read(4096)
        except OSError:
            return False
        try:
            rec = json.loads(raw)
        except ValueError:
            return False
        return isinstance(rec, dict) and owner_is_alive(rec) is False

    def _break(self, judge: Callable[[], bool], why: str) -> None:
        """Remove the lock file if ``judge()`` still holds under the breakers' flock."""
        try:
            fd = os.open(self._path + ".break", os.O_CREAT | os.O_RDWR, 0o644)
        except OSError:
            fd = None
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            if judge():
                logger.warning("journal lock %s: %s; breaking it", self._path, why)
                try:
                    self.release()
                except RuntimeError:
                    pass
        finally:
            if fd is not None:
                os.close(fd)  # releases the flock

    def acquire(self) -> bool:
        delay = 0.0005
        seen: tuple[float, int] | None = None
        seen_at = time.monotonic()
        checked_dead = 0.0
        while True:
            if self._create():
                return True
            try:
                st = os.stat(self._path)
            except OSError:
                continue  # released meanwhile: retry at once
            now = time.monotonic()
            if now - checked_dead > 0.05:  # reading the record costs an open: not on every spin
                checked_dead = now
                if self._holder_dead():
                    self._break(self._holder_dead, "its holder process is gone")
                    continue
            key = (st.st_mtime, st.st_ino)
            if key != seen:
                seen, seen_at = key, now
            elif self._grace is not None and now - seen_at > self._grace:
                def unchanged() -> bool:
                    try:
                        s2 = os.stat(self._path)
                    except OSError:
                        return False
                    return (s2.st_mtime, s2.st_ino) == key
                self._break(unchanged, f"held for over {self._grace} s without change")
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


_LOCK_RECORD: tuple[int, bytes] | None = None


def _lock_record() -> bytes:
    """This process's owner record as the journal lock file's content (cached per pid)."""
    global _LOCK_RECORD
    pid = os.getpid()
    if _LOCK_RECORD is None or _LOCK_RECORD[0] != pid:
        rec = owner_record()
        rec.pop("tagged_at", None)
        rec.pop("token", None)  # a pid's liveness, not the worker token, decides a lock
        _LOCK_RECORD = (pid, json.dumps(rec).encode())
    return _LOCK_RECORD[1]


class JournalBackend(JournalFileBackend):
    """optuna's journal file backend that survives a write cut short and refuses corruption.

    * A last line without its newline (a process killed inside ``write``) is skipped when read
      and truncated away, with a one-line warning, before the next append: otherwise the next
      append would be glued onto it and every later read would fail.
    * A complete line that is not JSON raises :class:`~cosearch.errors.CosearchError` naming the
      file and line: a corrupt journal never reads as "no studies" (optuna skips a bad last line).
    """

    def read_logs(self, log_number_from: int):  # type: ignore[override]
        with open(self._file_path, "rb") as f:
            remaining = os.fstat(f.fileno()).st_size
            start = 0
            if log_number_from in self._log_number_offset:
                f.seek(self._log_number_offset[log_number_from])
                start = log_number_from
                remaining -= self._log_number_offset[log_number_from]
            for log_number, line in enumerate(f, start=start):
                remaining -= len(line)
                if remaining < 0 or not line.endswith(b"\n"):
                    break  # being written now, or cut by a crash (dropped at the next append)
                try:
                    log = json.loads(line)
                except ValueError as err:
                    raise CosearchError("--storage", f"journal {self._file_path} is corrupt at line "
                                        f"{log_number + 1} ({err}); restore it from a backup or remove that line") from err
                if log_number + 1 not in self._log_number_offset:
                    self._log_number_offset[log_number + 1] = self._log_number_offset[log_number] + len(line)
                if log_number < log_number_from:
                    continue
                yield log

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode("utf-8")
        with get_lock_file(self._lock):
            fd = os.open(self._file_path, os.O_RDWR | os.O_APPEND)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    _drop_partial_tail(fd, size, self._file_path)
                os.write(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)


def _drop_partial_tail(fd: int, size: int, path: str) -> None:
    pos, chunk = size, 65536
    keep = 0
    while pos > 0:
        lo = max(0, pos - chunk)
        buf = os.pread(fd, pos - lo, lo)
        i = buf.rfind(b"\n")
        if i >= 0:
            keep = lo + i + 1
            break
        pos = lo
    os.ftruncate(fd, keep)
    logger.warning("journal %s ended with a partial line of %d bytes (a write was cut by a crash): dropped it",
                   path, size - keep)


def _journal(path: Path, must_exist: bool = False) -> JournalStorage:
    if path.is_dir():
        raise CosearchError("--storage", f"{str(path)!r} is a directory; give a journal file path")
    if must_exist and not path.exists():
        raise CosearchError("--storage", f"journal file {str(path)!r} does not exist")
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = JournalLock(str(path), grace_period=JOURNAL_LOCK_GRACE)
    logger.debug("journal storage at %s", path)
    return JournalStorage(JournalBackend(str(path), lock_obj=lock))


def _sqlite_file(url: str, base: Path) -> Path | None:
    """The database file of a ``sqlite:///FILE`` URL (None for in-memory)."""
    rest = url.split(":", 1)[1]
    if not rest.startswith("///"):
        return None
    name = rest[3:].split("?", 1)[0]
    if not name or name == ":memory:":
        return None
    p = Path(name)
    return p if p.is_absolute() else base / p


def _rdb(url: str, must_exist: bool = False, base: Path | None = None) -> RDBStorage:
    engine_kwargs: dict[str, Any]
    db_file = _sqlite_file(url, base or Path.cwd()) if url.startswith("sqlite:") else None
    if url.startswith("sqlite:"):
        # Wait for the database lock instead of failing with "database is locked".
        engine_kwargs = {"connect_args": {"timeout": 60}}
        if must_exist and db_file is not None and not db_file.exists():
            raise CosearchError("--storage", f"SQLite database {str(db_file)!r} does not exist")
    else:
        engine_kwargs = {"pool_pre_ping": True}
    guard = None
    if db_file is not None and not must_exist and db_file.parent.is_dir():
        # Serialise table creation on a fresh file: concurrent creators otherwise fail with
        # "UNIQUE constraint failed: alembic_version" / "table ... already exists".
        try:
            guard = os.open(str(db_file) + ".create-lock", os.O_CREAT | os.O_RDWR, 0o644)
            fcntl.flock(guard, fcntl.LOCK_EX)
        except OSError:
            guard = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            try:
                return RDBStorage(url, engine_kwargs=engine_kwargs, heartbeat_interval=HEARTBEAT_INTERVAL,
                                  grace_period=GRACE_PERIOD)
            except ImportError as err:
                raise CosearchError("--storage", f"cannot open {mask_url(url)!r}: missing driver "
                                    f"({mask_url(str(err))})") from err
            except Exception as err:  # sqlalchemy errors: bad URL, unreachable server, ...
                msg = str(err).splitlines()[0] if str(err) else type(err).__name__
                raise CosearchError("--storage", f"cannot open {mask_url(url)!r}: {mask_url(msg)}") from err
    finally:
        if guard is not None:
            os.close(guard)


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
