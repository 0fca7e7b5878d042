"""Batched trial writes for optuna's RDB storages (PostgreSQL, MySQL, SQLite).

Through optuna's public storage API a cosearch trial costs ~20 round trips and ~10 commits on an
RDB storage (one per parameter, attribute and value, each re-reading the trial row), so a
PostgreSQL study runs at a few trials per second. These functions write a whole batch of trials
in one transaction with optuna's own ORM models: same tables, same rows, same JSON encodings,
and trial numbers assigned under the same study-row lock optuna takes in ``create_new_trial``
(so numbers stay unique and gap-free with any mix of optuna and cosearch writers).

What is skipped compared with the public API: the per-parameter check that a parameter's
distribution matches the study's earlier ones (cosearch's parameter codec fixes the
distributions of a space, and a study is bound to its space).
"""
from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any, Mapping, Sequence

from optuna.distributions import BaseDistribution, distribution_to_json
from optuna.storages import BaseStorage, RDBStorage
from optuna.trial import TrialState

logger = logging.getLogger(__name__)

__all__ = ["rdb_backend", "create_trials", "finish_trials"]


def rdb_backend(storage: BaseStorage) -> RDBStorage | None:
    """The RDBStorage behind ``storage`` (optuna wraps it in a cache layer), or None."""
    if isinstance(storage, RDBStorage):
        return storage
    backend = getattr(storage, "_backend", None)
    return backend if isinstance(backend, RDBStorage) else None


def _models() -> Any:
    from optuna.storages._rdb import models

    return models


def _session(rdb: RDBStorage) -> Any:
    from optuna.storages._rdb.storage import _create_scoped_session

    return _create_scoped_session(rdb.scoped_session)


def _param_rows(models: Any, trial_id: int, params: Mapping[str, Any],
                distributions: Mapping[str, BaseDistribution], dist_json: Mapping[str, str]) -> list[Any]:
    return [models.TrialParamModel(trial_id=trial_id, param_name=name,
                                   param_value=distributions[name].to_internal_repr(value),
                                   distribution_json=dist_json[name])
            for name, value in params.items()]


def _attr_rows(model_cls: Any, trial_id: int, attrs: Mapping[str, Any]) -> list[Any]:
    return [model_cls(trial_id=trial_id, key=key, value_json=json.dumps(value)) for key, value in attrs.items()]


def _value_rows(models: Any, trial_id: int, values: Sequence[float] | None) -> list[Any]:
    if values is None:
        return []
    out = []
    for objective, v in enumerate(values):
        stored, kind = models.TrialValueModel.value_to_stored_repr(float(v))
        out.append(models.TrialValueModel(trial_id=trial_id, objective=objective, value=stored, value_type=kind))
    return out


def create_trials(storage: BaseStorage, study_id: int, trials: Sequence[Mapping[str, Any]],
                  distributions: Mapping[str, BaseDistribution]) -> list[int]:
    """Create trials in one transaction; return their trial ids in the order given.

    Each item: ``params`` (name -> value), ``system_attrs``, and optionally ``state`` (default
    RUNNING), ``values``, ``user_attrs`` (a finished trial is written complete at once).
    """
    rdb = rdb_backend(storage)
    if rdb is None:
        raise TypeError("create_trials needs an RDB storage")
    if not trials:
        return []
    models = _models()
    dist_json = {k: distribution_to_json(d) for k, d in distributions.items()}
    now = datetime.now()
    with _session(rdb) as session:
        # the lock optuna's create_new_trial takes (PostgreSQL, MySQL: the study row; SQLite ignores it)
        models.StudyModel.find_or_raise_by_id(study_id, session, for_update=True)
        import sqlalchemy

        rows = []
        for spec in trials:
            state = spec.get("state", TrialState.RUNNING)
            rows.append(models.TrialModel(study_id=study_id, number=None, state=state, datetime_start=now,
                                          datetime_complete=now if state.is_finished() else None))
        session.add_all(rows)
        session.flush()
        # counted after the insert, as optuna's count_past_trials: on SQLite the insert takes the database's write
        # lock, so no other writer's trials can appear below ours between the count and the commit (counted before
        # it, two writers read the same count and gave 512 trials duplicate numbers, hidden from load_study)
        first_id = min(r.trial_id for r in rows)
        n0 = session.execute(sqlalchemy.select(sqlalchemy.func.count(models.TrialModel.trial_id))
                             .where(models.TrialModel.study_id == study_id,
                                    models.TrialModel.trial_id < first_id)).scalar() or 0
        for i, row in enumerate(sorted(rows, key=lambda r: r.trial_id)):
            row.number = n0 + i  # optuna: number = trials of the study with a smaller trial_id
        children: list[Any] = []
        for row, spec in zip(rows, trials):
            children += _param_rows(models, row.trial_id, spec.get("params") or {}, distributions, dist_json)
            children += _attr_rows(models.TrialSystemAttributeModel, row.trial_id, spec.get("system_attrs") or {})
            children += _attr_rows(models.TrialUserAttributeModel, row.trial_id, spec.get("user_attrs") or {})
            children += _value_rows(models, row.trial_id, spec.get("values"))
        session.add_all(children)
        ids = [r.trial_id for r in rows]
    return ids


def finish_trials(storage: BaseStorage, results: Sequence[tuple[int, Mapping[str, Any]]]) -> list[int]:
    """Finish RUNNING trials in one transaction: ``(trial_id, {"state", "values", "user_attrs",
    "system_attrs"})`` each. Trials no longer RUNNING (failed meanwhile as stale) are left as they
    are; returns the ids that were finished."""
    rdb = rdb_backend(storage)
    if rdb is None:
        raise TypeError("finish_trials needs an RDB storage")
    if not results:
        return []
    models = _models()
    ids = [tid for tid, _ in results]
    now = datetime.now()
    done: list[int] = []
    with _session(rdb) as session:
        rows = {r.trial_id: r for r in session.query(models.TrialModel)
                .filter(models.TrialModel.trial_id.in_(ids)).with_for_update().all()}
        sys_keys = {k for _, res in results for k in (res.get("system_attrs") or {})}
        existing: dict[tuple[int, str], Any] = {}
        if sys_keys:
            for a in (session.query(models.TrialSystemAttributeModel)
                      .filter(models.TrialSystemAttributeModel.trial_id.in_(ids),
                              models.TrialSystemAttributeModel.key.in_(sys_keys))):
                existing[(a.trial_id, a.key)] = a
        children: list[Any] = []
        for tid, res in results:
            row = rows.get(tid)
            if row is None or row.state != TrialState.RUNNING:
                logger.warning("trial id %s is %s, not RUNNING: its result is not stored", tid,
                               None if row is None else row.state.name)
                continue
            children += _attr_rows(models.TrialUserAttributeModel, tid, res.get("user_attrs") or {})
            for key, value in (res.get("system_attrs") or {}).items():
                if (tid, key) in existing:
                    existing[(tid, key)].value_json = json.dumps(value)
                else:
                    children.append(models.TrialSystemAttributeModel(trial_id=tid, key=key, value_json=json.dumps(value)))
            state = res["state"]
            values = res.get("values") if state == TrialState.COMPLETE else None
            children += _value_rows(models, tid, values)
            row.state = state
            row.datetime_complete = now
            done.append(tid)
        session.add_all(children)
    return done
