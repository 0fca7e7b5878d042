"""Optuna samplers by name, configured for cosearch's spaces (never optuna's defaults).

Each entry gives the sampler, the batch size that :func:`cosearch.study.run_study` asks for
before evaluating (the model evaluates a whole batch in one vectorized call), and whether the
sampler needs infeasible points penalized in its values because it ignores constraints.
"""
from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass

import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.samplers import BaseSampler

from ..errors import CosearchError
from ..search._limits import ENUMERATE_LIMIT
from ..search.space import SearchSpace
from ._codec import ParamCodec

logger = logging.getLogger(__name__)

OPTUNA_SAMPLERS = ("tpe", "nsga2", "nsga3", "gp", "cmaes", "qmc", "random", "grid")
#: Largest grid optuna's GridSampler may hold (it materializes every grid point in memory).
GRID_LIMIT = 1_000_000


@dataclass
class OptunaMethod:
    name: str
    sampler: BaseSampler
    batch_size: int
    penalize: bool  # tell the sampler penalized values for infeasible points (it ignores constraints)
    max_trials: int | None = None  # grid: the grid's size


class _Grid(optuna.samplers.GridSampler):
    """GridSampler that does not call ``study.stop()`` (which raises outside ``optimize``)."""

    def after_trial(self, study, trial, state, values) -> None:  # noqa: D401
        return None


def _check_gp() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        raise CosearchError("--sampler", "gp needs PyTorch, which is not installed (pip install torch)") from None


def optuna_method(name: str, space: SearchSpace, codec: ParamCodec, seed: int | None, batch_size: int | None = None) -> OptunaMethod:
    """A configured sampler for ``name`` (one of :data:`OPTUNA_SAMPLERS`)."""
    k = len(space.objectives)
    d = max(1, len(space.dims))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        warnings.simplefilter("ignore", FutureWarning)
        if name == "tpe":
            # multivariate: the note in experiments/data/notes/optuna-5.md measured the default
            # (independent) TPE at 0.79 of the exact hypervolume where this reaches 1.00.
            m = OptunaMethod(name, optuna.samplers.TPESampler(seed=seed, multivariate=True, group=False, constant_liar=True,
                                                              n_startup_trials=max(10, 2 * d),
                                                              warn_independent_sampling=False), 8, False)
        elif name == "nsga2":
            pop = 50
            m = OptunaMethod(name, optuna.samplers.NSGAIISampler(seed=seed, population_size=pop), pop, False)
        elif name == "nsga3":
            pop = 50
            m = OptunaMethod(name, optuna.samplers.NSGAIIISampler(seed=seed, population_size=pop), pop, False)
        elif name == "gp":
            _check_gp()
            m = OptunaMethod(name, optuna.samplers.GPSampler(seed=seed, deterministic_objective=True,
                                                             warn_independent_sampling=False), 1, False)
        elif name == "cmaes":
            if k > 1:
                raise CosearchError("--sampler", f"cmaes optimizes one objective; this space has {k} "
                                    f"({', '.join(space.objectives)}): use tpe, nsga2 or de")
            popsize = 4 + int(3 * math.log(d))
            m = OptunaMethod(name, optuna.samplers.CmaEsSampler(seed=seed, with_margin=True, popsize=popsize,
                                                                n_startup_trials=0, warn_independent_sampling=False,
                                                                independent_sampler=optuna.samplers.RandomSampler(seed=seed)),
                             popsize, True)
        elif name == "qmc":
            m = OptunaMethod(name, optuna.samplers.QMCSampler(qmc_type="sobol", scramble=True, seed=seed,
                                                              warn_asynchronous_seeding=False,
                                                              warn_independent_sampling=False,
                                                              independent_sampler=optuna.samplers.RandomSampler(seed=seed)),
                             256, False)
        elif name == "random":
            m = OptunaMethod(name, optuna.samplers.RandomSampler(seed=seed), 256, False)
        elif name == "grid":
            if not space.is_finite():
                cont = [dd.path for dd in space.dims if dd.choices is None][0]
                raise CosearchError(cont, "grid needs finite choices: give the range a step")
            if space.size > GRID_LIMIT:
                alt = "exhaustive or a sampler" if space.size <= ENUMERATE_LIMIT else "a sampler (tpe, nsga2, ...)"
                raise CosearchError("--sampler", f"grid over {space.size:.3g} points is too large for optuna's "
                                    f"GridSampler (limit {GRID_LIMIT:,}); use {alt}")
            m = OptunaMethod(name, _Grid(codec.grid(), seed=seed), 256, False, max_trials=int(space.size))
        else:
            raise CosearchError("--sampler", f"unknown optuna sampler {name!r}")
    if batch_size:
        m.batch_size = int(batch_size)
    return m
