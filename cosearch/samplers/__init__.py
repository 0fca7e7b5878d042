"""Search methods by name (``--sampler``): optuna samplers, scipy heuristics, exhaustive enumeration.

* optuna (ask/tell in batches): ``tpe`` (multivariate, constant liar), ``nsga2``, ``nsga3``, ``gp``
  (needs PyTorch), ``cmaes`` (one objective), ``qmc``, ``random``, ``grid``;
* scipy: ``de`` (differential evolution, vectorized over populations), ``anneal`` (dual annealing);
* ``exhaustive``: the exact front of a finite space;
* ``auto`` (the CLI default): ``exhaustive`` for a finite space of at most
  :data:`AUTO_EXHAUSTIVE_POINTS` points, else ``nsga2`` for several objectives and ``tpe`` for one
  (the choice experiments/bench_search.py supports: docs/search.md).
"""
from __future__ import annotations

from ..errors import CosearchError
from ._codec import INDEX_SUFFIX, ParamCodec
from ._exhaustive import ExhaustiveResult, best_point, front_metrics, run_exhaustive
from ._optuna import OPTUNA_SAMPLERS, OptunaMethod, optuna_method
from ._scipy import SCIPY_METHODS, BudgetExhausted, run_scipy

METHODS = OPTUNA_SAMPLERS + SCIPY_METHODS + ("exhaustive",)
#: Largest finite space ``auto`` enumerates (about 5-10 s on one core at 1-2 M points/s).
AUTO_EXHAUSTIVE_POINTS = 10_000_000


def check_method(name: str) -> str:
    """The canonical method name (``auto`` included), or a one-line error listing the allowed ones."""
    key = str(name).strip().lower()
    if key not in METHODS + ("auto",):
        raise CosearchError("--sampler", f"unknown sampler {name!r}; allowed: auto, {', '.join(METHODS)}")
    return key


def resolve_method(name: str, space) -> str:
    """The concrete method for ``name`` on ``space``: ``auto`` becomes exhaustive (finite, at most
    :data:`AUTO_EXHAUSTIVE_POINTS` points), nsga2 (several objectives) or tpe (one)."""
    key = check_method(name)
    if key != "auto":
        return key
    if space.is_finite() and space.size <= AUTO_EXHAUSTIVE_POINTS:
        return "exhaustive"
    return "nsga2" if len(space.objectives) > 1 else "tpe"


__all__ = [
    "METHODS", "OPTUNA_SAMPLERS", "SCIPY_METHODS", "INDEX_SUFFIX", "BudgetExhausted", "ExhaustiveResult", "OptunaMethod",
    "ParamCodec", "best_point", "check_method", "resolve_method", "AUTO_EXHAUSTIVE_POINTS", "front_metrics", "optuna_method", "run_exhaustive", "run_scipy",
]
