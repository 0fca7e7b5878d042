"""The one safe reader for user files (scenario, search space, profile YAML; measured CSV), and the one
writer for paths named on the command line (:func:`write_output`).

Every problem becomes a one-line :class:`~cosearch.errors.CosearchError` naming the file, within
bounded time and memory, whatever the file holds:

* only regular files are read (``/dev/zero``, FIFOs, directories and sockets are refused before
  reading), and at most a stated number of bytes (:data:`YAML_MAX_BYTES`, :data:`CSV_MAX_BYTES`);
* the bytes must be UTF-8 text without NUL bytes (binary files are refused);
* YAML aliases (``*name``) are refused, so an alias bomb ("billion laughs") fails at once; nesting
  deeper than :data:`YAML_MAX_DEPTH` is refused instead of overflowing the stack; integers longer
  than :data:`MAX_INT_DIGITS` digits are refused instead of overflowing later.
"""
from __future__ import annotations

import io
import os
import re
import stat
import warnings
from pathlib import Path
from typing import Any, Callable, TypeVar

import yaml

from .errors import CosearchError

YAML_MAX_BYTES = 256 << 10  #: 256 KiB: the largest shipped YAML is a few KiB; libyaml reads this in ~1 s
CSV_MAX_BYTES = 64 << 20   #: 64 MiB: a measured CSV of some hundred thousand rows
YAML_MAX_DEPTH = 64        #: nesting levels of mappings/sequences
MAX_INT_DIGITS = 24        #: 10**24 exceeds every integer a scenario can hold

T = TypeVar("T")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB"


def read_text(path: str | Path, max_bytes: int) -> str:
    """The UTF-8 text of the regular file ``path`` (at most ``max_bytes`` bytes) or a CosearchError."""
    name = str(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CosearchError(name, "cannot read file (no such file)") from None
    except OSError as err:
        raise CosearchError(name, f"cannot read file ({err.strerror or err})") from None
    if stat.S_ISDIR(st.st_mode):
        raise CosearchError(name, "is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise CosearchError(name, "not a regular file (device, FIFO or socket); give a file")
    if st.st_size > max_bytes:
        raise CosearchError(name, f"file too large ({_mib(st.st_size)}; at most {_mib(max_bytes)})")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between stat and open
                raise CosearchError(name, "not a regular file (device, FIFO or socket); give a file")
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(max_bytes + 1)
        finally:
            os.close(fd)
    except OSError as err:
        raise CosearchError(name, f"cannot read file ({err.strerror or err})") from None
    if len(data) > max_bytes:
        raise CosearchError(name, f"file too large (over {_mib(max_bytes)})")
    nul = data.find(b"\0")
    if nul >= 0:
        raise CosearchError(name, f"binary file (NUL byte at offset {nul}); expected UTF-8 text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise CosearchError(name, f"not UTF-8 text (byte 0x{data[err.start]:02x} on line {line})") from None


_INT = re.compile(r"[-+]?(?:0b[01_]+|0x[0-9a-fA-F_]+|0o?[0-7_]+|[0-9][0-9_]*(?::[0-5]?[0-9])*)")
_STRINGS_AND_COMMENTS = re.compile(r"'[^']*'|\"(?:[^\"\\\\]|\\\\.)*\"|(?:^|(?<=\s))#[^\n]*", re.M)
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _flow_depth(text: str) -> int:
    """Deepest ``[``/``{`` nesting outside quotes and comments (libyaml is quadratic in it)."""
    import numpy as np

    b = np.frombuffer(_STRINGS_AND_COMMENTS.sub("", text).encode("utf-8"), dtype=np.uint8)
    step = ((b == 91) | (b == 123)).astype(np.int32) - ((b == 93) | (b == 125)).astype(np.int32)
    return int(np.cumsum(step).max(initial=0))


def _refuse(name: str, mark: Any, problem: str) -> CosearchError:
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return CosearchError(name, f"malformed YAML{where}: {problem}")


def _check_events(text: str, name: str) -> None:
    """Refuse aliases, deep nesting, huge integers and repeated mapping keys (YAML keeps the last silently: ``plan:
    {tp: 8, tp: 4}`` would run tp 4) from the event stream (no nodes built)."""
    open_: list[list[Any] | None] = []  # per open collection: a mapping's [keys seen, next node is a key], or None
    for ev in yaml.parse(text, Loader=_Loader):
        if isinstance(ev, yaml.AliasEvent):
            raise _refuse(name, ev.start_mark, "YAML aliases (*name) are not supported; write the value out")
        if isinstance(ev, (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)) and open_ and open_[-1]:
            keys, is_key = open_[-1]
            if is_key and isinstance(ev, yaml.ScalarEvent):
                if ev.value in keys:
                    raise _refuse(name, ev.start_mark, f"key {ev.value!r} given twice in one mapping")
                keys.add(ev.value)
            open_[-1][1] = not is_key
        if isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            open_.append([set(), True] if isinstance(ev, yaml.MappingStartEvent) else None)
            if len(open_) > YAML_MAX_DEPTH:
                raise _refuse(name, ev.start_mark, f"nested deeper than {YAML_MAX_DEPTH} levels")
        elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            open_.pop()
        elif isinstance(ev, yaml.ScalarEvent) and not ev.style and len(ev.value) > MAX_INT_DIGITS \
                and _INT.fullmatch(ev.value):
            raise _refuse(name, ev.start_mark, f"integer with {len(ev.value)} characters (at most {MAX_INT_DIGITS} digits)")


def parse_yaml(text: str, name: str = "YAML") -> Any:
    """Parse YAML text safely; one-line CosearchError naming ``name`` on any problem."""
    if _flow_depth(text) > YAML_MAX_DEPTH:
        raise CosearchError(name, f"malformed YAML: brackets nested deeper than {YAML_MAX_DEPTH} levels")
    try:
        _check_events(text, name)
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or (str(err).splitlines() or ["error"])[0]
        raise _refuse(name, getattr(err, "problem_mark", None), problem) from None
    except RecursionError:  # belt and braces: the depth caps should stop this first
        raise CosearchError(name, "malformed YAML: nested too deeply") from None


def read_yaml(path: str | Path) -> Any:
    """A user YAML file (scenario, search space, profile, catalog), read within the caps above."""
    return parse_yaml(read_text(path, YAML_MAX_BYTES), str(path))


def parse_csv(text: str, name: str) -> Any:
    """CSV ``text`` (read by :func:`read_text`) as a pandas DataFrame. Lines whose first non-blank character
    is ``#`` are comments (as in docs/calibration.md); a ``#`` inside a cell is kept."""
    import pandas as pd

    text = "".join(line for line in text.splitlines(keepends=True) if not line.lstrip().startswith("#"))
    try:
        with warnings.catch_warnings():
            # index_col=False with the warning as an error: a row with one field more than the header is refused (pandas
            # otherwise takes the first column as an index and shifts every column of the file by one)
            warnings.simplefilter("error", pd.errors.ParserWarning)
            return pd.read_csv(io.StringIO(text), comment=None, index_col=False)
    except pd.errors.ParserWarning:
        raise CosearchError(name, "cannot read CSV (a row has more fields than the header)") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, ValueError, OverflowError) as err:
        raise CosearchError(name, f"cannot read CSV ({(str(err).splitlines() or ['error'])[0]})") from None


def write_output(flag: str, path: str | Path, write: Callable[[str | Path], T]) -> T:
    """``write(path)`` for a path named by ``flag`` (``--out``, ``--png``, ``--csv``, ...): a path that cannot be
    written (a directory, a file where a folder belongs, a missing or read-only folder, ``/proc``) is a one-line
    ``CosearchError(flag, "cannot write PATH (why)")``, never an OSError traceback."""
    try:
        return write(path)
    except OSError as err:
        raise CosearchError(flag, f"cannot write {str(path)!r} ({err.strerror or err})") from None


def refuse_overwrite(flag: str, out: str | Path | None, inputs: dict[str, str | Path | None]) -> None:
    """Refuse an output path (``flag``) that names one of the command's inputs (label -> path; None skipped):
    ``report --out`` on the study's journal wrote HTML over it, ``calibrate --out`` over the measured CSV."""
    if out is None:
        return
    target = Path(out).expanduser()
    for label, path in inputs.items():
        if path is None:
            continue
        src = Path(path).expanduser()
        try:
            same = target.exists() and src.exists() and os.path.samefile(target, src)
        except OSError:
            same = False
        if same or target.resolve() == src.resolve():
            raise CosearchError(flag, f"{str(out)!r} is the {label}; writing it would destroy it: give another path")
