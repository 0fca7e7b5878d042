"""Model presets (public architectures) loaded from ``data/models.yaml``, each with its source."""
from __future__ import annotations

from functools import lru_cache
from typing import Any


from .errors import CosearchError
from .data import data_yaml

ARCH_FIELDS = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "gated_mlp", "vocab", "seq_len", "tied_embeddings")
#: Optional architecture fields, scenario names: mixture of experts / MLA (issue 13; ``cosearch.model.moe``),
#: multi-token prediction (``mtp_layers``) and sliding-window attention (``cosearch.model.window``). ``attention``
#: (mha | gqa | mla) becomes the 0/1 column ``mla``; the others are columns of the same name.
MOE_ARCH_FIELDS = ("experts", "top_k", "expert_ffn_hidden", "shared_experts", "shared_ffn_hidden", "dense_layers",
                   "dense_ffn_hidden", "attention", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim",
                   "qk_nope_head_dim", "v_head_dim", "head_dim", "routed_nodes_limit",
                   "mtp_layers", "sliding_window", "global_attention_every")


@lru_cache(maxsize=1)
def presets() -> dict[str, dict[str, Any]]:
    return data_yaml("models.yaml", "models")


def preset(name: str) -> dict[str, Any]:
    """Architecture fields of a preset, or a one-line error listing the known names."""
    table = presets()
    if name not in table:
        raise CosearchError("model", f"unknown preset {name!r}; allowed: {', '.join(sorted(table))}")
    return {k: table[name][k] for k in ARCH_FIELDS + MOE_ARCH_FIELDS if k in table[name]}


def moe_columns(arch: Any) -> dict[str, float]:
    """The optional model columns (:data:`MOE_ARCH_FIELDS`) of a model mapping (a preset or scenario
    fields); absent or null fields are left out (the column defaults describe a dense model with full
    attention and no multi-token prediction)."""
    out: dict[str, float] = {}
    for key in MOE_ARCH_FIELDS:
        value = arch.get(key)
        if value is None:
            continue
        if key == "attention":
            out["mla"] = 1.0 if value == "mla" else 0.0
        else:
            out[key] = float(value)
    return out
