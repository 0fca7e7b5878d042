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
"""
from __future__ import annotations

import json
import logging
import math
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import optuna
import pandas as pd
from optuna.exceptions import ExperimentalWarning
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from ._trials import (
    BATCH_ATTR, CONSTRAINTS_PREFIX, TrialRecord, TrialWriter, build_records, deferred_interrupt, penalized_values,
    record_from_trial,
)
from .errors import CosearchError
from .model.profile import DEFAULT_PROFILE, Profile
from .samplers import (
    OPTUNA_SAMPLERS, BudgetExhausted, ParamCodec, optuna_method, resolve_method,
    run_exhaustive, run_scipy,
)
from .search.pareto import pareto_mask
from .search.space import CONSTRAINT_METRICS, OBJECTIVE_METRICS, SearchSpace, direction, load_space, parse_space
from .storages import OWNER_ATTR, fail_stale_trials, resolve_storage
from .storages._storage import mask_url, owner_record

logger = logging.getLogger(__name__)

ATTR = "cosearch"
#: Trial system attributes of optuna samplers not worth persisting (GridSampler's whole grid).
_SKIP_SYSTEM_ATTRS = {"search_space"}
#: Chunk size of the feasibility pre-check on a space's points.
_PRECHECK_CHUNK = 16_384
_PRECHECK_EXACT_LIMIT = 1 << 18

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
def _as_space(space: SearchSpace | str | Path | Mapping[str, Any]) -> SearchSpace:
    if isinstance(space, SearchSpace):
        return space
    if isinstance(space, Mapping):
        return parse_space(space)
    return load_space(space)


def _as_storage(storage: BaseStorage | str | None, *, must_exist: bool = False) -> BaseStorage:
    if isinstance(storage, BaseStorage):
        return storage
    return resolve_storage(storage, must_exist=must_exist)


def _quiet_optuna() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)


def counts_as_trial(t: FrozenTrial) -> bool:
    """A trial cosearch evaluated (finished with metrics); crash-failed trials do not count."""
    return t.state in (TrialState.COMPLETE, TrialState.FAIL) and "metrics" in t.user_attrs


def _derive_seed(seed: int | None, n_done: int) -> int | None:
    if seed is None:
        return None
    if n_done == 0:
        return int(seed)
    return int(np.random.SeedSequence([int(seed), int(n_done)]).generate_state(1)[0])


def _space_key(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in ("name", "description")}


def load_study(study_name: str, storage: BaseStorage | str | None = None) -> optuna.Study:
    """Open an existing study (one-line error naming the known studies when it does not exist)."""
    _quiet_optuna()
    st = _as_storage(storage, must_exist=True)
    names = [s.study_name for s in st.get_all_studies()]
    if study_name not in names:
        where = mask_url(storage) if isinstance(storage, str) else "the default storage (./cosearch_studies.journal)" if storage is None else "this storage"
        known = ", ".join(sorted(names)) if names else "none"
        raise CosearchError("--study", f"no study named {study_name!r} in {where}; known studies: {known}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return optuna.load_study(study_name=study_name, storage=st, sampler=optuna.samplers.RandomSampler())


def _profile_key(profile: Profile) -> dict[str, Any]:
    return json.loads(json.dumps(profile.model_dump(mode="json"), sort_keys=True))


def _open_study(space: SearchSpace, name: str, storage: BaseStorage, method: str, kind: str,
                profile: Profile = DEFAULT_PROFILE) -> optuna.Study:
    _quiet_optuna()
    if not isinstance(name, str) or not name.strip():
        raise CosearchError("--study", "give the study a name")
    existing = {s.study_name: s for s in storage.get_all_studies()}
    if name in existing:
        study = optuna.load_study(study_name=name, storage=storage, sampler=optuna.samplers.RandomSampler())
        info = study.user_attrs.get(ATTR)
        if not isinstance(info, Mapping) and not study.get_trials(deepcopy=False) \
                and list(study.directions) == [optuna.study.StudyDirection.MAXIMIZE if d == "maximize"
                                               else optuna.study.StudyDirection.MINIMIZE for d in space.directions]:
            # a run killed between creating the study and describing it: finish creating it
            logger.warning("study %r was left half-created by an interrupted run: completing it", name)
            return _describe_study(study, space, method, kind, profile)
        if not isinstance(info, Mapping):
            raise CosearchError("--study", f"study {name!r} exists but was not made by cosearch; use another name")
        if _space_key(info.get("space", {})) != _space_key(space.to_dict()):
            raise CosearchError("--study", f"study {name!r} was made from a different space; use another --study name")
        if info.get("kind") != kind:
            raise CosearchError("--study", f"study {name!r} is {info.get('kind')}; a {kind} run needs another --study name")
        if info.get("profile", _profile_key(DEFAULT_PROFILE)) != _profile_key(profile):
            raise CosearchError("--profile", f"study {name!r} was evaluated with another efficiency profile; resume it "
                                "with the same --profile, or use another --study name")
        return study
    study = optuna.create_study(study_name=name, storage=storage, directions=space.directions,
                                sampler=optuna.samplers.RandomSampler())
    return _describe_study(study, space, method, kind, profile)


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


def _precheck(space: SearchSpace, seed: int | None) -> None:
    """Raise when the feasible region is provably empty (finite spaces up to 2^18 points are
    enumerated; larger ones are sampled, and only a warning is logged if nothing feasible shows)."""
    if space.is_finite() and space.size <= _PRECHECK_EXACT_LIMIT:
        counts = np.zeros(4, dtype=np.int64)
        for _, assign in space.iter_chunks(_PRECHECK_CHUNK):
            m = space.evaluate(assign)
            if m["feasible"].any():
                return
            counts += [len(m["valid"]), m["valid"].sum(), (m["valid"] & m["fits"]).sum(),
                       (m["valid"] & m["fits"] & m["within_budget"]).sum()]
        raise CosearchError("space", f"empty feasible region: of {counts[0]:,} points {counts[1]:,} are valid plans, "
                            f"{counts[2]:,} of those fit in memory, {counts[3]:,} are within the budget")
    rng = np.random.default_rng(seed)
    for _ in range(4):
        rows = _random_rows(space, rng, _PRECHECK_CHUNK)
        if space.evaluate_rows(rows)["feasible"].any():
            return
    logger.warning("no feasible point among %d random points of the space: the feasible region may be empty or tiny",
                   4 * _PRECHECK_CHUNK)


def _random_rows(space: SearchSpace, rng: np.random.Generator, n: int) -> np.ndarray:
    cols = []
    for d in space.dims:
        if d.choices is not None:
            cols.append(rng.integers(0, len(d.choices), n).astype(float))
        elif d.log:
            cols.append(np.exp(rng.uniform(math.log(d.low), math.log(d.high), n)))
        else:
            cols.append(rng.uniform(d.low, d.high, n))
    return np.stack(cols, axis=1) if cols else np.zeros((n, 0))


class _Evaluator:
    """Evaluates rows into trial records, with a cache of points already seen (duplicates keep
    their constraint values, optuna #6774)."""

    def __init__(self, space: SearchSpace, profile: Profile, limit: int = 100_000) -> None:
        self.space, self.profile, self.limit = space, profile, limit
        self.cache: dict[bytes, TrialRecord] = {}
        self.hits = 0

    def records(self, rows: np.ndarray) -> list[TrialRecord]:
        rows = np.asarray(rows, dtype=float)
        keys = [r.tobytes() for r in rows]
        missing = [i for i, k in enumerate(keys) if k not in self.cache]
        first: dict[bytes, int] = {}
        todo = []
        for i in missing:
            if keys[i] not in first:
                first[keys[i]] = i
                todo.append(i)
        if todo:
            sub = rows[todo]
            recs = build_records(self.space, sub, self.space.evaluate_rows(sub, self.profile))
            if len(self.cache) + len(recs) > self.limit:
                self.cache.clear()
            for i, r in zip(todo, recs):
                self.cache[keys[i]] = r
        self.hits += len(rows) - len(todo)
        return [self.cache[k] for k in keys]

    def metrics(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        return self.space.evaluate_rows(rows, self.profile)


def _mirror_trial(t: FrozenTrial, codec: ParamCodec, penalize: bool, directions: Sequence[str]) -> FrozenTrial | None:
    """A persisted trial as history for the in-memory sampler study (None if not usable)."""
    if t.state not in (TrialState.COMPLETE, TrialState.FAIL):
        return None
    if codec.to_row(t.params) is None:
        return None
    cons = record_from_trial(t)
    sys_attrs = {k: v for k, v in t.system_attrs.items() if k not in (OWNER_ATTR, BATCH_ATTR) and not k.startswith(CONSTRAINTS_PREFIX)}
    state, values = t.state, t.values
    if penalize:
        viol = float(sum(v for v in cons.values() if v > 0))
        values = penalized_values(values if state == TrialState.COMPLETE else None, viol, directions)
        state = TrialState.COMPLETE
    if state == TrialState.COMPLETE and values is None:
        return None
    return optuna.trial.create_trial(state=state, values=values if state == TrialState.COMPLETE else None,
                                     params=dict(t.params), distributions=dict(t.distributions),
                                     system_attrs=sys_attrs, constraints=None if penalize else cons)


def _feasible_count(trials: Sequence[FrozenTrial]) -> int:
    return sum(1 for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("feasible") is True)


# ------------------------------------------------------------------------------------ run
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

    ``storage``: None (journal file ``./cosearch_studies.journal``), a journal file path, an
    optuna RDB URL, or an optuna storage object. ``callback(event)`` is called after each batch
    with ``{"done", "total", "new", "feasible", "elapsed_s"}`` (progress display belongs to the
    caller). ``timeout`` (seconds) stops between batches. Ctrl-C finishes the batch in flight,
    saves it and re-raises ``KeyboardInterrupt``. ``budget`` (optuna samplers only): an object
    with ``done()``, ``slots(k)`` (context manager yielding how many trials may be created now),
    ``track(ids)`` and ``wait()``, e.g. :class:`cosearch.scaleout.TrialBudget`, to share one
    trial target between several worker processes. ``exhaustive``: a replacement for
    :func:`cosearch.samplers.run_exhaustive` with the same signature and result (e.g. the dask
    sweep of :mod:`cosearch.distributed`).
    """
    space = _as_space(space)
    method = resolve_method(sampler, space)
    if not isinstance(n_trials, (int, np.integer)) or isinstance(n_trials, bool) or n_trials < 1:
        if method != "exhaustive":
            raise CosearchError("--trials", f"must be a positive integer (got {n_trials!r})")
    if method == "exhaustive":  # refuse before a study is created
        space._require_finite("exhaustive search")
    st = _as_storage(storage)
    kind = "exhaustive" if method == "exhaustive" else "sampled"
    existed = any(s.study_name == study_name for s in st.get_all_studies())
    study = _open_study(space, study_name, st, method, kind, profile)
    try:
        failed = fail_stale_trials(study)
        if failed:
            logger.warning("study %r: %d trial(s) left RUNNING by a dead worker marked FAIL", study_name, failed)
        if method == "exhaustive":
            return _run_exhaustive(space, study, callback, profile, exhaustive or run_exhaustive)
        if method in OPTUNA_SAMPLERS:
            return _run_optuna(space, study, method, int(n_trials), seed, batch_size, callback, timeout, profile, budget)
        return _run_scipy(space, study, method, int(n_trials), seed, callback, timeout, profile)
    except BaseException:
        if not existed:
            _drop_if_empty(study)
        raise


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


def _run_optuna(space: SearchSpace, study: optuna.Study, method: str, n_trials: int, seed: int | None,
                batch_size: int | None, callback: Callback | None, timeout: float | None, profile: Profile,
                budget: Any = None) -> StudyResult:
    t0 = time.perf_counter()
    codec = ParamCodec(space)
    persisted = study.get_trials(deepcopy=False)
    done = [t for t in persisted if counts_as_trial(t)]
    n_before = n_done = len(done)
    seed_used = _derive_seed(seed, n_done)
    m = optuna_method(method, space, codec, seed_used, batch_size)
    target = n_trials if m.max_trials is None else min(n_trials, m.max_trials)
    if n_done >= target:
        logger.info("study %r already holds %d trials (asked for %d)", study.study_name, n_done, n_trials)
        return _finish(study, method, "sampled", t0, n_before, seed, seed_used, False)
    if _feasible_count(done) == 0:
        _precheck(space, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        mirror = optuna.create_study(directions=space.directions, sampler=m.sampler)
    seen: set[int] = set()
    _sync_mirror(mirror, persisted, seen, codec, m.penalize, space.directions)
    writer = TrialWriter(study, codec)
    ev = _Evaluator(space, profile)
    owner = owner_record()
    interrupted = False
    n_feas = _feasible_count(done)
    while n_done < target:
        if timeout is not None and time.perf_counter() - t0 > timeout:
            break
        # trials other workers finished since the last batch
        others = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
                  if t._trial_id not in seen]
        if others:
            _sync_mirror(mirror, others, seen, codec, m.penalize, space.directions)
            n_done += sum(1 for t in others if counts_as_trial(t))
            n_feas += _feasible_count(others)
            if n_done >= target:
                break
        b = min(m.batch_size, target - n_done)
        ids: list[int] = []
        asked: list[optuna.Trial] = []
        records: list[TrialRecord] | None = None
        finished = False
        try:
            if budget is not None and budget.done():
                break
            with budget.slots(b) if budget is not None else nullcontext(b) as grant:
                if grant > 0:
                    asked = [mirror.ask() for _ in range(grant)]
                    rows = np.stack([codec.suggest(t) for t in asked])
                    sys_attrs = [{k: v for k, v in mirror._storage.get_trial_system_attrs(t._trial_id).items()
                                  if k not in _SKIP_SYSTEM_ATTRS} for t in asked]
                    with deferred_interrupt():
                        ids = writer.create_running(rows, sys_attrs, owner)
                    if budget is not None:
                        budget.track(ids)
            if not asked:
                if budget is None or budget.wait():
                    break
                continue
            _debug_pause()
            records = ev.records(rows)
            with deferred_interrupt():
                writer.finish(ids, records)
            finished = True
        except KeyboardInterrupt:
            interrupted = True
            if ids and not finished:
                try:
                    with deferred_interrupt():
                        records = records if records is not None else ev.records(rows)
                        writer.finish(ids, records)
                    finished = True
                except BaseException:  # noqa: BLE001 - leave nothing RUNNING
                    writer.fail(ids)
        except BaseException:
            if ids and not finished:
                writer.fail(ids)
            raise
        seen.update(ids)
        if finished and records is not None:
            for t, rec in zip(asked, records):
                _tell_mirror(mirror, t, rec, m.penalize, space.directions)
            n_done += len(asked)
            n_feas += sum(1 for r in records if r.feasible and r.state == TrialState.COMPLETE)
        else:  # interrupted before anything was stored: drop the asked trials from the mirror
            for t in asked:
                mirror.tell(t, state=TrialState.FAIL)
        if callback is not None:
            callback({"done": n_done, "total": target, "new": n_done - n_before, "feasible": n_feas,
                      "elapsed_s": time.perf_counter() - t0})
        if interrupted:
            break
    res = _finish(study, method, "sampled", t0, n_before, seed, seed_used, interrupted, {"cache_hits": ev.hits})
    if interrupted:
        raise KeyboardInterrupt
    return res


def _debug_pause() -> None:
    """Test hook: ``COSEARCH_DEBUG_BATCH_PAUSE=<seconds>`` sleeps while a batch is RUNNING in the
    storage, so a crash test can kill the process in that window."""
    import os

    pause = os.environ.get("COSEARCH_DEBUG_BATCH_PAUSE")
    if pause:
        time.sleep(float(pause))


try:  # Study.tell deep-copies the trial it returns (about 1 ms); the mirror does not need it
    from optuna.study._tell import _tell_with_warning as _tell
except ImportError:  # pragma: no cover - optuna moved it
    _tell = None


def _tell_mirror(mirror: optuna.Study, trial: optuna.Trial, rec: TrialRecord, penalize: bool, directions: Sequence[str]) -> None:
    storage, tid = mirror._storage, trial._trial_id
    if not penalize:  # samplers that ignore constraints warn when they see them
        for key, value in rec.constraints.items():
            storage.set_trial_system_attr(tid, CONSTRAINTS_PREFIX + key, value)
    if penalize:
        values, state = penalized_values(rec.values, rec.violation, directions), TrialState.COMPLETE
    elif rec.state == TrialState.COMPLETE:
        values, state = rec.values, TrialState.COMPLETE
    else:
        values, state = None, TrialState.FAIL
    if _tell is not None:
        _tell(mirror, trial, values, state, suppress_warning=True)
    else:
        mirror.tell(trial, values, state=state)


def _sync_mirror(mirror: optuna.Study, trials: Sequence[FrozenTrial], seen: set[int], codec: ParamCodec,
                 penalize: bool, directions: Sequence[str]) -> None:
    add = []
    for t in trials:
        if t._trial_id in seen:
            continue
        if t.state.is_finished():
            seen.add(t._trial_id)
        mt = _mirror_trial(t, codec, penalize, directions)
        if mt is not None:
            add.append(mt)
    if add:
        mirror.add_trials(add)


def _run_scipy(space: SearchSpace, study: optuna.Study, method: str, n_trials: int, seed: int | None,
               callback: Callback | None, timeout: float | None, profile: Profile) -> StudyResult:
    t0 = time.perf_counter()
    codec = ParamCodec(space)
    done = [t for t in study.get_trials(deepcopy=False) if counts_as_trial(t)]
    n_before = len(done)
    seed_used = _derive_seed(seed, n_before)
    budget = n_trials - n_before
    if budget <= 0:
        return _finish(study, method, "sampled", t0, n_before, seed, seed_used, False)
    if _feasible_count(done) == 0:
        _precheck(space, seed)
    writer = TrialWriter(study, codec)
    state = {"written": 0, "feasible": _feasible_count(done)}
    queue: list[TrialRecord] = []

    def flush() -> None:
        if queue:
            with deferred_interrupt():
                writer.create_finished(queue)
            state["written"] += len(queue)
            state["feasible"] += sum(1 for r in queue if r.feasible and r.state == TrialState.COMPLETE)
            queue.clear()
            if callback is not None:
                callback({"done": n_before + state["written"], "total": n_trials, "new": state["written"],
                          "feasible": state["feasible"], "elapsed_s": time.perf_counter() - t0})

    def sink(rows: np.ndarray) -> Mapping[str, np.ndarray]:
        left = budget - state["written"] - len(queue)
        if left <= 0 or (timeout is not None and time.perf_counter() - t0 > timeout):
            raise BudgetExhausted
        metrics = space.evaluate_rows(rows, profile)
        take = min(left, rows.shape[0])
        sub = {k: np.asarray(v)[:take] for k, v in metrics.items()}
        queue.extend(build_records(space, rows[:take], sub))
        if len(queue) >= 512:
            flush()
        if take < rows.shape[0]:
            flush()
            raise BudgetExhausted
        return metrics

    interrupted = False
    try:
        run_scipy(method, space, sink, budget, seed_used if seed_used is not None else int(np.random.SeedSequence().generate_state(1)[0]))
    except BudgetExhausted:
        pass
    except KeyboardInterrupt:
        interrupted = True
    finally:
        flush()
    res = _finish(study, method, "sampled", t0, n_before, seed, seed_used, interrupted)
    if interrupted:
        raise KeyboardInterrupt
    return res


def _run_exhaustive(space: SearchSpace, study: optuna.Study, callback: Callback | None, profile: Profile,
                    enumerate_space: Callable[..., Any] = run_exhaustive) -> StudyResult:
    t0 = time.perf_counter()
    info = study.user_attrs.get(ATTR, {})
    existing = [t for t in study.get_trials(deepcopy=False) if counts_as_trial(t)]
    if (info.get("summary") or {}).get("complete"):
        logger.info("study %r: exhaustive enumeration already complete", study.study_name)
        return _finish(study, "exhaustive", "exhaustive", t0, len(existing), None, None, False)

    def progress(done: int, total: int) -> None:
        if callback is not None:
            callback({"done": done, "total": total, "new": 0, "feasible": None, "elapsed_s": time.perf_counter() - t0,
                      "unit": "points"})

    res = enumerate_space(space, progress=progress, profile=profile)
    codec = ParamCodec(space)
    have = {tuple(codec.to_row(t.params).tolist()) for t in existing if codec.to_row(t.params) is not None}
    rows = np.array([r for r in res.rows if tuple(r.tolist()) not in have]).reshape(-1, len(space.dims))
    records = build_records(space, rows, space.evaluate_rows(rows, profile)) if len(rows) else []
    TrialWriter(study, codec).create_finished(records)
    summary = dict(res.summary)
    summary["complete"] = True
    out = _finish(study, "exhaustive", "exhaustive", t0, len(existing), None, None, False, summary)
    if res.summary["feasible"] == 0:
        s = res.summary
        raise CosearchError("space", f"empty feasible region: of {s['points']:,} points {s['valid']:,} are valid plans, "
                            f"{s['fits']:,} of those fit in memory, {s['within_budget']:,} are within the budget")
    return out


# ------------------------------------------------------------------------------------ queries
def study_info(study: optuna.Study) -> dict[str, Any]:
    info = study.user_attrs.get(ATTR)
    if not isinstance(info, Mapping):
        raise CosearchError("--study", f"study {study.study_name!r} was not made by cosearch")
    return dict(info)


def feasible_trials(study: optuna.Study) -> list[FrozenTrial]:
    """COMPLETE trials whose stored point is feasible (valid, fits, within the space's budgets)."""
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get("feasible") is True and isinstance(t.user_attrs.get("metrics"), Mapping)]


#: The budgets `best` takes (a subset of the space's constraint keys, same metrics).
_LIMITS = {k: CONSTRAINT_METRICS[k] for k in ("max_cost_usd", "max_gpus", "max_days", "max_days_high")}


def _qualifying(trials: Sequence[FrozenTrial], objective: str, limits: Mapping[str, float | None]) -> list[FrozenTrial]:
    out = []
    for t in trials:
        m = t.user_attrs["metrics"]
        v = m.get(objective)
        if v is None or not math.isfinite(v):
            continue
        ok = True
        for key, bound in limits.items():
            if bound is None:
                continue
            x = m.get(_LIMITS[key])
            if x is None or not x <= bound:
                ok = False
                break
        if ok:
            out.append(t)
    return out


def _check_objective(study: optuna.Study, objective: str | None) -> str:
    info = study_info(study)
    obj = objective or info["objectives"][0]
    if obj not in OBJECTIVE_METRICS:
        raise CosearchError("--objective", f"unknown metric {obj!r}; allowed: {', '.join(OBJECTIVE_METRICS)}")
    return obj


def best(study: optuna.Study, objective: str | None = None, max_cost_usd: float | None = None,
         max_gpus: float | None = None, max_days: float | None = None,
         max_days_high: float | None = None) -> dict[str, Any] | None:
    """The best feasible stored trial on ``objective`` (default: the study's first) under the
    limits, or None when no stored trial qualifies. Ties go to the cheaper, then smaller, then
    earlier trial. Answered from stored trials only (no model run). ``max_days_high`` bounds the
    pessimistic time to train (upper end of the 80 % prediction interval); ``step_time_interval_s``
    in the result is that interval of the step time as stored (None for studies made before it)."""
    obj = _check_objective(study, objective)
    limits = {"max_cost_usd": max_cost_usd, "max_gpus": max_gpus, "max_days": max_days, "max_days_high": max_days_high}
    for k, v in limits.items():
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0):
            raise CosearchError(f"--{k.replace('_', '-')}", f"must be a positive number (got {v!r})")
    info = study_info(study)
    if info.get("kind") == "exhaustive":
        stored = (info.get("summary") or {}).get("front_metrics") or []
        needed = [obj] + [_LIMITS[k] for k, v in limits.items() if v is not None]
        if not all(m in stored for m in needed):
            # the stored front is exact only over its own metrics: enumerate the space again
            return _best_enumerated(study, info, obj, limits)
    cands = _qualifying(feasible_trials(study), obj, limits)
    if not cands:
        return None
    sign = -1.0 if direction(obj) == "maximize" else 1.0

    def key(t: FrozenTrial) -> tuple:
        m = t.user_attrs["metrics"]
        cost = m.get("cost_to_train_usd")
        return (sign * m[obj], cost if cost is not None else math.inf, m.get("gpus") or math.inf, t.number)

    t = min(cands, key=key)
    return {"study": study.study_name, "trial": t.number, "objective": obj, "direction": direction(obj),
            "value": t.user_attrs["metrics"][obj], "limits": {k: v for k, v in limits.items() if v is not None},
            "values": dict(zip(study_info(study)["objectives"], t.values or [])),
            "step_time_interval_s": _stored_band(t.user_attrs["metrics"], "step_time", "s"),
            "scenario": t.user_attrs["scenario"], "metrics": t.user_attrs["metrics"]}


def _best_enumerated(study: optuna.Study, info: Mapping[str, Any], obj: str,
                     limits: Mapping[str, float | None]) -> dict[str, Any] | None:
    """:func:`best` of an exhaustive study for an objective or budget its stored front does not
    cover: the exact answer from enumerating the study's stored space again (with its profile)."""
    from .samplers import best_point

    try:
        space = parse_space(info["space"], f"study {study.study_name!r}")
    except (CosearchError, KeyError, TypeError) as err:
        raise CosearchError("--objective", f"study {study.study_name!r} stores its front over "
                            f"{', '.join((info.get('summary') or {}).get('front_metrics') or info['objectives'])} only, "
                            f"and its space cannot be read back to answer exactly ({err})") from None
    points = (info.get("summary") or {}).get("points")
    if points is not None and int(points) != int(space.size):
        raise CosearchError("--objective", f"study {study.study_name!r} stores its front over "
                            f"{', '.join(info['objectives'])} only, and its stored space ({int(space.size):,} points) is "
                            f"not the one it enumerated ({int(points):,}); cannot answer {obj} exactly")
    profile = Profile.model_validate(info["profile"]) if info.get("profile") else DEFAULT_PROFILE
    bounds = {_LIMITS[k]: float(v) for k, v in limits.items() if v is not None}
    t0 = time.perf_counter()
    flat, counts = best_point(space, obj, bounds, profile=profile)
    logger.info("best %s: re-enumerated %d points of study %r in %.2f s", obj, counts["points"], study.study_name,
                time.perf_counter() - t0)
    if flat is None:
        return None
    rows = space.rows_of_flat(np.array([flat], dtype=np.int64))
    rec = build_records(space, rows, space.evaluate_rows(rows, profile))[0]
    m = rec.user_attrs["metrics"]
    codec = ParamCodec(space)
    trial = next((t.number for t in study.get_trials(deepcopy=False)
                  if t.params and (r := codec.to_row(t.params)) is not None and np.array_equal(r, rows[0])), None)
    return {"study": study.study_name, "trial": trial, "objective": obj, "direction": direction(obj),
            "value": m[obj], "limits": {k: v for k, v in limits.items() if v is not None},
            "values": dict(zip(info["objectives"], rec.values or [])),
            "step_time_interval_s": _stored_band(m, "step_time", "s"),
            "scenario": rec.user_attrs["scenario"], "metrics": m,
            "source": f"re-enumerated {counts['points']:,} points (not on the stored front)" if trial is None
                      else f"re-enumerated {counts['points']:,} points"}


def _stored_band(m: Mapping[str, Any], key: str, unit: str) -> list[float] | None:
    lo, hi = m.get(f"{key}_low_{unit}"), m.get(f"{key}_high_{unit}")
    return None if lo is None or hi is None else [lo, hi]


def why_nothing(study: optuna.Study, objective: str | None = None, max_cost_usd: float | None = None,
                max_gpus: float | None = None, max_days: float | None = None, max_days_high: float | None = None) -> str:
    """One line saying why :func:`best` found nothing (which limit is out of reach)."""
    feas = feasible_trials(study)
    n_all = sum(1 for t in study.get_trials(deepcopy=False) if counts_as_trial(t))
    if not feas:
        return f"no feasible configuration in study {study.study_name!r} ({n_all} trials, none feasible)"
    parts = []
    limits = {"max_cost_usd": max_cost_usd, "max_gpus": max_gpus, "max_days": max_days, "max_days_high": max_days_high}
    info = study_info(study)
    stored = (info.get("summary") or {}).get("front_metrics") or []
    enumerate_again = info.get("kind") == "exhaustive" and not all(
        _LIMITS[k] in stored for k, v in limits.items() if v is not None)
    for key, bound in limits.items():
        if bound is None:
            continue
        if enumerate_again:  # the lowest value in the whole space, not on the stored front
            res = _best_enumerated(study, info, _LIMITS[key], {})
            low, where = (res["value"] if res else None), "in the space"
        else:
            vals = [t.user_attrs["metrics"].get(_LIMITS[key]) for t in feas]
            vals = [v for v in vals if v is not None]
            low, where = (min(vals) if vals else None), "stored"
        flag = key.replace("_", "-")
        parts.append(f"--{flag} {bound:g} (lowest {_LIMITS[key]} {where}: {low:,.4g})" if low is not None else f"--{flag} {bound:g}")
    if enumerate_again:
        s = info.get("summary") or {}
        return (f"nothing qualifies in study {study.study_name!r}: none of the {s.get('feasible', 0):,} feasible points "
                f"of its space meets {' and '.join(parts)}")
    return (f"nothing qualifies in study {study.study_name!r}: none of its {len(feas)} feasible configurations "
            f"meets {' and '.join(parts)}")


#: Metric columns of a front table, after the objectives.
FRONT_COLUMNS = ("step_time_s", "mfu", "memory_gib", "gpus", "time_to_train_days", "cost_to_train_usd", "tokens_per_s",
                 "step_time_low_s", "step_time_high_s", "time_to_train_low_days", "time_to_train_high_days")


def _flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def pareto_front(study: optuna.Study) -> pd.DataFrame:
    """Feasible non-dominated stored trials over the study's objectives, one row each, sorted by
    the first objective: ``trial``, the objectives, key metrics, then the scenario (dotted keys)."""
    info = study_info(study)
    objectives, directions = list(info["objectives"]), list(info["directions"])
    feas = [t for t in feasible_trials(study) if t.values is not None]
    metric_cols = objectives + [c for c in FRONT_COLUMNS if c not in objectives]
    if not feas:
        return pd.DataFrame(columns=["trial"] + metric_cols)
    pts = np.array([[np.nan if t.user_attrs["metrics"].get(o) is None else t.user_attrs["metrics"][o] for o in objectives]
                    for t in feas], dtype=float)
    mask = pareto_mask(pts, directions)
    rows = []
    for t in (t for t, keep in zip(feas, mask) if keep):
        m = t.user_attrs["metrics"]
        row = {"trial": t.number, **{c: m.get(c) for c in metric_cols}}
        sc = dict(t.user_attrs["scenario"])
        if isinstance(sc.get("model"), str):
            row["model"] = sc.pop("model")
        row.update(_flatten(sc))
        rows.append(row)
    df = pd.DataFrame(rows)
    asc = directions[0] != "maximize"
    return df.sort_values(objectives[0], ascending=asc, kind="stable").reset_index(drop=True)


def list_studies(storage: BaseStorage | str | None = None) -> list[dict[str, Any]]:
    """Every study in the storage with its counts and best values per objective."""
    _quiet_optuna()
    st = _as_storage(storage, must_exist=True)
    out = []
    for s in st.get_all_studies():
        trials = st.get_all_trials(s._study_id, deepcopy=False)
        info = s.user_attrs.get(ATTR) if isinstance(s.user_attrs.get(ATTR), Mapping) else {}
        objectives = list(info.get("objectives") or [])
        feas = [t for t in trials if t.state == TrialState.COMPLETE and t.user_attrs.get("feasible") is True]
        bests: dict[str, float | None] = {}
        for o in objectives:
            vals = [t.user_attrs["metrics"].get(o) for t in feas if isinstance(t.user_attrs.get("metrics"), Mapping)]
            vals = [v for v in vals if v is not None]
            bests[o] = (max(vals) if direction(o) == "maximize" else min(vals)) if vals else None
        out.append({
            "study": s.study_name, "kind": info.get("kind", "optuna"), "method": info.get("method"),
            "objectives": objectives, "trials": sum(1 for t in trials if counts_as_trial(t)),
            "complete": sum(1 for t in trials if t.state == TrialState.COMPLETE),
            "failed": sum(1 for t in trials if t.state == TrialState.FAIL),
            "running": sum(1 for t in trials if t.state == TrialState.RUNNING),
            "feasible": len(feas), "best": bests,
            "points": (info.get("summary") or {}).get("points"),
        })
    return out
