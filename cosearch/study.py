"""Optimization studies: run a search method over a space into a persistent optuna study, and
answer queries (best under a budget, Pareto front) from what the study stored.

Study contract (the HTML report and optuna-dashboard integration read these names):

* trial ``user_attrs["scenario"]`` (full scenario dict), ``user_attrs["metrics"]`` (metric ->
  float, NaN -> None), ``user_attrs["feasible"]`` (bool); values = the objectives; constraints via
  ``trial.set_constraint`` keys ``valid``, ``memory`` and one per budget;
* study ``user_attrs["cosearch"]`` = ``{"space", "objectives", "directions", "constraints",
  "method", "kind": "sampled" | "exhaustive", "summary"}``.

How a run works (:func:`run_study`): optuna samplers run ask/tell in batches on an in-memory
*mirror* study that holds the persistent study's history; each batch is written to the persistent
study as RUNNING trials (parameters and owner), evaluated in one vectorized model call, and
finished in one write. A crash between the two writes leaves RUNNING trials that the next run
marks FAIL (:func:`cosearch.storages.fail_stale_trials`); finished trials are never rewritten.
Resuming a study name continues to ``n_trials`` in total, with the sampler re-created and
re-seeded from ``(seed, trials already done)`` (optuna does not store samplers, and re-using the
first seed would replay the same points). scipy methods write every evaluated point as a
finished trial in batches; ``exhaustive`` writes only the exact front and a summary.

Layout: this module orchestrates one run (:func:`run_study`); the study's records in the storage
are in :mod:`cosearch._study_store`, the search loops in :mod:`cosearch._study_runs`, read-only
queries (``best``, ``pareto_front``, ``list_studies``, ...) in :mod:`cosearch.study_queries`, and
everything that writes or guards the storage in :mod:`cosearch.storages`. Every name is
re-exported here: ``from cosearch.study import best, load_study, ...`` keeps working.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import optuna
from optuna.storages import BaseStorage

from .errors import CosearchError
from .model.profile import DEFAULT_PROFILE, Profile
from .estimate import check_profile
from .samplers import OPTUNA_SAMPLERS, run_exhaustive
from .search.space import SearchSpace
from .storages import fail_stale_trials
from ._study_runs import (  # noqa: F401 - re-exported
    _Evaluator, _mirror_trial, _precheck, _random_rows, _run_exhaustive, _run_optuna, _run_scipy,
)
from ._study_store import (  # noqa: F401 - re-exported
    ATTR, Callback, StudyResult, _as_space, _as_storage, _derive_seed, _describe_study, _drop_if_empty, _finish,
    _open_study, _quiet_optuna, _set_summary, counts_as_trial, load_study, resume_method,
)
from .study_queries import (  # noqa: F401 - re-exported
    FRONT_COLUMNS, best, feasible_trials, list_studies, pareto_front, study_info, why_nothing,
)

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------ run
def check_seed(seed: Any) -> None:
    """A sampler seed: None (random) or an integer the samplers take, 0 to 2**32 - 1."""
    if seed is not None and (not isinstance(seed, (int, np.integer)) or isinstance(seed, bool) or not 0 <= seed < 2 ** 32):
        raise CosearchError("--seed", f"must be an integer from 0 to 2**32 - 1 (got {seed!r})")


def run_study(
    space: SearchSpace | str | Path | Mapping[str, Any],
    study_name: str,
    storage: BaseStorage | str | None = None,
    sampler: str = "auto",
    n_trials: int = 1000,
    seed: int | None = 0,
    batch_size: int | None = None,
    *,
    callback: Callback | None = None,
    timeout: float | None = None,
    profile: Profile = DEFAULT_PROFILE,
    budget: Any = None,
    exhaustive: Callable[..., Any] | None = None,
) -> StudyResult:
    """Run (or resume) study ``study_name`` with ``sampler`` until it holds ``n_trials`` trials.

    ``space``: a SearchSpace, a space dict or a YAML file path. ``sampler`` ``auto`` resumes an
    existing study with its stored method (:func:`cosearch._study_store.resume_method`).

    ``storage``: None (journal file ``./cosearch_studies.journal``), a journal file path, an
    optuna RDB URL, or an optuna storage object. ``callback(event)`` is called after each batch
    with ``{"done", "total", "new", "feasible", "elapsed_s"}`` (progress display belongs to the
    caller). ``timeout`` (seconds) stops between batches. Ctrl-C finishes the batch in flight,
    saves it and re-raises ``KeyboardInterrupt``. ``budget`` (optuna samplers only): an object
    with ``done()``, ``slots(k)`` (context manager yielding how many trials may be created now),
    ``track(ids)`` and ``wait()``, e.g. :class:`cosearch.scaleout.TrialBudget`, to share one
    trial target between several worker processes; or a callable that makes one from the study
    once this call has opened it (:class:`cosearch.scaleout.SharedBudget`), so that the study is
    opened and checked once. Closing the budget is the caller's. ``exhaustive``: a replacement for
    :func:`cosearch.samplers.run_exhaustive` with the same signature and result (e.g. the dask
    sweep of :mod:`cosearch.distributed`).
    """
    check_seed(seed)
    space = _as_space(space)
    space.require_knobs("search")
    profile = check_profile(profile)
    st = _as_storage(storage)
    method = resume_method(sampler, space, study_name, st)
    if not isinstance(n_trials, (int, np.integer)) or isinstance(n_trials, bool) or n_trials < 1:
        if method != "exhaustive":
            raise CosearchError("--trials", f"must be a positive integer (got {n_trials!r})")
    if method == "exhaustive":  # refuse before a study is created
        space._require_finite("exhaustive search")
    kind = "exhaustive" if method == "exhaustive" else "sampled"
    study, created = _open_study(space, study_name, st, method, kind, profile)
    try:
        if method in OPTUNA_SAMPLERS and callable(budget):  # the budget of the study just opened
            budget = budget(study)
        failed = fail_stale_trials(study)
        if failed:
            logger.warning("study %r: %d trial(s) left RUNNING by a dead worker marked FAIL", study_name, failed)
        if method == "exhaustive":
            return _run_exhaustive(space, study, callback, profile, exhaustive or run_exhaustive)
        if method in OPTUNA_SAMPLERS:
            return _run_optuna(space, study, method, int(n_trials), seed, batch_size, callback, timeout, profile, budget)
        return _run_scipy(space, study, method, int(n_trials), seed, callback, timeout, profile)
    except BaseException:
        if created:
            _drop_if_empty(study)
        raise
