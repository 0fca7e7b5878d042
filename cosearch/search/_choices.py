"""Checking that every choice of a space is a value the scenario format accepts."""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from ..errors import CosearchError
from ..scenario import parse_scenario
from ._names import SECTIONS
from ._values import _del_path, _first_value, _plain, _set_path

if TYPE_CHECKING:
    from .space import SearchSpace


def _check_choices(space: SearchSpace) -> None:
    """Every choice of every dimension must pass the scenario schema (types, names, ranges)."""
    template = copy.deepcopy({k: v for k, v in space.base.items() if k in SECTIONS})
    for d in space.dims:
        v = _first_value(d)
        if v is None:
            _del_path(template, d.path)
        else:
            _set_path(template, d.path, _plain(v))
    cluster = template.setdefault("cluster", {})
    if not isinstance(cluster, dict):
        raise CosearchError("cluster", f"expected a mapping (got {type(cluster).__name__})")
    cluster.pop("nodes", None)
    if "cloud" not in template and (not isinstance(cluster.get("gpus"), int) or isinstance(cluster.get("gpus"), bool)):
        cluster["gpus"] = 1
    try:
        parse_scenario(template)
    except CosearchError as err:
        raise CosearchError(err.field, err.message) from None
    for d in space.dims:
        if d.path == "cluster.nodes":
            for v in d.choices if d.choices is not None else [d.low, d.high]:
                if not isinstance(v, int) or v <= 0:
                    raise CosearchError(d.path, f"choice {v!r} is not allowed: must be a positive integer")
            continue
        for v in (d.choices if d.choices is not None else [d.low, d.high]):
            trial = copy.deepcopy(template)
            if d.path == "model":
                trial["model"] = v
            elif v is None:
                _del_path(trial, d.path)
            else:
                _set_path(trial, d.path, _plain(v))
            try:
                parse_scenario(trial)
            except CosearchError as err:
                raise CosearchError(d.path, f"choice {v!r} is not allowed: {err.message}") from None

