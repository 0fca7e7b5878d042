"""Search spaces over a GPU inventory (``cluster.inventory``, issue 14): the arguments of
:func:`cosearch.model.hetero.evaluate_hetero` for assigned rows.

Knobs beside the plan's: ``cluster.inventory.<type>`` (what there is: a list of counts asks "which GPUs
to add"), ``plan.gpus_by_type.<type>`` (how many of each the plan uses; default the whole inventory:
"how to use the GPUs I have") and ``plan.hetero`` (pipeline | data).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from .. import hardware
from ..errors import CosearchError
from ..model.hetero import HETERO_CODES, common_columns
from . import _build
from ._values import _Cat, _Resolver

if TYPE_CHECKING:
    from .space import SearchSpace

_PRECISIONS = ("bf16", "fp16", "fp8")


def is_inventory(base: Mapping[str, Any]) -> bool:
    cluster = base.get("cluster")
    return isinstance(cluster, Mapping) and "inventory" in cluster


def inventory_args(space: "SearchSpace", assign: Mapping[str, Sequence[Any] | np.ndarray]) -> tuple[dict[str, Any], int]:
    """Keyword arguments of ``evaluate_hetero`` for the assigned values (fixed values from the base), and n."""
    n = len(next(iter(assign.values()))) if assign else 1
    get = _Resolver(space.base, assign, n)
    inventory = space.base["cluster"]["inventory"]
    if not isinstance(inventory, Mapping) or not inventory:
        raise CosearchError("cluster.inventory", "needs at least one GPU type with its count, e.g. {h100-sxm: 64, a100-80gb: 128}")
    names = list(inventory)
    cluster = {k: v for k, v in space.base["cluster"].items() if k != "inventory"}
    plan = {k: v for k, v in (space.base.get("plan") or {}).items() if k not in ("gpus_by_type", "hetero")}
    stand_in = dataclasses.replace(space, base={**space.base, "cluster": {**cluster, "gpu": names[0], "gpus": 1}, "plan": plan})
    common = common_columns(_build.columns(stand_in, assign)[0])
    common["dp"] = np.broadcast_to(np.asarray(get.number("plan.dp"), dtype=float), (n,)) if get.has("plan.dp") else 1.0
    prec = get.raw("training.precision", "bf16")
    pidx = prec.lookup(_PRECISIONS.index).astype(np.intp) if isinstance(prec, _Cat) else _PRECISIONS.index(prec)
    hws = []
    for name in names:
        hw = hardware.type_columns(name)
        peaks = np.array([float(hardware.gpu(name)["peak_tflops"].get(p) or np.nan) for p in _PRECISIONS])
        hw["peak_tflops"] = peaks[pidx]
        hws.append(hw)
    inv = [get.number(f"cluster.inventory.{name}") for name in names]
    use = [get.number(f"plan.gpus_by_type.{name}") if get.has(f"plan.gpus_by_type.{name}") else inv[k]
           for k, name in enumerate(names)]
    mode = get.raw("plan.hetero", "pipeline")
    mode = mode.lookup(lambda x: float(HETERO_CODES[x])) if isinstance(mode, _Cat) else float(HETERO_CODES[mode])
    return dict(common=common, hardware=hws, use=use, mode=mode, names=names, inventory=inv), n


def inventory_template(space: "SearchSpace", template: dict[str, Any]) -> None:
    """Make the schema-check template of an inventory space hold every choice: the largest count of each
    type, and no ``plan.gpus_by_type`` (each of its choices is then checked against those counts)."""
    for d in space.dims:
        if d.path.startswith("cluster.inventory.") and d.choices is not None:
            template["cluster"]["inventory"][d.path.rsplit(".", 1)[1]] = max(c for c in d.choices if c is not None)
    (template.get("plan") or {}).pop("gpus_by_type", None)
