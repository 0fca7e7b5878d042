"""A cosearch study in its storage: open or create it (checked against the space), its summary,
what one run did (:class:`StudyResult`), and which trials count.

The study contract (``user_attrs["cosearch"]`` and the trial attributes) is described in
:mod:`cosearch.study`; how a trial is written is :mod:`cosearch.storages._writer`.
"""
from __future__ import annotations

import json
import logging
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from ._trials import deferred_interrupt
from .errors import CosearchError
from .model.profile import DEFAULT_PROFILE, Profile
from .samplers import check_method, resolve_method
from .search.space import SearchSpace, as_space as _as_space  # noqa: F401 - the name cosearch.study re-exports
from .storages import failed_with_result, resolve_storage
from .storages._storage import mask_url

logger = logging.getLogger(__name__)

ATTR = "cosearch"

Callback = Callable[[dict[str, Any]], None]


@dataclass
class StudyResult:
    """What one :func:`run_study` call did."""

    study: optuna.Study
    method: str
    kind: str
    n_trials: int            # trials the study holds now (evaluated by cosearch)
    n_new: int               # trials this call added
    n_feasible: int
    elapsed_s: float
    interrupted: bool = False
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def trials_per_s(self) -> float:
        return self.n_new / self.elapsed_s if self.elapsed_s > 0 else float("nan")


# ------------------------------------------------------------------------------------ helpers
def _as_storage(storage: BaseStorage | str | None, *, must_exist: bool = False) -> BaseStorage:
    if isinstance(storage, BaseStorage):
        return storage
    return resolve_storage(storage, must_exist=must_exist)


def _quiet_optuna() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def counts_as_trial(t: FrozenTrial) -> bool:
    """A trial cosearch evaluated (finished with metrics); crash-failed trials do not count, also not one whose
    metrics were written before a crash cut its state line (marked ``ABANDONED_ATTR`` when failed)."""
    return (t.state == TrialState.COMPLETE and "metrics" in t.user_attrs) or failed_with_result(t)


def is_feasible_trial(t: FrozenTrial) -> bool:
    """An evaluated trial (:func:`counts_as_trial`) whose stored point is feasible (valid, fits, within the
    space's budgets). FAIL ones count: an objective without a value (the cost on a GPU without a price)."""
    return counts_as_trial(t) and t.user_attrs.get("feasible") is True and isinstance(t.user_attrs["metrics"], Mapping)


def _derive_seed(seed: int | None, n_done: int) -> int | None:
    if seed is None:
        return None
    if n_done == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed), int(n_done)]).generate_state(1)[0])


#: Longest study name: optuna's RDB schema stores study_name as VARCHAR(512).
MAX_STUDY_NAME = 512


def _space_key(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in ("name", "description")}


def load_study(study_name: str, storage: BaseStorage | str | None = None) -> optuna.Study:
    """Open an existing study (one-line error naming the known studies when it does not exist)."""
    _quiet_optuna()
    st = _as_storage(storage, must_exist=True)
    if not _has_study(st, study_name):
        names = [s.study_name for s in st.get_all_studies()]  # only to name them in the error
        where = mask_url(storage) if isinstance(storage, str) else "the default storage (./cosearch_studies.journal)" if storage is None else "this storage"
        known = ", ".join(sorted(names)) if names else "none"
        raise CosearchError("--study", f"no study named {study_name!r} in {where}; known studies: {known}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return optuna.load_study(study_name=study_name, storage=st, sampler=optuna.samplers.RandomSampler())


def stored_method(storage: BaseStorage, name: str) -> str | None:
    """The method cosearch stored for study ``name``; None when the storage has no such study or it
    stored none. One lookup by name, as :func:`_has_study`, not a read of every study."""
    try:
        sid = storage.get_study_id_from_name(name)
    except KeyError:
        return None
    info = storage.get_study_user_attrs(sid).get(ATTR)
    return str(info["method"]) if isinstance(info, Mapping) and info.get("method") else None


def resume_method(sampler: str, space: SearchSpace, name: str, storage: BaseStorage) -> str:
    """The concrete method of a run of ``sampler`` on study ``name``: ``auto`` continues an existing
    cosearch study with the method it stored (:func:`stored_method`; picking afresh would choose exhaustive
    for a finite space even when a sampler started the study, which then refuses the run), otherwise
    :func:`~cosearch.samplers.resolve_method`'s choice for the space."""
    if check_method(sampler) == "auto":
        method = stored_method(storage, name)
        if method:
            return method
    return resolve_method(sampler, space)


def _profile_key(profile: Profile) -> dict[str, Any]:
    return json.loads(json.dumps(profile.model_dump(mode="json"), sort_keys=True))


def _has_study(storage: BaseStorage, name: str) -> bool:
    """Whether ``storage`` holds study ``name``: one lookup by name, not a read of every study."""
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return True


#: Tries :func:`_open_study` makes while another process is creating the same study, and the pause (seconds) while
#: a study without trials is found without cosearch's description (1 s in all: a creator describes its study at once).
OPEN_ATTEMPTS = 20
OPEN_RETRY_PAUSE_S = 0.05


def _open_study(space: SearchSpace, name: str, storage: BaseStorage, method: str, kind: str,
                profile: Profile = DEFAULT_PROFILE) -> tuple[optuna.Study, bool]:
    """Study ``name``, opened (checked against the space, kind and profile) or created; and whether this call
    created it (a run that fails before storing a trial removes only a study it created).

    Several processes may open a new study at once (two runs, `run --workers`, workers started anywhere): the one
    whose create loses the race opens the winner's study instead, and a study found without cosearch's description
    is looked at again for a while (its creator may be between creating and describing it) before it is refused."""
    _quiet_optuna()
    if not isinstance(name, str) or not name.strip():
        raise CosearchError("--study", "give the study a name")
    if len(name) > MAX_STUDY_NAME:
        raise CosearchError("--study", f"a name of at most {MAX_STUDY_NAME} characters (got {len(name):,})")
    for attempt in range(OPEN_ATTEMPTS):
        last = attempt == OPEN_ATTEMPTS - 1
        try:
            return _open_or_create(space, name, storage, method, kind, profile)
        except optuna.exceptions.DuplicatedStudyError:  # another process created it just now: open that one
            if last:
                raise
        except _ForeignStudy as err:
            if last or err.has_trials:  # cosearch describes a study before its first trial: that one is not ours
                raise
            time.sleep(OPEN_RETRY_PAUSE_S)
    raise AssertionError("unreachable")


class _ForeignStudy(CosearchError):
    """:func:`_open_or_create` found the study without cosearch's description (and not half-created);
    ``has_trials``: whether it holds trials."""

    has_trials = False


def _open_or_create(space: SearchSpace, name: str, storage: BaseStorage, method: str, kind: str,
                    profile: Profile) -> tuple[optuna.Study, bool]:
    """One try of :func:`_open_study`."""
    if _has_study(storage, name):
        study = optuna.load_study(study_name=name, storage=storage, sampler=optuna.samplers.RandomSampler())
        info = study.user_attrs.get(ATTR)
        if not isinstance(info, Mapping) and not study.get_trials(deepcopy=False) \
                and list(study.directions) == [optuna.study.StudyDirection.MAXIMIZE if d == "maximize"
                                               else optuna.study.StudyDirection.MINIMIZE for d in space.directions]:
            # a run killed between creating the study and describing it: finish creating it
            logger.warning("study %r was left half-created by an interrupted run: completing it", name)
            return _describe_study(study, space, method, kind, profile), False
        if not isinstance(info, Mapping):
            err = _ForeignStudy("--study", f"study {name!r} exists but was not made by cosearch; use another name")
            err.has_trials = bool(study.get_trials(deepcopy=False))
            raise err
        if _space_key(info.get("space", {})) != _space_key(space.to_dict()):
            raise CosearchError("--study", f"study {name!r} was made from a different space; use another --study name")
        if info.get("kind") != kind:
            raise CosearchError("--study", f"study {name!r} is {info.get('kind')} (--sampler {info.get('method')}); this "
                                f"{kind} run cannot resume it: use --sampler {info.get('method')} or another --study name")
        if info.get("profile", _profile_key(DEFAULT_PROFILE)) != _profile_key(profile):
            raise CosearchError("--profile", f"study {name!r} was evaluated with another efficiency profile; resume it "
                                "with the same --profile, or use another --study name")
        return study, False
    study = optuna.create_study(study_name=name, storage=storage, directions=space.directions,
                                sampler=optuna.samplers.RandomSampler())
    return _describe_study(study, space, method, kind, profile), True


def _describe_study(study: optuna.Study, space: SearchSpace, method: str, kind: str, profile: Profile) -> optuna.Study:
    study.set_user_attr(ATTR, {
        "space": space.to_dict(), "objectives": list(space.objectives), "directions": list(space.directions),
        "constraints": dict(space.constraints), "method": method, "kind": kind, "profile": _profile_key(profile),
        "summary": {"runs": [], "pruned": {k: list(v) for k, v in space.pruned.items()},
                    "valid_fraction": space.valid_fraction, "size": space.size},
    })
    return study


def _set_summary(study: optuna.Study, method: str, update: Mapping[str, Any], run: Mapping[str, Any] | None) -> dict[str, Any]:
    info = dict(study.user_attrs.get(ATTR, {}))
    summary = dict(info.get("summary") or {})
    summary.update(update)
    if run is not None:
        summary["runs"] = list(summary.get("runs") or []) + [dict(run)]
    info["summary"] = summary
    info["method"] = method
    with deferred_interrupt():
        study.set_user_attr(ATTR, info)
    return summary


def _feasible_count(trials: Sequence[FrozenTrial]) -> int:
    return sum(1 for t in trials if is_feasible_trial(t))


def _drop_if_empty(study: optuna.Study) -> None:
    """Delete a study this run created when the run failed before storing any trial."""
    try:
        if not study.get_trials(deepcopy=False):
            study._storage.delete_study(study._study_id)
    except Exception as err:  # pragma: no cover - never mask the run's own error
        logger.debug("could not remove empty study %r: %s", study.study_name, err)


def _finish(study: optuna.Study, method: str, kind: str, t0: float, n_before: int, seed: int | None, seed_used: int | None,
            interrupted: bool, extra: Mapping[str, Any] | None = None) -> StudyResult:
    trials = [t for t in study.get_trials(deepcopy=False) if counts_as_trial(t)]
    n_feas = _feasible_count(trials)
    elapsed = time.perf_counter() - t0
    n_new = len(trials) - n_before
    update = {"n_trials": len(trials), "n_feasible": n_feas,
              "n_failed": sum(1 for t in trials if t.state == TrialState.FAIL), **(extra or {})}
    run = {"method": method, "seed": seed, "seed_used": seed_used, "new_trials": n_new,
           "elapsed_s": round(elapsed, 3), "interrupted": interrupted}
    summary = _set_summary(study, method, update, run)
    return StudyResult(study=study, method=method, kind=kind, n_trials=len(trials), n_new=n_new, n_feasible=n_feas,
                       elapsed_s=elapsed, interrupted=interrupted, summary=summary)
