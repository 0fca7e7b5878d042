"""cosearch: find the fastest, cheapest way to train a large transformer, and the cluster to do it on.

Public API (small, re-exported here): :func:`estimate` for one scenario, :func:`evaluate` for
millions of configurations as numpy arrays, :class:`Scenario` and :func:`load_scenario` for the
file format, :class:`Profile` for the model's efficiency constants; :func:`load_space`,
:func:`run_study`, :func:`best` and :func:`pareto_front` for optimization studies, :func:`sweep`
(a finite space as a pandas DataFrame) and :func:`front` (its Pareto front) for notebooks (imported
on first use, so ``import cosearch`` does not load optuna).
"""
from .errors import CosearchError
from .estimate import estimate
from .model import Profile, evaluate
from .scenario import Scenario, load_scenario, scenario_columns

__version__ = "0.1.0"
__all__ = ["CosearchError", "estimate", "evaluate", "Profile", "Scenario", "load_scenario", "scenario_columns", "__version__",
           "load_space", "run_study", "best", "pareto_front", "sweep", "front", "Estimate"]

_LAZY = {"load_space": ".search.space", "run_study": ".study", "best": ".study", "pareto_front": ".study",
         "sweep": ".notebook", "front": ".notebook", "Estimate": ".notebook"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
