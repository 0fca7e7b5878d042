"""Rows of a search space <-> optuna parameters and distributions.

A row holds, per dimension, the choice index (finite dimension) or the value (continuous range).
Every method stores its trials with the same parameters, so any study opens in optuna's own tools
and a resumed run can rebuild its sampler's history from the stored trials:

* words and booleans (GPU ids, presets, recompute, sequence_parallel): ``CategoricalDistribution``
  named by the path, the value itself;
* integer choices forming an arithmetic progression (``{min: 1, max: 64}``, ``[128, 256, 384]``):
  ``IntDistribution(low, high, step)`` (``log=True`` for a log range), the value itself;
* any other finite list (``tp: [1, 2, 4, 8]``, float steps, lists with ``null``): the ordinal
  position, ``IntDistribution(0, n-1)`` named ``<path>:index``, so samplers keep the order
  (CMA-ES, QMC, GP and NSGA-II's crossover treat it as a number);
* continuous ranges: ``FloatDistribution(low, high, log)``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution

from ..search.space import Dimension, SearchSpace

INDEX_SUFFIX = ":index"


@dataclass
class _Param:
    name: str
    kind: str  # "cat" | "arith" | "index" | "float"
    dist: BaseDistribution
    dim: Dimension
    lookup: dict[Any, int] | None = None

    def param(self, x: float) -> Any:
        d = self.dim
        if self.kind == "cat":
            return d.choices[int(x)]
        if self.kind == "arith":
            return d.choices[int(x)]
        if self.kind == "index":
            return int(x)
        return float(x)

    def position(self, p: Any) -> float:
        if self.kind == "cat":
            return float(self.lookup[p])
        if self.kind == "arith":
            dist = self.dist
            return float((int(p) - dist.low) // (dist.step if not dist.log else 1))
        if self.kind == "index":
            return float(p)
        return float(p)


def _arithmetic(choices: Sequence[Any]) -> int | None:
    """Common step of an integer arithmetic progression of >= 2 values, else None."""
    if len(choices) < 2 or any(c is None or isinstance(c, bool) or not float(c).is_integer() for c in choices):
        return None
    diffs = {int(b) - int(a) for a, b in zip(choices, choices[1:])}
    return diffs.pop() if len(diffs) == 1 else None


class ParamCodec:
    """The optuna parameters of a :class:`SearchSpace`."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.params: list[_Param] = []
        for d in space.dims:
            if d.choices is None:
                dist: BaseDistribution = FloatDistribution(d.low, d.high, log=d.log) if d.kind == "float" else IntDistribution(int(d.low), int(d.high), log=d.log)
                self.params.append(_Param(d.path, "float", dist, d))
            elif d.kind == "categorical":
                self.params.append(_Param(d.path, "cat", CategoricalDistribution(list(d.choices)), d,
                                          {c: i for i, c in enumerate(d.choices)}))
            else:
                step = _arithmetic(d.choices)
                if step is not None and d.log and step == 1:
                    self.params.append(_Param(d.path, "arith", IntDistribution(int(d.choices[0]), int(d.choices[-1]), log=True), d))
                elif step is not None:
                    self.params.append(_Param(d.path, "arith", IntDistribution(int(d.choices[0]), int(d.choices[-1]), step=step), d))
                else:
                    self.params.append(_Param(d.path + INDEX_SUFFIX, "index", IntDistribution(0, len(d.choices) - 1), d))
        self.distributions = {p.name: p.dist for p in self.params}
        self.names = [p.name for p in self.params]

    def suggest(self, trial: Any) -> np.ndarray:
        """Ask ``trial`` (an optuna Trial) for every parameter; return the row."""
        row = np.empty(len(self.params))
        for j, p in enumerate(self.params):
            dist = p.dist
            if isinstance(dist, CategoricalDistribution):
                v = trial.suggest_categorical(p.name, dist.choices)
            elif isinstance(dist, IntDistribution):
                v = trial.suggest_int(p.name, dist.low, dist.high, step=dist.step, log=dist.log)
            else:
                v = trial.suggest_float(p.name, dist.low, dist.high, step=dist.step, log=dist.log)
            row[j] = p.position(v)
        return row

    def to_params(self, row: Sequence[float]) -> dict[str, Any]:
        return {p.name: p.param(x) for p, x in zip(self.params, row)}

    def to_internal(self, row: Sequence[float]) -> dict[str, float]:
        """Parameters in optuna's internal (float) representation, as storages write them."""
        return {p.name: p.dist.to_internal_repr(p.param(x)) for p, x in zip(self.params, row)}

    def to_row(self, params: Mapping[str, Any]) -> np.ndarray | None:
        """Row of stored parameters, or None when they do not belong to this space."""
        try:
            return np.array([p.position(params[p.name]) for p in self.params], dtype=float)
        except (KeyError, TypeError, ValueError):
            return None

    def grid(self) -> dict[str, list[Any]]:
        """Every parameter's values, for optuna's GridSampler (finite spaces only)."""
        out: dict[str, list[Any]] = {}
        for p in self.params:
            if p.kind == "float":
                raise ValueError(p.name)
            n = len(p.dim.choices)
            out[p.name] = [p.param(i) for i in range(n)]
        return out
