"""Trial records and their batched persistence (the study/trial contract lives here).

Every trial cosearch writes carries:

* ``user_attrs["scenario"]``: the complete scenario dict (JSON-able),
* ``user_attrs["metrics"]``: every metric of the model for it (float; NaN/inf -> None),
* ``user_attrs["feasible"]``: valid plan, fits memory and within every budget,
* constraints (``trial.set_constraint`` keys, <= 0 satisfied): ``valid``, ``memory`` and one per
  budget (``max_cost_usd``, ...), relative to the bound,
* values: the objectives, even for infeasible points; a point whose objectives are not finite
  is stored as FAIL.

:class:`TrialWriter` writes whole batches. On the default journal storage one batch is one
append (one lock, one fsync) instead of optuna's one append per attribute, which is what makes
hundreds of persisted trials per second possible; other storages go through the public storage
API one call at a time.
"""
from __future__ import annotations

import json
import logging
import math
import signal
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import optuna
from optuna.distributions import distribution_to_json
from optuna.storages import JournalStorage
from optuna.trial import FrozenTrial, TrialState

from .samplers._codec import ParamCodec
from .search.space import SearchSpace
from .storages import OWNER_ATTR

logger = logging.getLogger(__name__)

#: Constraint value stored for an unbounded violation (optuna refuses NaN).
BIG_VIOLATION = 1.0e6
#: System attribute naming the batch a trial was written in (ties a batch's trial ids).
BATCH_ATTR = "cosearch:batch"
CONSTRAINTS_PREFIX = "constraints:"


@dataclass
class TrialRecord:
    """Everything stored for one evaluated point."""

    row: np.ndarray
    state: TrialState
    values: list[float] | None
    constraints: dict[str, float]
    user_attrs: dict[str, Any]

    @property
    def feasible(self) -> bool:
        return bool(self.user_attrs["feasible"])

    @property
    def violation(self) -> float:
        return float(sum(v for v in self.constraints.values() if v > 0))


def _plain_column(arr: np.ndarray) -> list[Any]:
    a = np.asarray(arr)
    if a.dtype == bool:
        return a.astype(float).tolist()
    a = a.astype(float)
    out = a.tolist()
    bad = ~np.isfinite(a)
    if bad.any():
        for i in np.flatnonzero(bad):
            out[i] = None
    return out


def constraint_columns(space: SearchSpace, metrics: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Constraint values per key (<= 0 satisfied) for arrays of metrics."""
    valid = np.asarray(metrics["valid"], dtype=bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        mem = np.asarray(metrics["memory_gib"], dtype=float) / np.asarray(metrics["usable_memory_gib"], dtype=float) - 1.0
    fits = np.asarray(metrics["fits"], dtype=bool)
    mem = np.where(np.isfinite(mem), mem, BIG_VIOLATION)
    mem = np.where(fits, np.minimum(mem, 0.0), np.maximum(mem, 1e-9))  # sign agrees with `fits`
    cols = {"valid": np.where(valid, 0.0, 1.0), "memory": mem}
    for key in space.constraints:
        v = np.asarray(metrics[f"violation_{key}"], dtype=float)
        cols[key] = np.clip(np.nan_to_num(v, nan=BIG_VIOLATION, posinf=BIG_VIOLATION), -BIG_VIOLATION, BIG_VIOLATION)
    return cols


def build_records(space: SearchSpace, rows: np.ndarray, metrics: Mapping[str, np.ndarray]) -> list[TrialRecord]:
    """One :class:`TrialRecord` per row (vectorized per metric; one small dict per row)."""
    rows = np.asarray(rows, dtype=float).reshape(-1, len(space.dims))
    n = rows.shape[0]
    if n == 0:
        return []
    objs = np.stack([np.asarray(metrics[m], dtype=float) for m in space.objectives], axis=1)
    finite = np.isfinite(objs).all(axis=1)
    feasible = np.asarray(metrics["feasible"], dtype=bool)
    cons = constraint_columns(space, metrics)
    con_lists = {k: v.tolist() for k, v in cons.items()}
    keys = list(metrics)
    cols = [_plain_column(metrics[k]) for k in keys]
    obj_lists = objs.tolist()
    scenarios = space.scenarios(rows)
    out = []
    for i in range(n):
        m = {k: c[i] for k, c in zip(keys, cols)}
        ok = bool(finite[i])
        out.append(TrialRecord(
            row=rows[i],
            state=TrialState.COMPLETE if ok else TrialState.FAIL,
            values=obj_lists[i] if ok else None,
            constraints={k: v[i] for k, v in con_lists.items()},
            user_attrs={"scenario": scenarios[i], "metrics": m, "feasible": bool(feasible[i])},
        ))
    return out


def penalized_values(values: Sequence[float] | None, violation: float, directions: Sequence[str]) -> list[float]:
    """Values for samplers that ignore constraints: infeasible points rank after every feasible
    one, ordered by total violation (and unfinished objectives count as a large violation)."""
    if values is not None and violation <= 0 and all(math.isfinite(v) for v in values):
        return list(values)
    v = violation if values is not None else max(violation, BIG_VIOLATION)
    return [(1e12 if d == "minimize" else -1e12) * (1.0 + v) for d in directions]


@contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Hold Ctrl-C until the block (a storage write) is done, then raise KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    try:
        old = signal.signal(signal.SIGINT, lambda s, f: received.append(s))
    except ValueError:  # not in the main interpreter
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if received:
            raise KeyboardInterrupt


def _now() -> str:
    return datetime.now(tz=timezone.utc).isoformat(timespec="microseconds")


class TrialWriter:
    """Creates and finishes trials of one study, a batch at a time."""

    def __init__(self, study: optuna.Study, codec: ParamCodec) -> None:
        self.study = study
        self.storage = study._storage
        self.study_id = study._study_id
        self.codec = codec
        self._dist_json = {k: distribution_to_json(d) for k, d in codec.distributions.items()}
        s = self.storage
        from .storages._compat import fast_paths_enabled

        tested = fast_paths_enabled()  # untested optuna: public API only
        self.fast = tested and (isinstance(s, JournalStorage) and hasattr(s, "_backend") and hasattr(s, "_replay_result")
                     and hasattr(s, "_thread_lock") and hasattr(s, "_sync_with_backend"))
        if self.fast:
            try:
                from optuna.storages.journal._storage import JournalOperation
            except ImportError:  # pragma: no cover - optuna moved it: use the public API
                self.fast = False
            else:
                self._op = JournalOperation
        from .storages.rdb_batch import rdb_backend

        # RDB storages: one transaction per batch (cosearch.storages.rdb_batch) instead of ~10 commits per trial
        self.rdb = tested and not self.fast and rdb_backend(s) is not None

    # ------------------------------------------------------------------------------ journal
    def _append(self, logs: list[dict[str, Any]]) -> None:
        s = self.storage
        worker = s._replay_result.worker_id
        for log in logs:
            log["worker_id"] = worker
        with s._thread_lock:
            s._backend.append_logs(logs)
            s._sync_with_backend()

    def _create_log(self, row: np.ndarray, system_attrs: dict[str, Any], record: TrialRecord | None) -> dict[str, Any]:
        log: dict[str, Any] = {
            "op_code": self._op.CREATE_TRIAL, "study_id": self.study_id, "datetime_start": _now(),
            "distributions": self._dist_json, "params": self.codec.to_internal(row),
            "system_attrs": system_attrs, "intermediate_values": {},
        }
        if record is None:
            log.update(state=int(TrialState.RUNNING), value=None, values=None, user_attrs={})
        else:
            vals = record.values
            single = vals is not None and len(vals) == 1
            log.update(state=int(record.state), value=vals[0] if single else None,
                       values=None if single or vals is None else list(vals),
                       user_attrs=record.user_attrs, datetime_complete=log["datetime_start"])
        return log

    def _ids_of_batch(self, token: str, n: int) -> list[int]:
        """Trial ids of the ``n`` trials this batch created (contiguous: one append)."""
        rr = self.storage._replay_result
        last = rr._last_created_trial_id_by_this_process
        ids = list(range(last - n + 1, last + 1))
        trials = rr._trials
        if all(i in trials and trials[i].system_attrs.get(BATCH_ATTR) == token for i in ids):
            return ids
        found = [i for i in rr._study_id_to_trial_ids[self.study_id] if trials[i].system_attrs.get(BATCH_ATTR) == token]
        if len(found) != n:  # pragma: no cover - journal replay out of step with this process
            raise RuntimeError(f"journal storage: expected {n} new trials of batch {token}, found {len(found)}")
        return found

    # ------------------------------------------------------------------------------ public
    def create_running(self, rows: np.ndarray, system_attrs: Sequence[dict[str, Any]], owner: dict[str, Any]) -> list[int]:
        """Create RUNNING trials holding their parameters and owner; return their trial ids."""
        token = uuid.uuid4().hex
        attrs = [{**sa, OWNER_ATTR: owner, BATCH_ATTR: token} for sa in system_attrs]
        if self.fast:
            self._append([self._create_log(r, a, None) for r, a in zip(rows, attrs)])
            return self._ids_of_batch(token, len(attrs))
        if self.rdb:
            from .storages.rdb_batch import create_trials

            return create_trials(self.storage, self.study_id,
                                 [{"params": self.codec.to_params(r), "system_attrs": a} for r, a in zip(rows, attrs)],
                                 self.codec.distributions)
        ids = []
        for r, a in zip(rows, attrs):
            t = optuna.trial.create_trial(state=TrialState.RUNNING, params=self.codec.to_params(r),
                                          distributions=self.codec.distributions, system_attrs=a)
            ids.append(self.storage.create_new_trial(self.study_id, template_trial=t))
        return ids

    def finish(self, ids: Sequence[int], records: Sequence[TrialRecord], extra_system_attrs: Sequence[dict[str, Any]] | None = None) -> None:
        """Store results (attributes, constraints, state and values) of RUNNING trials."""
        extra = extra_system_attrs or [{} for _ in ids]
        if self.fast:
            op = self._op
            logs: list[dict[str, Any]] = []
            for tid, rec, ex in zip(ids, records, extra):
                for key, value in rec.user_attrs.items():
                    logs.append({"op_code": op.SET_TRIAL_USER_ATTR, "trial_id": tid, "user_attr": {key: value}})
                for key, value in {**ex, **{CONSTRAINTS_PREFIX + k: v for k, v in rec.constraints.items()}}.items():
                    logs.append({"op_code": op.SET_TRIAL_SYSTEM_ATTR, "trial_id": tid, "system_attr": {key: value}})
                logs.append({"op_code": op.SET_TRIAL_STATE_VALUES, "trial_id": tid, "state": int(rec.state),
                             "values": rec.values, "datetime_complete": _now()})
            self._append(logs)
            return
        if self.rdb:
            from .storages.rdb_batch import finish_trials

            finish_trials(self.storage, [
                (tid, {"state": rec.state, "values": rec.values, "user_attrs": rec.user_attrs,
                       "system_attrs": {**ex, **{CONSTRAINTS_PREFIX + k: v for k, v in rec.constraints.items()}}})
                for tid, rec, ex in zip(ids, records, extra)])
            return
        s = self.storage
        for tid, rec, ex in zip(ids, records, extra):
            for key, value in rec.user_attrs.items():
                s.set_trial_user_attr(tid, key, value)
            for key, value in {**ex, **{CONSTRAINTS_PREFIX + k: v for k, v in rec.constraints.items()}}.items():
                s.set_trial_system_attr(tid, key, value)
            s.set_trial_state_values(tid, rec.state, rec.values)

    def fail(self, ids: Sequence[int]) -> None:
        """Mark RUNNING trials FAIL (their batch was abandoned)."""
        if not ids:
            return
        if self.fast:
            self._append([{"op_code": self._op.SET_TRIAL_STATE_VALUES, "trial_id": tid, "state": int(TrialState.FAIL),
                           "values": None, "datetime_complete": _now()} for tid in ids])
            return
        for tid in ids:
            try:
                self.storage.set_trial_state_values(tid, TrialState.FAIL)
            except Exception:  # noqa: BLE001 - finished meanwhile
                pass

    def create_finished(self, records: Sequence[TrialRecord], chunk: int = 2000) -> int:
        """Write finished trials (no RUNNING phase); return how many were written."""
        for start in range(0, len(records), chunk):
            part = records[start:start + chunk]
            if self.fast:
                logs = [self._create_log(r.row, {CONSTRAINTS_PREFIX + k: v for k, v in r.constraints.items()}, r) for r in part]
                self._append(logs)
                continue
            if self.rdb:
                from .storages.rdb_batch import create_trials

                create_trials(self.storage, self.study_id, [
                    {"params": self.codec.to_params(r.row), "state": r.state,
                     "values": r.values if r.state == TrialState.COMPLETE else None, "user_attrs": r.user_attrs,
                     "system_attrs": {CONSTRAINTS_PREFIX + k: v for k, v in r.constraints.items()}}
                    for r in part], self.codec.distributions)
                continue
            trials = []
            for r in part:
                vals = r.values
                trials.append(optuna.trial.create_trial(
                    state=r.state, values=vals if r.state == TrialState.COMPLETE else None,
                    params=self.codec.to_params(r.row), distributions=self.codec.distributions,
                    user_attrs=r.user_attrs, constraints=r.constraints))
            self.study.add_trials(trials)
        return len(records)


def record_from_trial(t: FrozenTrial) -> dict[str, float]:
    """Constraint values of a stored trial."""
    return {k[len(CONSTRAINTS_PREFIX):]: v for k, v in t.system_attrs.items() if k.startswith(CONSTRAINTS_PREFIX)}


def jsonable(x: Any) -> Any:
    """Round-trip through JSON (NaN/inf -> None) for attributes stored by value."""
    return json.loads(json.dumps(x, default=lambda o: o.item() if hasattr(o, "item") else str(o)).replace("NaN", "null"))
