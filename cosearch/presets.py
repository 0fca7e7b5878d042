"""Model presets (public architectures) loaded from ``data/models.yaml``, each with its source."""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import yaml

from .errors import CosearchError
from .data import data_text

ARCH_FIELDS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "gated_mlp", "vocab", "seq_len", "tied_embeddings")


@lru_cache(maxsize=1)
def presets() -> dict[str, dict[str, Any]]:
    text = data_text("models.yaml")
    return yaml.safe_load(text)["models"]


def preset(name: str) -> dict[str, Any]:
    """Architecture fields of a preset, or a one-line error listing the known names."""
    table = presets()
    if name not in table:
        raise CosearchError("model", f"unknown preset {name!r}; allowed: {', '.join(sorted(table))}")
    return {k: table[name][k] for k in ARCH_FIELDS if k in table[name]}
