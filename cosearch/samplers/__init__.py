"""Search methods by name (``--sampler``): optuna samplers, scipy heuristics, exhaustive enumeration.

* optuna (ask/tell in batches): ``tpe`` (multivariate, constant liar), ``nsga2``, ``nsga3``, ``gp``
  (needs PyTorch), ``cmaes`` (one objective), ``qmc``, ``random``, ``grid``;
* scipy: ``de`` (differential evolution, vectorized over populations), ``anneal`` (dual annealing);
* ``exhaustive``: the exact front of a finite space.
"""
from __future__ import annotations

from ..errors import CosearchError
from ._codec import INDEX_SUFFIX, ParamCodec
from ._exhaustive import ExhaustiveResult, front_metrics, run_exhaustive
from ._optuna import OPTUNA_SAMPLERS, OptunaMethod, optuna_method
from ._scipy import SCIPY_METHODS, BudgetExhausted, run_scipy

METHODS = OPTUNA_SAMPLERS + SCIPY_METHODS + ("exhaustive",)


def check_method(name: str) -> str:
    """The canonical method name, or a one-line error listing the allowed ones."""
    key = str(name).strip().lower()
    if key not in METHODS:
        raise CosearchError("--sampler", f"unknown sampler {name!r}; allowed: {', '.join(METHODS)}")
    return key


__all__ = [
    "METHODS", "OPTUNA_SAMPLERS", "SCIPY_METHODS", "INDEX_SUFFIX", "BudgetExhausted", "ExhaustiveResult", "OptunaMethod",
    "ParamCodec", "check_method", "front_metrics", "optuna_method", "run_exhaustive", "run_scipy",
]
