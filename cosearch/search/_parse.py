"""Parsing a space: choices and ranges into dimensions, objectives, constraints, sections."""
from __future__ import annotations

import copy
import math
import re
from typing import Any, Iterator, Mapping

import numpy as np

from .. import hf
from ..errors import CosearchError
from ..presets import preset
from ..scenario import HARDWARE_OVERRIDES
from ._limits import MAX_TOTAL_CHOICES, _short, check_count, check_number, is_number
from ._cloud import _check_cloud_space, _expand_cloud
from ._names import (NULLABLE_PLAN, _BAND, _CLOUD_ONLY, _DEEPPOOL, CONSTRAINT_METRICS, METRIC_NEEDS, OBJECTIVE_METRICS,
                     PRICED_METRICS, SECTIONS)
from ._values import Dimension, _all_numeric, _jsonable, _set_path


def _check_priced(base: Mapping[str, Any], metrics: list[str]) -> None:
    """A one-line error when an objective or budget needs a price and no GPU of the space has one
    (every catalog GPU listed, or every inventory type, without a price and no cluster override): the
    metric would have no value at any point, and a cost objective or budget could never be met.
    Unknown GPU ids are left to the scenario's own error."""
    from ..hardware import catalog

    cluster = base.get("cluster")
    if not metrics or not isinstance(cluster, Mapping):
        return
    override = cluster.get("price_usd_per_gpu_hour")
    if override is not None and not (isinstance(override, list) and all(v is None for v in override)):
        return
    inventory = cluster.get("inventory")
    gpus = list(inventory) if isinstance(inventory, Mapping) else cluster.get("gpu")
    gpus = gpus if isinstance(gpus, list) else [gpus]
    cat = catalog()
    if not gpus or not all(isinstance(g, str) and g in cat and math.isnan(float(cat[g]["price_usd_per_gpu_hour"]))
                           for g in gpus):
        return
    raise CosearchError("cluster.price_usd_per_gpu_hour", f"needed by {metrics[0]}: no GPU of this space has a catalog "
                        f"price ({', '.join(gpus)}), so {metrics[0]} has no value at any point; set a price or drop it")


def _dimension(path: str, spec: Any) -> Dimension:
    if isinstance(spec, list):
        if not spec:
            raise CosearchError(path, "a list of choices must not be empty")
        check_count(path, len(spec), "the list of choices")
        for v in spec:
            if is_number(v):
                check_number(path, "a choice", v)
        if any(v is None for v in spec):
            if not ((path.startswith("cluster.") and path.split(".", 1)[1] in HARDWARE_OVERRIDES)
                    or path in NULLABLE_PLAN):
                raise CosearchError(path, "null (catalog value) is allowed only in cluster hardware overrides "
                                    f"and {', '.join(NULLABLE_PLAN)}")
            rest = [v for v in spec if v is not None]
            if not rest or not _all_numeric(rest) or isinstance(rest[0], bool):
                raise CosearchError(path, "null may only stand beside numbers")
            kind = "int" if all(float(v).is_integer() for v in rest) else "float"
            return Dimension(path, kind, choices=[None] + sorted(set(rest)))
        if _all_numeric(spec) and not isinstance(spec[0], bool):
            kind = "int" if all(float(v).is_integer() for v in spec) else "float"
            return Dimension(path, kind, choices=sorted(set(spec)))
        if not all(isinstance(v, (str, bool)) for v in spec):
            raise CosearchError(path, f"choices must be all numbers, all words or all booleans (got {_short(spec)})")
        return Dimension(path, "categorical", choices=list(dict.fromkeys(spec)))
    allowed = {"min", "max", "step", "log"}
    extra = set(spec) - allowed
    if extra:
        raise CosearchError(path, f"unknown range key {sorted(extra)[0]!r}; allowed: min, max, step, log")
    if "min" not in spec or "max" not in spec:
        raise CosearchError(path, "a range needs min and max")
    lo, hi, step, log = spec["min"], spec["max"], spec.get("step"), spec.get("log", False)
    check_number(path, "min", lo)
    check_number(path, "max", hi)
    if lo > hi:
        raise CosearchError(path, f"range needs min <= max (got min={lo!r}, max={hi!r})")
    if step is not None:
        check_number(path, "step", step)
        if step <= 0:
            raise CosearchError(path, f"step must be a positive number (got {step!r})")
    if not isinstance(log, bool):
        raise CosearchError(path, f"log must be true or false (got {_short(log)})")
    if log and (lo <= 0 or step is not None):
        raise CosearchError(path, "a log range needs min > 0 and no step")
    is_int = all(isinstance(x, int) for x in (lo, hi)) and (step is None or isinstance(step, int))
    if is_int:
        st = step or 1
        check_count(path, (hi - lo) // st + 1)
        choices = list(range(int(lo), int(hi) + 1, int(st)))
        return Dimension(path, "int", choices=choices, low=lo, high=hi, step=st, log=log)
    if step:  # count first: numpy would allocate whatever the bounds ask for
        n = (float(hi) - float(lo)) / step + 0.5
        check_count(path, math.ceil(n) if math.isfinite(n) else n)
    choices = list(np.round(np.arange(lo, hi + step / 2, step), 12)) if step else None
    return Dimension(path, "float", choices=[float(c) for c in choices] if choices else None, low=float(lo), high=float(hi), step=step, log=log)


def _walk(d: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for k, v in d.items():
        path = f"{prefix}.{k}" if prefix else k
        if isinstance(v, Mapping) and not (set(v) & {"min", "max"}):
            yield from _walk(v, path)
        else:
            yield path, v


_FLOAT_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


def _numbers(x: Any) -> Any:
    """YAML 1.1 reads ``3.0e11`` (no exponent sign) as a string: make such strings floats."""
    if isinstance(x, Mapping):
        return {k: _numbers(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_numbers(v) for v in x]
    if isinstance(x, str) and _FLOAT_RE.match(x.strip()):
        return float(x)
    return x


def space_fields(data: Any, source: str = "") -> dict[str, Any]:
    """Validate a space dict's form and return the fields of its :class:`~.space.SearchSpace`
    (:func:`cosearch.search.space.parse_space` builds it and checks every choice)."""
    if not isinstance(data, Mapping):
        raise CosearchError("space", "expected a mapping with model, training, cluster, plan, objectives")
    data = _numbers(hf.expand(data))  # model: {hf_config: ...} -> model fields (cosearch.hf)
    unknown = sorted(set(data) - set(SECTIONS) - {"objectives", "constraints", "name", "description"})
    if unknown:
        raise CosearchError(unknown[0], "unknown key; allowed: model, training, cluster, plan, cloud, objectives, constraints, name, description")
    objectives = data.get("objectives")
    if objectives is None:
        objectives = ["step_time_s"]
    if objectives == []:
        raise CosearchError("objectives", f"empty list: name one or more of {', '.join(OBJECTIVE_METRICS)} "
                            "(or leave the key out for step_time_s)")
    if isinstance(objectives, str):
        objectives = [objectives]
    if not isinstance(objectives, list):
        raise CosearchError("objectives", f"expected a list of metric names (got {objectives!r})")
    for m in objectives:
        if m not in OBJECTIVE_METRICS:
            raise CosearchError("objectives", f"unknown metric {m!r}; allowed: {', '.join(OBJECTIVE_METRICS)}")
    if len(set(objectives)) != len(objectives):
        raise CosearchError("objectives", "each metric may appear only once")
    constraints = data.get("constraints") or {}
    if not isinstance(constraints, Mapping):
        raise CosearchError("constraints", f"expected a mapping like {{max_cost_usd: 2.0e6}} (got {constraints!r})")
    constraints = dict(constraints)
    for k, v in constraints.items():
        if k not in CONSTRAINT_METRICS:
            raise CosearchError(f"constraints.{k}", f"unknown constraint; allowed: {', '.join(CONSTRAINT_METRICS)}")
        if is_number(v):
            check_number(f"constraints.{k}", "a budget", v)
        if not is_number(v) or v <= 0:
            raise CosearchError(f"constraints.{k}", f"must be a positive number (got {v!r})")
    cluster = data.get("cluster")
    if isinstance(cluster, Mapping) and "nodes" in cluster and "gpus" in cluster:
        raise CosearchError("cluster.nodes", "give cluster.nodes or cluster.gpus, not both (nodes sets gpus = nodes x "
                            "gpus_per_node)")
    raw = {k: copy.deepcopy(v) for k, v in data.items()}
    if isinstance(data.get("cloud"), Mapping):
        data = {**data, "cloud": _expand_cloud(data["cloud"])}
    dims: list[Dimension] = []
    base: dict[str, Any] = {}
    for section in SECTIONS:
        if section not in data:
            if section in ("plan", "cloud") or (section == "cluster" and "cloud" in data):
                continue
            raise CosearchError(section, "required section is missing")
        value = data[section]
        if section == "model" and (isinstance(value, (str, list))):
            if isinstance(value, list):
                d = _dimension("model", value)
                if d.kind != "categorical" or not all(isinstance(v, str) for v in d.choices):
                    raise CosearchError("model", "a list of models must name presets")
                for name in d.choices:
                    preset(name)
                dims.append(d)
            else:
                preset(value)
            base["model"] = value
            continue
        if not isinstance(value, Mapping):
            raise CosearchError(section, f"expected a mapping (got {type(value).__name__})")
        base[section] = {}
        for path, spec in _walk(value, section):
            if isinstance(spec, (list, Mapping)):
                dims.append(_dimension(path, spec))
            _set_path(base, path, spec)
    total = sum(len(d.choices) for d in dims if d.choices is not None)
    if total > MAX_TOTAL_CHOICES:
        big = max((d for d in dims if d.choices is not None), key=lambda d: len(d.choices))
        raise CosearchError(big.path, f"the space lists {total:,} choices in all, more than the limit of "
                            f"{MAX_TOTAL_CHOICES:,}; give the largest ranges ({big.path}: {len(big.choices):,}) a larger step")
    used = list(objectives) + [CONSTRAINT_METRICS[k] for k in constraints]
    for m in used:
        need, why = METRIC_NEEDS.get(m, (None, ""))
        if need and need.split(".", 1)[1] not in (base.get("training") or {}):
            raise CosearchError(need, f"needed by {why}")
    if "cloud" not in base:
        _check_priced(base, [m for m in used if m in PRICED_METRICS])
    plan = base.get("plan") if isinstance(base.get("plan"), Mapping) else {}
    if any(m in _DEEPPOOL for m in used) and "burst" not in plan and "multiplex" not in plan:
        raise CosearchError("plan.multiplex", f"needed by {next(m for m in used if m in _DEEPPOOL)}: set plan.multiplex "
                            "and/or plan.burst (true, false or both) in the space (docs/deeppool.md)")
    if any(m in _BAND for m in used):
        from ..model.interval import INTERVAL_FILE, interval_factors

        if not math.isfinite(interval_factors()[1]):
            raise CosearchError(next(m for m in used if m in _BAND),
                                f"needs the prediction interval ({INTERVAL_FILE}, made by experiments/prediction_interval.py), "
                                "which is missing or unreadable")
    if "cloud" in base:
        _check_cloud_space(base, dims)
    elif any(m in _CLOUD_ONLY for m in used):
        raise CosearchError("cloud", "p90 objectives and budgets need a cloud section (rented instances, docs/cloud.md)")
    raw["objectives"] = list(objectives)
    raw["constraints"] = dict(constraints)
    return dict(base=base, dims=dims, objectives=list(objectives), constraints=constraints, source=source,
                raw=_jsonable(raw))

