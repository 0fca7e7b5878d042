"""Where studies live (``--storage``), and cleanup of trials orphaned by crashed workers.

Default store: an optuna journal file ``cosearch_studies.journal`` in the working directory,
guarded by a lock file (:class:`JournalLock`: optuna's ``JournalFileOpenLock`` protocol with a
shorter retry delay, the holder's pid inside, and a dead holder's lock broken at once) so several
processes can append concurrently; :class:`JournalBackend` drops a line cut by a crash before the
next append and refuses a corrupt line. ``sqlite:``/``postgresql:``/``mysql:`` URLs give an
``RDBStorage`` with heartbeats (``postgresql://`` gets the installed driver; a Heroku-style
``postgres://`` is read as ``postgresql://``; messages never show a password; a fresh SQLite
file's tables are created under a file lock).

A worker killed mid-trial leaves the trial RUNNING forever: journal storage has no heartbeat in
optuna 5, and RDB heartbeats only cover ``study.optimize`` (ask/tell trials never get one). So
every trial is tagged with its owner (host identity, pid, process start time, a random worker
token) via :func:`tag_trial_owner`, and :func:`fail_stale_trials` fails RUNNING trials whose
owner process is provably gone. Trials it cannot judge (untagged, another host) are left alone.
"""
from __future__ import annotations

import fcntl
import logging
import os
import re
import warnings
from pathlib import Path
from typing import Any

from optuna.exceptions import ExperimentalWarning
from optuna.storages import BaseStorage, JournalStorage, RDBStorage

from ..errors import CosearchError
from ._journal import JOURNAL_LOCK_GRACE, JournalBackend, JournalLock
from ._owners import (  # noqa: F401  (re-exported: every name stays importable from here)
    OWNER_ATTR,
    OwnerAlive,
    fail_stale_trials,
    owner_is_alive,
    owner_record,
    tag_trial_owner,
    trial_owner,
)

logger = logging.getLogger(__name__)

#: File name of the default embedded store, created in the working directory.
DEFAULT_JOURNAL = "cosearch_studies.journal"
#: RDB heartbeat settings (seconds): a trial is stale after ``GRACE_PERIOD`` without a beat.
HEARTBEAT_INTERVAL = 60
GRACE_PERIOD = 180

#: A database ``--storage`` URL: ``sqlite:``, ``postgresql:`` or ``mysql:``, optionally with a SQLAlchemy driver
#: (``postgresql+psycopg2:``); group 1 is its kind. ``postgres:`` (Heroku-style; SQLAlchemy has refused that
#: dialect name since 1.4) is the kind ``postgresql``: :func:`check_storage` rewrites it. The colon is required, so
#: a journal file named ``mysql_runs.journal`` or ``postgresql-x.journal`` is a journal. Any other value without a
#: ``scheme://`` is a journal file path. The one recogniser: every helper here goes through :func:`_rdb_kind`.
_RDB_URL = re.compile(r"^(sqlite|postgresql|postgres|mysql)(\+\w+)?:")
#: Scheme names read as another kind's (see :data:`_RDB_URL`).
_ALIASES = {"postgres": "postgresql"}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_ALLOWED = ("a journal file path (default ./cosearch_studies.journal), sqlite:///FILE.db, "
            "postgresql://USER@HOST/DB or mysql://USER@HOST/DB")


def check_storage(url: str | None) -> str | None:
    """A ``--storage`` value checked, the one gate every user of it goes through: None (the default
    journal) stays None, anything else comes back stripped. An empty value, or a ``scheme://`` other
    than ``sqlite:``/``postgresql:``/``mysql:`` (each optionally ``+driver``), raises
    :class:`~cosearch.errors.CosearchError` naming ``--storage`` and the accepted forms (it would
    otherwise be read as a journal path: ``ftp://x`` became the directory ``./ftp:/x``). A ``postgres:``
    (or ``postgres+driver:``) URL comes back as ``postgresql:`` (``postgresql+driver:``), with a log line.
    No message shows a password."""
    if url is None:
        return None
    if not isinstance(url, str) or not url.strip():
        raise CosearchError("--storage", f"empty value; use {_ALLOWED}")
    url = url.strip()
    m = _RDB_URL.match(url)
    if m is not None:
        return _canonical(url, m)
    m = _SCHEME.match(url)
    if m is not None:
        raise CosearchError("--storage", f"unsupported scheme {m.group(1)!r} in {mask_url(url)!r}; use {_ALLOWED}")
    return url


def storage_kind(url: str | None) -> str:
    """'journal', 'sqlite', 'postgresql' or 'mysql' for a ``--storage`` value (checked: :func:`check_storage`)."""
    url = check_storage(url)
    return (_rdb_kind(url) if url is not None else None) or "journal"


def _rdb_kind(url: str) -> str | None:
    """'sqlite', 'postgresql' or 'mysql' for a database URL (:data:`_RDB_URL`), None for anything else."""
    m = _RDB_URL.match(url)
    return None if m is None else _ALIASES.get(m.group(1), m.group(1))


#: ``postgres:`` values already reported (each is checked several times per command: one log line).
_TOLD: set[str] = set()


def _canonical(url: str, m: re.Match[str]) -> str:
    """``url`` (matched by :data:`_RDB_URL` as ``m``) with its kind spelled as SQLAlchemy knows it."""
    kind = m.group(1)
    if kind not in _ALIASES:
        return url
    new = _ALIASES[kind] + url[len(kind):]
    if url not in _TOLD:
        _TOLD.add(url)
        logger.info("--storage: %s read as %s (SQLAlchemy has no %r dialect)", mask_url(url), mask_url(new), kind)
    return new


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
    installs psycopg2: pick ``postgresql+psycopg2://`` when only psycopg2 is importable. A
    ``postgres`` kind is first spelled ``postgresql`` (:func:`check_storage`, the one recogniser).
    """
    m = _RDB_URL.match(url)
    if m is None:
        return url
    url = _canonical(url, m)
    if not url.startswith("postgresql://"):
        return url
    rest = url[len("postgresql://"):]
    if _module_available("psycopg2") and not _module_available("psycopg"):
        return "postgresql+psycopg2://" + rest
    return "postgresql://" + rest


def resolve_storage(url: str | None, *, workdir: Path | None = None, must_exist: bool = False) -> BaseStorage:
    """Turn a ``--storage`` value into an optuna storage.

    ``None``: journal file ``workdir/cosearch_studies.journal`` (``workdir`` defaults to the
    current directory at call time). ``sqlite:...``, ``postgresql:...``, ``mysql:...`` (optionally
    ``+driver``): RDBStorage with heartbeat; SQLite gets a 60 s busy timeout. Any other string
    without a ``scheme://`` prefix is a journal file path, relative to ``workdir``. Anything else raises
    :class:`~cosearch.errors.CosearchError` (a ``ValueError``) naming ``--storage``.
    ``must_exist`` (read-only commands): a missing journal or SQLite file is an error instead of
    being created. No message ever shows a password.
    """
    from ._compat import check_optuna

    check_optuna()
    base = Path.cwd() if workdir is None else Path(workdir)
    url = check_storage(url)
    if url is not None and _rdb_kind(url) is not None:
        return _rdb(normalize_url(url), must_exist, base)
    return _journal(storage_file(url, base), must_exist)

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


#: The first bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"


def _starts_with(path: Path, magic: bytes) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(magic)) == magic
    except OSError:
        return False


def _journal(path: Path, must_exist: bool = False) -> JournalStorage:
    if path.is_dir():
        raise CosearchError("--storage", f"{str(path)!r} is a directory; give a journal file path")
    if must_exist and not path.exists():
        raise CosearchError("--storage", f"journal file {str(path)!r} does not exist")
    if path.exists() and not path.is_file():  # /dev/zero would be read without end, a FIFO wait for a writer
        raise CosearchError("--storage", f"{str(path)!r} is not a regular file; give a journal file path")
    if path.exists() and _starts_with(path, SQLITE_MAGIC):  # read as a journal it looked empty, or 'corrupt'
        raise CosearchError("--storage", f"{str(path)!r} is a SQLite database, not a journal: give --storage "
                            f"sqlite:///{path}")
    if not must_exist:
        _check_writable(path)  # read-only commands must not create it
    lock = JournalLock(str(path), grace_period=JOURNAL_LOCK_GRACE)
    logger.debug("journal storage at %s", path)
    return JournalStorage(JournalBackend(str(path), lock_obj=lock))


def storage_file(url: str | None, base: Path | None = None) -> Path | None:
    """The file a ``--storage`` value keeps its studies in (a journal, a SQLite database); None for a server.
    A value :func:`resolve_storage` would refuse raises the same error (:func:`check_storage`)."""
    base = Path.cwd() if base is None else base
    url = check_storage(url)
    if url is None:
        return base / DEFAULT_JOURNAL
    kind = _rdb_kind(url)
    if kind == "sqlite":
        return _sqlite_file(url, base)
    if kind is not None:
        return None
    path = Path(url).expanduser()
    return path if path.is_absolute() else base / path


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
    sqlite = _rdb_kind(url) == "sqlite"
    db_file = _sqlite_file(url, base or Path.cwd()) if sqlite else None
    if sqlite:
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
