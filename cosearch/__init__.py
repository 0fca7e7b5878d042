"""cosearch: find the fastest, cheapest way to train a large transformer, and the cluster to do it on.

Public API (small, re-exported here): :func:`estimate` for one scenario, :func:`evaluate` for
millions of configurations as numpy arrays, :class:`Scenario` and :func:`load_scenario` for the
file format, :class:`Profile` for the model's efficiency constants.
"""
from .errors import CosearchError
from .estimate import estimate
from .model import Profile, evaluate
from .scenario import Scenario, load_scenario, scenario_columns

__version__ = "0.1.0"
__all__ = ["CosearchError", "estimate", "evaluate", "Profile", "Scenario", "load_scenario", "scenario_columns", "__version__"]
