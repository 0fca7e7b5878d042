"""Data files shipped with cosearch (GPU catalog, model presets). ``COSEARCH_DATA_DIR`` points at a
folder whose files replace the shipped ones of the same name (a site's own catalog)."""
from __future__ import annotations

import os
from importlib import resources
from pathlib import Path


def data_text(name: str) -> str:
    override = os.environ.get("COSEARCH_DATA_DIR")
    if override and (Path(override) / name).is_file():
        return (Path(override) / name).read_text()
    return resources.files(__name__).joinpath(name).read_text()
