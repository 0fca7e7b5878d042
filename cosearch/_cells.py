"""Cells of the published-runs CSVs (experiments/data/validation): numbers, yes/no, recompute modes,
and the FSDP implementation a row names.

One reader for the dense (:mod:`cosearch.validation`) and mixture-of-experts
(:mod:`cosearch.validation_moe`) rows.
"""
from __future__ import annotations

import math
from typing import Any


def _num(x: Any) -> float | None:
    """A CSV cell as a float, or None when empty."""
    if x is None or (isinstance(x, str) and not x.strip()):
        return None
    v = float(x)
    return None if math.isnan(v) else v


def _stated(text: Any) -> bool | None:
    """A yes/no cell (``yes (yaml)``, ``no``, 1, 0) as a bool; None when the source does not say."""
    if isinstance(text, str):
        t = text.strip().lower()
        if t.startswith(("yes", "true", "on")):
            return True
        if t.startswith(("no", "false", "off")):
            return False
        return None
    v = _num(text)
    return None if v is None else bool(v)


def _recompute(text: Any, source: str) -> str:
    """A recompute cell as none | selective | full; unstated: full for the Megatron-LM 2019-2021 example
    scripts (sources S4, S5), which checkpoint every layer, else none."""
    if isinstance(text, str):
        t = text.lower()
        if t.startswith("full"):
            return "full"
        if "selective" in t:
            return "selective"
        if t.startswith("none"):
            return "none"
    return "full" if source in {"S4", "S5"} else "none"


def prefetching_fsdp(sharding: str, framework: str) -> bool:
    """Whether a row's ZeRO-3 implementation prefetches: Megatron-FSDP (Megatron-Core docs: parameter
    all-gathers and gradient reduce-scatters overlapped with compute, double-buffered) and PyTorch
    FSDP2 (``fully_shard``: implicit forward/backward prefetch of the next module's all-gather; the
    FSDP of torchtitan) take ``plan.fsdp_overlap`` 1; DeepSpeed ZeRO-3 (2021) and FSDP1 (llm-foundry,
    2023) keep the profile's overlap, which was fitted on them. A fact of the stack, not of the row."""
    return "megatron-fsdp" in sharding or "fsdp2" in sharding or "torchtitan" in framework
