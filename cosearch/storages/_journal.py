"""The journal file store: a lock that survives a killed holder and a backend that survives a cut write.

Split from :mod:`cosearch.storages._storage` (which opens storages); see the classes for details.
"""
from __future__ import annotations

import fcntl
import functools
import json
import logging
import os
import random
import reprlib
import time
import uuid
from datetime import datetime
from typing import Any, Callable

from optuna.distributions import BaseDistribution, json_to_distribution
from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
from optuna.storages.journal._file import get_lock_file
from optuna.trial import TrialState

from ..errors import CosearchError
from ._owners import owner_is_alive, owner_record

logger = logging.getLogger("cosearch.storages._storage")

#: Seconds a journal writer waits on a lock file whose holder cannot be judged (other host, no
#: record) and whose mtime does not change, before breaking it.
JOURNAL_LOCK_GRACE = 30


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
    * A complete line that is not JSON, or is JSON of a shape optuna cannot replay (not an object,
      an unknown ``op_code``, a field missing or of the wrong type: :func:`log_problem`), raises
      :class:`~cosearch.errors.CosearchError` naming the file and line: a corrupt journal never
      reads as "no studies" (optuna skips a bad last line) nor crashes inside optuna's replay.
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
                except (ValueError, RecursionError) as err:  # RecursionError: brackets nested too deep
                    raise _corrupt(self._file_path, log_number, str(err) or type(err).__name__) from err
                if log_number + 1 not in self._log_number_offset:
                    self._log_number_offset[log_number + 1] = self._log_number_offset[log_number] + len(line)
                if log_number < log_number_from:
                    continue
                problem = log_problem(log)
                if problem is not None:
                    raise _corrupt(self._file_path, log_number, problem)
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


def _corrupt(path: str, log_number: int, why: str) -> CosearchError:
    """The one error for a complete journal line that cannot be replayed (0-based ``log_number``)."""
    return CosearchError("--storage", f"journal {path} is corrupt at line {log_number + 1} ({why}); "
                                      "restore it from a backup or remove that line")


# --- the shape of a journal line: what optuna's replay (JournalStorageReplayResult) indexes -----
def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_time(v: Any) -> bool:
    if not isinstance(v, str):
        return False
    try:
        datetime.fromisoformat(v)
    except ValueError:
        return False
    return True


@functools.lru_cache(maxsize=1024)
def _distribution(text: str) -> BaseDistribution | None:
    """The distribution serialised as ``text``, or None; cached: a study repeats a few strings."""
    try:
        return json_to_distribution(text)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def _in_distribution(dist: BaseDistribution | None, value: Any) -> bool:
    """``value`` is an internal representation optuna can turn back into a parameter of ``dist``."""
    if dist is None or not _is_number(value):
        return False
    try:
        dist.to_external_repr(value)
    except (ValueError, TypeError, IndexError, OverflowError):
        return False
    return True


def _is_step_dict(v: Any) -> bool:
    if not isinstance(v, dict) or not all(_is_number(x) or x is None for x in v.values()):
        return False
    try:
        for k in v:
            int(k)
    except ValueError:
        return False
    return True


#: A field check: (predicate, what the field must be).
_INT = (_is_int, "an integer")
_STR = (lambda v: isinstance(v, str), "a string")
_OBJECT = (lambda v: isinstance(v, dict), "an object")
_ONE_ENTRY = (lambda v: isinstance(v, dict) and len(v) == 1, "an object with one entry")
_TIME = (_is_time, "an ISO date-time string")
_TIME_OR_NULL = (lambda v: v is None or _is_time(v), "an ISO date-time string or null")
_NUMBER = (_is_number, "a number")
_NUMBER_OR_NULL = (lambda v: v is None or _is_number(v), "a number or null")
_NUMBERS_OR_NULL = (lambda v: v is None or (isinstance(v, list) and all(map(_is_number, v))),
                    "a list of numbers or null")
_DIRECTIONS = (lambda v: isinstance(v, list) and bool(v) and all(_is_int(d) and d in (0, 1, 2) for d in v),
               "a non-empty list of 0, 1 or 2")
_STATES = frozenset(s.value for s in TrialState)
_STATE = (lambda v: _is_int(v) and v in _STATES, f"a trial state 0-{len(TrialState) - 1}")
_DISTRIBUTION = (lambda v: isinstance(v, str) and _distribution(v) is not None, "a serialised distribution")
_DISTRIBUTIONS = (lambda v: isinstance(v, dict) and all(_DISTRIBUTION[0](d) for d in v.values()),
                  "an object of serialised distributions")
_STEPS = (_is_step_dict, "an object of step: number")

#: Required fields of each op_code (optuna's JournalOperation), besides op_code and worker_id.
_REQUIRED: dict[int, dict[str, tuple[Callable[[Any], bool], str]]] = {
    0: {"study_name": _STR, "directions": _DIRECTIONS},                       # CREATE_STUDY
    1: {"study_id": _INT},                                                     # DELETE_STUDY
    2: {"study_id": _INT, "user_attr": _ONE_ENTRY},                            # SET_STUDY_USER_ATTR
    3: {"study_id": _INT, "system_attr": _ONE_ENTRY},                          # SET_STUDY_SYSTEM_ATTR
    4: {"study_id": _INT, "datetime_start": _TIME_OR_NULL},                    # CREATE_TRIAL
    5: {"trial_id": _INT, "param_name": _STR, "param_value_internal": _NUMBER,  # SET_TRIAL_PARAM
        "distribution": _DISTRIBUTION},
    6: {"trial_id": _INT, "state": _STATE, "values": _NUMBERS_OR_NULL},        # SET_TRIAL_STATE_VALUES
    7: {"trial_id": _INT, "step": _INT, "intermediate_value": _NUMBER_OR_NULL},  # SET_TRIAL_INTERMEDIATE_VALUE
    8: {"trial_id": _INT, "user_attr": _ONE_ENTRY},                            # SET_TRIAL_USER_ATTR
    9: {"trial_id": _INT, "system_attr": _ONE_ENTRY},                          # SET_TRIAL_SYSTEM_ATTR
    10: {},                                                                    # DISCARD_TRIALS (skipped)
}
#: Fields of CREATE_TRIAL (a whole trial, from ``add_trial``) that optuna reads when present.
_OPTIONAL = {"state": _STATE, "datetime_complete": _TIME, "distributions": _DISTRIBUTIONS,
             "params": _OBJECT, "user_attrs": _OBJECT, "system_attrs": _OBJECT,
             "value": _NUMBER_OR_NULL, "values": _NUMBERS_OR_NULL, "intermediate_values": _STEPS}


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def _field_problem(log: dict, name: str, check: tuple[Callable[[Any], bool], str]) -> str | None:
    if not check[0](log[name]):
        return f"op_code {log['op_code']} field {name!r} is not {check[1]}"
    return None


def log_problem(log: Any) -> str | None:
    """Why the parsed journal line ``log`` cannot be replayed by optuna, or None if it can.

    optuna indexes the fields of each operation without checking them, so a line of valid JSON in
    the wrong shape (``[1,2,3]``, ``{"op_code":0}``) would stop every read of the storage with a
    KeyError or TypeError deep in its replay; checked here, it is reported like a line that is not JSON.
    """
    if not isinstance(log, dict):
        kind = _JSON_KINDS.get(type(log), type(log).__name__)
        return f"a JSON {kind} where an object with op_code and worker_id is expected"
    op = log.get("op_code")
    if not _is_int(op) or op not in _REQUIRED:
        return f"op_code {reprlib.repr(op)} is not one of 0-{len(_REQUIRED) - 1}"
    if not isinstance(log.get("worker_id"), str):
        return "field 'worker_id' is missing or not a string"
    for name, check in _REQUIRED[op].items():
        if name not in log:
            return f"op_code {op} lacks field {name!r}"
        problem = _field_problem(log, name, check)
        if problem:
            return problem
    if op == 4:
        return _trial_problem(log)
    if op == 5 and not _in_distribution(_distribution(log["distribution"]), log["param_value_internal"]):
        return "op_code 5 field 'param_value_internal' does not fit its distribution"
    if op == 6:
        needed = "datetime_start" if log["state"] == TrialState.RUNNING.value else \
            "datetime_complete" if TrialState(log["state"]).is_finished() else None
        if needed and not _is_time(log.get(needed)):
            return f"op_code 6 field {needed!r} is missing or not {_TIME[1]}"
    return None


def _trial_problem(log: dict) -> str | None:
    """The problem of a CREATE_TRIAL line's optional fields (a whole trial written at once), or None."""
    for name, check in _OPTIONAL.items():
        problem = _field_problem(log, name, check) if name in log else None
        if problem:
            return problem
    if log.get("value") is not None and log.get("values") is not None:
        return "op_code 4 has both 'value' and 'values'"
    dists = log.get("distributions", {})
    for name, value in log.get("params", {}).items():
        if not _in_distribution(_distribution(dists[name]) if name in dists else None, value):
            return f"op_code 4 parameter {name!r} has no distribution or does not fit it"
    return None


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
