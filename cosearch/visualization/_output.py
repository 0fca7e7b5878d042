"""The one writer for files and folders named on the command line (``--out``, ``--png``, ``--plot``,
``--csv``, ``--parquet``): a path that cannot be written (a directory, a file where a folder
belongs, a missing or read-only folder, ``/proc``) is a one-line error naming the flag and the
path, never an OSError traceback."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, TypeVar

from ..errors import CosearchError

T = TypeVar("T")


def write_output(flag: str, path: str | Path, write: Callable[[str | Path], T]) -> T:
    """``write(path)``, with any OSError turned into ``CosearchError(flag, "cannot write PATH (why)")``."""
    try:
        return write(path)
    except OSError as err:
        raise CosearchError(flag, f"cannot write {str(path)!r} ({err.strerror or err})") from None
