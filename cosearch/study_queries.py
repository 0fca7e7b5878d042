"""Queries on a stored study: best point under budgets, why nothing qualifies, the Pareto
front as a table, study info and the list of studies in a storage. Read-only: never writes.
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any, Mapping, Sequence

import numpy as np
import optuna
import pandas as pd
from optuna.storages import BaseStorage
from optuna.trial import FrozenTrial, TrialState

from ._numbers import kind_of
from ._trials import build_records
from .errors import CosearchError
from .model.profile import DEFAULT_PROFILE, Profile
from .samplers import ParamCodec
from .search.pareto import missing_as_worst, pareto_mask
from .search._names import PRICED_METRICS
from .search.space import CONSTRAINT_METRICS, METRIC_NEEDS, OBJECTIVE_METRICS, direction, parse_space

from ._study_store import ATTR, _as_storage, _quiet_optuna, counts_as_trial, is_feasible_trial

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------ queries
def study_info(study: optuna.Study) -> dict[str, Any]:
    """The cosearch description of ``study`` (``user_attrs["cosearch"]``). Every query reads it
    first, so this is where a ``study`` argument that is not an optuna study is refused."""
    if not isinstance(study, optuna.Study):
        raise CosearchError("study", f"expected an optuna study, e.g. cosearch.study.load_study(name, storage) "
                            f"(got {kind_of(study)})")
    info = study.user_attrs.get(ATTR)
    if not isinstance(info, Mapping):
        raise CosearchError("--study", f"study {study.study_name!r} was not made by cosearch")
    return dict(info)


def _unfinished(info: Mapping[str, Any]) -> bool:
    """Whether an exhaustive study's enumeration never finished (its run was stopped before storing the front:
    the summary lacks ``complete``), from its cosearch description."""
    return info.get("kind") == "exhaustive" and not (info.get("summary") or {}).get("complete")


def unfinished_note(study: optuna.Study) -> str | None:
    """A line saying an exhaustive study's enumeration never finished (:func:`_unfinished`), so the trials it holds
    are part of a front; None otherwise."""
    if not _unfinished(study_info(study)):
        return None
    return (f"study {study.study_name!r}: the exhaustive enumeration never finished (its run was stopped before "
            "storing the front), so this front is partial; run the same `cosearch run` command to finish it")


def feasible_trials(study: optuna.Study) -> list[FrozenTrial]:
    """Stored trials whose point is feasible (:func:`~cosearch._study_store.is_feasible_trial`): a FAIL
    one too, whose objective has no value (the cost on a GPU without a price) but which can still be
    the best on the metrics it has."""
    return [t for t in study.get_trials(deepcopy=False) if is_feasible_trial(t)]


#: The budgets `best` takes (a subset of the space's constraint keys, same metrics): the one list of them. Its keys
#: are the keyword arguments of :func:`best` and :func:`why_nothing` and the dests of `cosearch best`'s options.
_LIMITS = {k: CONSTRAINT_METRICS[k] for k in ("max_cost_usd", "max_gpus", "max_days", "max_days_high", "max_cost_usd_high")}


def _limits(values: Mapping[str, Any]) -> dict[str, float | None]:
    """The budget of each :data:`_LIMITS` key in ``values`` (a caller's keyword arguments), in :data:`_LIMITS` order."""
    return {k: values[k] for k in _LIMITS}


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


def _check_has_values(study: optuna.Study, metrics: Mapping[str, str], feas: list[FrozenTrial]) -> None:
    """Each metric (by the flag that asks for it) has a value in some stored feasible trial (``feas``:
    :func:`feasible_trials` of the study), else a one-line error: ``time_to_train_days`` of a study whose
    space sets no ``training.tokens`` is None everywhere, so no budget can make it qualify (and enumerating
    again finds nothing either)."""
    if not feas:
        return  # nothing feasible at all: why_nothing says so
    space = study_info(study).get("space") or {}
    for flag, metric in metrics.items():
        if any(t.user_attrs["metrics"].get(metric) is not None for t in feas):
            continue
        need, _ = METRIC_NEEDS.get(metric, (None, ""))
        section, _, key = (need or "").partition(".")
        if need and key not in (space.get(section) or {}):  # the space lacks what the metric needs
            why = f"its space sets no {need}"
        else:  # e.g. a cost where every feasible trial is on a GPU without a price: say which
            gpus = sorted({str(g) for t in feas if (g := ((t.user_attrs.get("scenario") or {}).get("cluster") or {}).get("gpu"))})
            why = f"none of its {len(feas)} feasible trials stores it" + (
                f"; no price for their GPUs ({', '.join(gpus)})" if metric in PRICED_METRICS and gpus else "")
        raise CosearchError(flag, f"{metric} has no value in study {study.study_name!r} ({why})")


def best(study: optuna.Study, objective: str | None = None, max_cost_usd: float | None = None,
         max_gpus: float | None = None, max_days: float | None = None,
         max_days_high: float | None = None, max_cost_usd_high: float | None = None) -> dict[str, Any] | None:
    """The best feasible stored trial on ``objective`` (default: the study's first) under the
    limits, or None when no stored trial qualifies. Ties go to the cheaper, then smaller, then
    earlier trial. Answered from stored trials only (no model run). ``max_days_high`` and
    ``max_cost_usd_high`` bound the pessimistic time and cost to train (upper end of the 80 % prediction interval); ``step_time_interval_s``
    in the result is that interval of the step time as stored (None for studies made before it)."""
    limits = _limits(locals())
    obj = _check_objective(study, objective)
    for k, v in limits.items():
        if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v < math.inf):
            raise CosearchError(f"--{k.replace('_', '-')}", f"must be a finite positive number (got {v!r})")
    feas = feasible_trials(study)
    _check_has_values(study, {"--objective": obj, **{f"--{k.replace('_', '-')}": _LIMITS[k]
                                                    for k, v in limits.items() if v is not None}}, feas)
    info = study_info(study)
    if info.get("kind") == "exhaustive":
        stored = (info.get("summary") or {}).get("front_metrics") or []
        needed = [obj] + [_LIMITS[k] for k, v in limits.items() if v is not None]
        if not all(m in stored for m in needed):
            # the stored front is exact only over its own metrics: enumerate the space again
            return _best_enumerated(study, info, obj, limits)
    cands = _qualifying(feas, obj, limits)
    if not cands:
        return None
    sign = -1.0 if direction(obj) == "maximize" else 1.0

    def key(t: FrozenTrial) -> tuple:
        m = t.user_attrs["metrics"]
        cost = m.get("cost_to_train_usd")
        return (sign * m[obj], cost if cost is not None else math.inf, m.get("gpus") or math.inf, t.number)

    t = min(cands, key=key)
    return _best_record(study.study_name, t.number, obj, limits, study_info(study)["objectives"],
                        t.user_attrs["scenario"], t.user_attrs["metrics"])


def _best_record(study_name: str, trial: int | None, obj: str, limits: Mapping[str, float | None],
                 objectives: Sequence[str], scenario: Mapping[str, Any], metrics: Mapping[str, Any],
                 **extra: Any) -> dict[str, Any]:
    """The answer of :func:`best`, stored or re-enumerated. Counts (``gpus``, ``dp``, ``plan.tp``,
    ``training.tokens``, ... as for the front table, :func:`_is_count`) holding whole numbers are ints, as the
    Pareto CSV writes them, and yes/no metrics (``valid``, ``fits``, ``feasible``, ... :data:`_FLAGS`) are bools:
    metrics store every value as a float, and ``best --json`` printed ``"gpus": 1024.0`` and ``"fits": 1.0``.
    Copies: the trial's stored attributes are left as they are."""
    metrics = _flags_as_bool(_ints_for_counts(metrics))
    return {"study": study_name, "trial": trial, "objective": obj, "direction": direction(obj),
            "value": metrics[obj],
            "limits": {k: (_whole_as_int(v) if _is_count(k.removeprefix("max_")) else v)
                       for k, v in limits.items() if v is not None},
            "values": {o: metrics.get(o) for o in objectives},  # None: no value
            "step_time_interval_s": _stored_band(metrics, "step_time", "s"),
            "scenario": _ints_for_counts(scenario), "metrics": metrics, **extra}


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
    return _best_record(study.study_name, trial, obj, limits, info["objectives"], rec.user_attrs["scenario"], m,
                        source=f"re-enumerated {counts['points']:,} points (not on the stored front)" if trial is None
                        else f"re-enumerated {counts['points']:,} points")


def _stored_band(m: Mapping[str, Any], key: str, unit: str) -> list[float] | None:
    lo, hi = m.get(f"{key}_low_{unit}"), m.get(f"{key}_high_{unit}")
    return None if lo is None or hi is None else [lo, hi]


def why_nothing(study: optuna.Study, objective: str | None = None, max_cost_usd: float | None = None,
                max_gpus: float | None = None, max_days: float | None = None, max_days_high: float | None = None,
                max_cost_usd_high: float | None = None) -> str:
    """One line saying why :func:`best` found nothing (which limit is out of reach)."""
    limits = _limits(locals())
    info = study_info(study)
    feas = feasible_trials(study)
    n_all = sum(1 for t in study.get_trials(deepcopy=False) if counts_as_trial(t))
    if not feas:
        return f"no feasible configuration in study {study.study_name!r} ({n_all} trials, none feasible)"
    parts = []
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
    if not parts:  # no limit: the objective itself has no finite value
        obj = objective or info["objectives"][0]
        return (f"nothing qualifies in study {study.study_name!r}: none of its {len(feas)} feasible configurations "
                f"has a finite {obj}")
    if enumerate_again:
        s = info.get("summary") or {}
        return (f"nothing qualifies in study {study.study_name!r}: none of the {s.get('feasible', 0):,} feasible points "
                f"of its space meets {' and '.join(parts)}")
    return (f"nothing qualifies in study {study.study_name!r}: none of its {len(feas)} feasible configurations "
            f"meets {' and '.join(parts)}")


#: Metric columns of a front table, after the objectives.
FRONT_COLUMNS = ("step_time_s", "mfu", "memory_gib", "gpus", "time_to_train_days", "cost_to_train_usd", "tokens_per_s",
                 "step_time_low_s", "step_time_high_s", "time_to_train_low_days", "time_to_train_high_days")


#: Front columns that count (GPUs, parallel degrees, batch sizes, tokens, parameters), by last dotted part: the metric
#: ``gpus`` is stored as a float, and a space's ``training.tokens: 3.0e11`` is a float too. GPU inventories
#: (``cluster.inventory.<gpu>``, ``plan.gpus_by_type.<gpu>``) are counts too.
_COUNTS = frozenset(("gpus", "tp", "pp", "dp", "cp", "ep", "etp", "microbatch", "interleave", "global_batch",
                     "zero_group", "gpus_per_node", "nvlink_domain", "leaf_gpus", "num_microbatches", "tokens",
                     "params", "active_params"))
_COUNT_PREFIXES = ("cluster.inventory.", "plan.gpus_by_type.")
#: Metrics that are yes/no (boolean columns of the model), stored as 1.0 / 0.0 like every metric.
_FLAGS = frozenset(("valid", "fits", "feasible", "within_budget", "expansion_fits"))
#: Largest whole number a float column is turned into int64 at (exact in a double, far inside int64).
_EXACT_INT = 2 ** 53


def _is_count(key: str) -> bool:
    """Whether a (dotted) metric or scenario key holds a count (:data:`_COUNTS`, GPU inventories)."""
    return key.rsplit(".", 1)[-1] in _COUNTS or key.startswith(_COUNT_PREFIXES)


def _whole_as_int(v: Any) -> Any:
    """A finite float holding a whole number as an int (64.0 -> 64); anything else as it is."""
    if isinstance(v, (float, np.floating)) and math.isfinite(v) and float(v).is_integer():
        return int(v)
    return v


def _flags_as_bool(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``metrics`` with its yes/no metrics (:data:`_FLAGS`) stored as 1.0 / 0.0 as True / False."""
    return {k: (bool(v) if k in _FLAGS and isinstance(v, (int, float, np.number)) and not isinstance(v, bool)
                and v in (0, 1) else v) for k, v in metrics.items()}


def _ints_for_counts(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A copy of the (nested) mapping ``d`` with its counts (:func:`_is_count` of the dotted key) holding whole
    numbers as ints: the per-record twin of :func:`_counts_as_int`."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out[k] = _ints_for_counts(v, key + ".")
        else:
            out[k] = _whole_as_int(v) if _is_count(key) else v
    return out


def _counts_as_int(df: pd.DataFrame) -> pd.DataFrame:
    """Count columns (:func:`_is_count`) holding whole numbers in every row as integers, so a table or CSV
    shows 64, not 64.0; a column with a missing value stays float."""
    for c in df.columns:
        v = df[c]
        if _is_count(c) and v.dtype.kind == "f" and np.isfinite(v).all() and (v == v.round()).all() \
                and (v.abs() <= _EXACT_INT).all():
            df[c] = v.astype("int64")
    return df


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
    the first objective: ``trial``, the objectives, key metrics, then the scenario (dotted keys); counts
    (``gpus``, ``plan.tp``, ...) as integers.
    An objective without a value (the cost on a GPU without a price) ranks as its worst and shows
    as missing: the fastest plan stays on the front even when its cost is unknown."""
    info = study_info(study)
    objectives, directions = list(info["objectives"]), list(info["directions"])
    feas = feasible_trials(study)
    metric_cols = objectives + [c for c in FRONT_COLUMNS if c not in objectives]
    if not feas:
        return pd.DataFrame(columns=["trial"] + metric_cols)
    pts = np.array([[np.nan if t.user_attrs["metrics"].get(o) is None else t.user_attrs["metrics"][o] for o in objectives]
                    for t in feas], dtype=float)
    mask = pareto_mask(missing_as_worst(pts, directions), directions)
    if not mask.any():
        return pd.DataFrame(columns=["trial"] + metric_cols)
    rows = []
    for t in (t for t, keep in zip(feas, mask) if keep):
        m = t.user_attrs["metrics"]
        row = {"trial": t.number, **{c: m.get(c) for c in metric_cols}}
        sc = dict(t.user_attrs["scenario"])
        if isinstance(sc.get("model"), str):
            row["model"] = sc.pop("model")
        row.update(_flatten(sc))
        rows.append(row)
    df = _counts_as_int(pd.DataFrame(rows))
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
        feas = [t for t in trials if is_feasible_trial(t)]
        bests: dict[str, float | None] = {}
        for o in objectives:
            vals = [t.user_attrs["metrics"].get(o) for t in feas]
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
            "unfinished": _unfinished(info),
        })
    return out
