"""The journal file store: a lock that survives a killed holder and a backend that survives a cut write.

Split from :mod:`cosearch.storages._storage` (which opens storages); see the classes for details.
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import time
import uuid
from typing import Any, Callable

from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock
from optuna.storages.journal._file import get_lock_file

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
