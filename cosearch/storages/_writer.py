"""How a trial is stored: :class:`TrialRecord` and :class:`TrialWriter`, one call per batch.

Every trial cosearch writes carries:

* ``user_attrs["scenario"]``: the complete scenario dict (JSON-able),
* ``user_attrs["metrics"]``: every metric of the model for it (float; NaN/inf -> None),
* ``user_attrs["feasible"]``: valid plan, fits memory and within every budget,
* constraints (system attrs ``constraints:<key>``, <= 0 satisfied): ``valid``, ``memory`` and one
  per budget (``max_cost_usd``, ...), relative to the bound,
* values: the objectives, even for infeasible points; a point whose objectives are not finite
  is stored as FAIL.

:class:`TrialWriter` writes whole batches behind one small interface (``create_running``,
``finish``, ``fail``, ``create_finished``). On the default journal storage one batch is one
append (one lock, one fsync) instead of optuna's one append per attribute; RDB storages get one
transaction per batch (:mod:`.rdb_batch`); any other storage goes through optuna's public
storage API one call at a time. The hand-written formats are guarded by :mod:`._compat`.
"""
from __future__ import annotations

import json
import math
import signal
import threading
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np
import optuna
from optuna.distributions import distribution_to_json
from optuna.storages import JournalStorage
from optuna.trial import FrozenTrial, TrialState

from ._owners import ABANDONED_ATTR, OWNER_ATTR

if TYPE_CHECKING:  # the codec only needs .distributions, .to_params(row), .to_internal(row)
    from ..samplers._codec import ParamCodec

__all__ = ["BATCH_ATTR", "CONSTRAINTS_PREFIX", "TrialRecord", "TrialWriter", "deferred_interrupt", "jsonable",
           "record_from_trial"]

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
        from ._compat import fast_paths_enabled

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
        from .rdb_batch import rdb_backend

        # RDB storages: one transaction per batch (rdb_batch) instead of ~10 commits per trial
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
            from .rdb_batch import create_trials

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
            from .rdb_batch import finish_trials

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
            self._append([log for tid in ids for log in (
                {"op_code": self._op.SET_TRIAL_SYSTEM_ATTR, "trial_id": tid, "system_attr": {ABANDONED_ATTR: True}},
                {"op_code": self._op.SET_TRIAL_STATE_VALUES, "trial_id": tid, "state": int(TrialState.FAIL),
                 "values": None, "datetime_complete": _now()})])
            return
        for tid in ids:
            try:
                self.storage.set_trial_system_attr(tid, ABANDONED_ATTR, True)
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
                from .rdb_batch import create_trials

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
    """Round-trip through JSON for attributes stored by value and ``catalog --json``'s records: every non-finite
    float (NaN, inf and -inf, numpy's included) becomes None (JSON null), by value, so no string is ever altered (a
    text "NaN" stays "NaN"); numpy scalars become Python numbers, anything else JSON cannot hold its ``str``."""
    return json.loads(json.dumps(_finite(x), default=lambda o: _finite(o.item() if hasattr(o, "item") else str(o)),
                                 allow_nan=False))


def _finite(x: Any) -> Any:
    """``x`` with every non-finite float in it (in dict values, lists and tuples, as JSON walks them) None."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x
