"""`--storage` values the storage layer refuses (an empty value, an unknown ``scheme://``) are refused by every
command that takes the option, with one line naming ``--storage`` and the accepted forms, exit code 2 and nothing
created. `cosearch worker` (and `run --workers`) read ``ftp://x`` as the journal path ``./ftp:/x`` (creating that
directory) and ``""`` as the default journal: their ``_storage_value`` did not go through the check
``resolve_storage`` makes."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from cosearch.cli import main
from cosearch.cli.worker import _storage_value
from cosearch.scaleout import storage_kind
from cosearch.storages import DEFAULT_JOURNAL, storage_file
from cosearch.storages._storage import check_storage
from test_search_cli import SPACE

BAD = ["ftp://x", "ftp://bob:s3cret@host/x", "file:///tmp/x.journal", "", "   "]

#: Every command with a --storage option, as argv after the space file is known (``{space}``).
COMMANDS = {
    "worker": ["worker", "{space}", "--study", "s", "--trials", "3"],
    "run": ["run", "{space}", "--study", "s", "--sampler", "tpe", "--trials", "3"],
    "run --workers": ["run", "{space}", "--study", "s", "--sampler", "tpe", "--trials", "3", "--workers", "2"],
    "run --dask": ["run", "{space}", "--study", "s", "--sampler", "exhaustive", "--dask", "local:1"],
    "best": ["best", "--study", "s"],
    "pareto": ["pareto", "--study", "s", "--csv", "front.csv"],
    "studies": ["studies"],
    "report": ["report", "--study", "s", "--out", "r.html"],
    "export": ["export", "--study", "s", "--format", "megatron"],
}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "space.yaml").write_text(yaml.safe_dump(SPACE))
    return tmp_path


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_refuses_a_bad_storage_value_and_creates_nothing(workdir, capsys, command, value):
    argv = [a.format(space=str(workdir / "space.yaml")) for a in COMMANDS[command]] + ["--storage", value]
    before = _tree(workdir)
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --storage: "), err
    for form in ("journal file path", "sqlite:///", "postgresql://", "mysql://"):
        assert form in lines[0]
    assert ("empty value" in lines[0]) if not value.strip() else ("unsupported scheme" in lines[0])
    assert "s3cret" not in err
    assert _tree(workdir) == before  # no ./ftp:/x directory, no default journal, no lock file


@pytest.mark.parametrize("value", BAD)
def test_storage_helpers_share_one_check(value):
    """storage_file, storage_kind and the worker's _storage_value refuse what resolve_storage refuses."""
    for f in (check_storage, storage_file, storage_kind, _storage_value):
        with pytest.raises(ValueError, match=r"^--storage: "):
            f(value)


@pytest.mark.parametrize("value", [None, "runs/a.journal", " runs/a.journal ", "~/a.journal", "/abs/a.journal",
                                   "sqlite_runs.journal", "mysql_runs.journal", "postgresql-x.journal"])
def test_worker_storage_value_is_the_journal_file_storage_file_names(workdir, value):
    """_storage_value (what `run --workers` hands its workers) names the journal storage_file names, made absolute;
    a journal whose name starts like a database kind is a journal (storage_kind once agreed only for 'sqlite_...')."""
    got = _storage_value(value)
    assert storage_kind(value) == "journal"
    assert got == str(storage_file(value)) and Path(got).is_absolute()
    if value is None:
        assert got == str(workdir / DEFAULT_JOURNAL)
    elif value.strip().startswith("~"):
        assert got == os.path.expanduser(value.strip())
    elif not value.strip().startswith("/"):
        assert got == str(workdir / value.strip())


@pytest.mark.parametrize("value, kind", [("sqlite:///x.db", "sqlite"), ("postgresql://u@h/db", "postgresql"),
                                         ("postgresql+psycopg2://u@h/db", "postgresql"), ("mysql://u@h/db", "mysql")])
def test_database_urls_pass_unchanged(value, kind):
    assert storage_kind(value) == kind
    assert _storage_value(value) == value and _storage_value(f"  {value} ") == value


#: Journal file names that begin with a database kind but have no ``kind:`` / ``kind+driver:`` prefix.
DB_LIKE_JOURNALS = ["mysql_runs.journal", "postgresql-x.journal", "sqlite_runs.journal", "mysql",
                    "postgresql.journal", "runs/mysql_a.journal"]


@pytest.mark.parametrize("name", DB_LIKE_JOURNALS)
def test_a_journal_named_like_a_database_kind_is_a_journal(tmp_path, name):
    """`mysql_runs.journal` and `postgresql-x.journal` were taken for database URLs (a bare prefix matched) and
    failed with "cannot open ...: Could not parse SQLAlchemy URL"; only ``kind:`` or ``kind+driver:`` is a URL."""
    from optuna.storages import JournalStorage

    from cosearch.storages import resolve_storage

    assert check_storage(name) == name
    assert storage_kind(name) == "journal"
    assert storage_file(name, tmp_path) == tmp_path / name
    got = resolve_storage(name, workdir=tmp_path)
    assert isinstance(got, JournalStorage) and (tmp_path / name).is_file()


@pytest.mark.parametrize("value, kind, file", [
    ("postgresql+psycopg2://u:pw@h/db", "postgresql", None), ("postgresql+psycopg://u@h:5432/db", "postgresql", None),
    ("mysql+pymysql://u@h/db", "mysql", None), ("mysql+mysqldb://u@h/db", "mysql", None),
    ("sqlite:///x.db", "sqlite", "x.db"), ("sqlite+pysqlite:///x.db", "sqlite", "x.db"),
    ("sqlite:///:memory:", "sqlite", None)])
def test_database_urls_with_a_driver_are_recognised(tmp_path, value, kind, file):
    """storage_kind / storage_file / check_storage share one recogniser: ``kind[+driver]:`` (nothing connects)."""
    assert check_storage(f" {value} ") == value
    assert storage_kind(value) == kind
    assert storage_file(value, tmp_path) == (None if file is None else tmp_path / file)


@pytest.mark.parametrize("value", ["postgresx://u@h/db", "postgre://u@h/db", "mysqlx://u@h/db", "sqlitex:///x.db"])
def test_near_miss_database_schemes_are_refused(value):
    """A ``scheme://`` that only starts like a database kind is refused like any other unknown scheme."""
    for f in (check_storage, storage_file, storage_kind):
        with pytest.raises(ValueError, match=r"^--storage: unsupported scheme"):
            f(value)


@pytest.mark.parametrize("value, want", [
    ("postgres://u:pw@h/db", "postgresql://u:pw@h/db"),
    ("postgres+psycopg2://u@h:5432/db", "postgresql+psycopg2://u@h:5432/db"),
    (" postgres+psycopg://u@h/db?sslmode=require ", "postgresql+psycopg://u@h/db?sslmode=require")])
def test_a_postgres_url_is_read_as_postgresql(value, want, caplog):
    """Heroku-style ``postgres://`` (a dialect name SQLAlchemy refuses since 1.4) was refused as an unsupported scheme;
    the one recogniser now reads it as ``postgresql://`` (keeping a ``+driver``), with a log line that shows no
    password, once per value."""
    import logging

    from cosearch.storages import normalize_url
    from cosearch.storages._storage import _TOLD

    _TOLD.clear()
    with caplog.at_level(logging.INFO, logger="cosearch.storages._storage"):
        assert check_storage(value) == want
        assert check_storage(value) == want
        assert _storage_value(value) == want  # what `run --workers` hands its workers
        assert storage_kind(value) == "postgresql"
        assert storage_file(value) is None
    said = [r.getMessage() for r in caplog.records if "read as" in r.getMessage()]
    assert len(said) == 1 and want.strip().replace(":pw@", ":***@") in said[0] and "pw@" not in said[0], said
    assert normalize_url(value.strip()) == normalize_url(want)  # the driver resolve_storage picks


@pytest.mark.parametrize("value", ["postgres://bob:s3cret@127.0.0.1:1/db?connect_timeout=2",
                                   "postgres+psycopg2://bob:s3cret@127.0.0.1:1/db?connect_timeout=2"])
@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_command_takes_a_postgres_url(workdir, capsys, command, value):
    """Every command with --storage goes on to open ``postgres://`` as ``postgresql://`` (nothing listens on port 1:
    the one-line error is the connection's, naming the normalised URL, not 'unsupported scheme'); nothing created."""
    argv = [a.format(space=str(workdir / "space.yaml")) for a in COMMANDS[command]] + ["--storage", value]
    before = _tree(workdir)
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --storage: cannot open 'postgresql"), err
    assert "unsupported scheme" not in err and "s3cret" not in err
    assert _tree(workdir) == before
