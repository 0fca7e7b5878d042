"""Checking that every choice of a space is a value the scenario format accepts."""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from ..errors import CosearchError
from ..scenario import parse_scenario
from ._limits import CHECK_ALL_CHOICES, CHECK_SPREAD
from ._names import SECTIONS
from ._values import Dimension, _del_path, _first_value, _plain, _set_path

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
    if "inventory" in cluster:  # hook: inventory spaces (cosearch.search._inventory)
        from ._inventory import inventory_template

        inventory_template(space, template)
    if "cloud" not in template and "inventory" not in cluster and (not isinstance(cluster.get("gpus"), int) or isinstance(cluster.get("gpus"), bool)):
        cluster["gpus"] = 1
    try:
        parse_scenario(template)
    except CosearchError as err:
        raise CosearchError(err.field, err.message) from None
    for d in space.dims:
        if d.path == "cluster.nodes":
            vals = d.choices if d.choices is not None else [d.low, d.high]
            bad = vals[0] if vals[0] <= 0 else next((v for v in vals if type(v) is not int), None)  # sorted
            if bad is not None:
                v = bad
                raise CosearchError(d.path, f"choice {v!r} is not allowed: must be a positive integer")
            continue
        for v in _representatives(d):
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



def _representatives(d: Dimension) -> list[Any]:
    """The choices of ``d`` checked against the schema: all of them for words and for short lists;
    for a long numeric list (sorted; null first) the null, the extremes, the first non-integer
    value and :data:`CHECK_SPREAD` evenly spaced choices (see :mod:`._limits`)."""
    if d.choices is None:
        return [d.low, d.high]
    if d.kind == "categorical" or len(d.choices) <= CHECK_ALL_CHOICES:
        return list(d.choices)
    nums = [c for c in d.choices if c is not None]
    picks = list(dict.fromkeys([nums[0], nums[-1]] + [nums[i * (len(nums) - 1) // CHECK_SPREAD] for i in range(CHECK_SPREAD + 1)]))
    frac = None if d.kind == "int" else next((c for c in nums if not float(c).is_integer()), None)
    return ([None] if d.choices[0] is None else []) + picks + ([frac] if frac is not None else [])
