"""Data files shipped with cosearch (GPU catalog, model presets). ``COSEARCH_DATA_DIR`` points at a
folder whose files replace the shipped ones of the same name (a site's own catalog); those are user files, read
through the safe reader (size, binary, alias and depth caps) with one-line errors naming the variable."""
from __future__ import annotations

import logging
import os
from importlib import resources
from pathlib import Path
from typing import Any

#: The environment variable naming a folder of replacement data files.
DATA_DIR_VAR = "COSEARCH_DATA_DIR"
_WARNED: set[str] = set()


def _override(name: str) -> Path | None:
    folder = os.environ.get(DATA_DIR_VAR)
    if not folder:
        return None
    if not Path(folder).is_dir():  # read at import (the shipped profile): a warning, not an error
        if folder not in _WARNED:
            _WARNED.add(folder)
            logging.getLogger(__name__).warning("%s=%r is not a directory: using the shipped data files", DATA_DIR_VAR, folder)
        return None
    path = Path(folder) / name
    return path if path.exists() else None


def _read(name: str) -> tuple[str, Path | None]:
    """The text of data file ``name`` and the ``COSEARCH_DATA_DIR`` copy it came from (read safely), or None for
    the shipped one."""
    path = _override(name)
    if path is None:
        return resources.files(__name__).joinpath(name).read_text(), None
    from .._files import YAML_MAX_BYTES, read_text

    return read_text(path, YAML_MAX_BYTES), path


def data_doc(name: str) -> Any:
    """YAML data file ``name`` parsed: a ``COSEARCH_DATA_DIR`` copy through the safe reader (size, binary, alias
    and depth caps; a one-line CosearchError naming that path), the shipped one as it is (safe loader, libyaml's
    where installed). FileNotFoundError where neither exists."""
    return _doc(name)[0]


def _doc(name: str) -> tuple[Any, str]:
    """(:func:`data_doc`, what errors name: the ``COSEARCH_DATA_DIR`` copy or the shipped file's name)."""
    text, path = _read(name)
    if path is None:
        import yaml

        from .._files import _Loader

        return yaml.load(text, Loader=_Loader), name  # noqa: S506 - a SafeLoader; the shipped files are ours
    from .._files import parse_yaml

    where = f"{DATA_DIR_VAR}: {path}"
    return parse_yaml(text, where), where


def data_yaml(name: str, key: str) -> Any:
    """The ``key`` section of YAML data file ``name`` (a mapping, read by :func:`data_doc`); a one-line error
    naming the file when the section is missing or not a mapping."""
    doc, where = _doc(name)
    section = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(section, dict):
        from ..errors import CosearchError

        raise CosearchError(where, f"expected a mapping with a {key!r} section of entries")
    return section
