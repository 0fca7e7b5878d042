"""The search loops of :func:`cosearch.study.run_study`: optuna ask/tell on an in-memory mirror,
scipy populations and exhaustive enumeration, each writing batches through one
:class:`cosearch.storages._writer.TrialWriter` call per batch; plus the feasibility pre-check and
the evaluation cache they share.
"""
from __future__ import annotations

import logging
import math
import time
import warnings
from contextlib import nullcontext
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import optuna
from optuna.exceptions import ExperimentalWarning
from optuna.trial import FrozenTrial, TrialState

from ._trials import (
    BATCH_ATTR, CONSTRAINTS_PREFIX, TrialRecord, TrialWriter, build_records, deferred_interrupt, penalized_values,
    record_from_trial,
)
from .errors import CosearchError
from .model.profile import Profile
from .samplers import BudgetExhausted, ParamCodec, optuna_method, run_exhaustive, run_scipy
from .search.space import SearchSpace
from .storages import OWNER_ATTR
from .storages._storage import owner_record

from ._study_store import ATTR, Callback, StudyResult, _derive_seed, _feasible_count, _finish, counts_as_trial

logger = logging.getLogger(__name__)

#: Trial system attributes of optuna samplers not worth persisting (GridSampler's whole grid).
_SKIP_SYSTEM_ATTRS = {"search_space"}
#: Chunk size of the feasibility pre-check on a space's points.
_PRECHECK_CHUNK = 16_384
_PRECHECK_EXACT_LIMIT = 1 << 18


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
            n_feas += sum(1 for r in records if r.feasible)
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
            state["feasible"] += sum(1 for r in queue if r.feasible)
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
