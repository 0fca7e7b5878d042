"""Fit the model's global efficiency constants to measured step times (scipy least_squares).

The fit adjusts a few :class:`~cosearch.model.profile.Profile` fields shared by every run (never one
constant per run) to minimize a robust loss on log(predicted / measured) step time. Cross-validation
holds out whole groups (a source, or folds) to tell how well the fitted profile predicts runs it
has not seen.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.optimize import least_squares

from .model.profile import Profile
from .validation import Candidates, predict

log = logging.getLogger(__name__)

def _matmul_scale_max() -> float:
    """Largest ``matmul_scale`` that keeps every GPU's sustained GEMM efficiency
    (``matmul_efficiency x matmul_scale``) at or below its measured large-GEMM fraction of peak.
    ``matmul_efficiency`` is that fraction x REFERENCE_FIT_ETA / reference fraction for every GPU
    and precision (cosearch.hardware.matmul_eta), so the bound is the same ratio for all of them."""
    from .hardware import REFERENCE_FIT_ETA, _reference_fraction, catalog

    return _reference_fraction(catalog()) / REFERENCE_FIT_ETA


#: Profile fields that calibration may fit, with physical bounds (a fit stops at a bound rather
#: than extrapolate: a few rows can otherwise push a constant past what the hardware can do).
FITTABLE: dict[str, tuple[float, float]] = {
    # Sustained GEMMs cannot beat the best measured large GEMM of the GPU (upper bound, about 1.13:
    # 0.80 / 0.707, see _matmul_scale_max); below 0.3 of it the gap is not a GEMM efficiency but
    # something the model does not represent (host stalls, a broken run), which a scale must not absorb.
    "matmul_scale": (0.3, _matmul_scale_max()),
    # Attention cannot run faster than a large GEMM of the same FLOPs (FlashAttention-3 on H100: ~0.75
    # of peak vs 0.80 for GEMMs, i.e. ~0.94 relative); 0.1: the slowest fused kernels measured (FA1 in Triton).
    "flash_attention_relative": (0.1, 1.0),
    # Memory-bound kernels: device-to-device copies reach 0.82-0.89 of the datasheet HBM rate on
    # H100/H200 (Profile.hbm_efficiency), STREAM-like kernels at most ~0.93; 0.95 leaves margin.
    "hbm_efficiency": (0.2, 0.95),
    # NCCL bus bandwidth over NVLink: ~0.77-0.82 of the per-direction link rate (nccl-tests on DGX
    # A100/H100); protocol and packet headers keep it below ~0.9.
    "nvlink_efficiency": (0.2, 0.9),
    # NCCL over InfiniBand/RoCE reaches 0.85-0.96 of line rate (nccl-tests issues #119, #175); the
    # wire encoding and headers keep it below ~0.97.
    "network_efficiency": (0.1, 0.97),
    # Overlaps are fractions of the communication hidden behind compute: 0 (none) to 1 (all).
    "dp_overlap": (0.0, 1.0),
    "fsdp_overlap": (0.0, 1.0),
    "tp_overlap": (0.0, 1.0),
    # Per-GEMM fixed time: a kernel launch costs at least ~2 us on any CUDA GPU; the H100 fit gives
    # 19 us (experiments/fit_gemm.py); 100 us (5x that) is beyond any measured GEMM pipeline fill.
    "gemm_overhead_s": (2e-6, 1e-4),
}
DEFAULT_FIT = ("matmul_scale", "flash_attention_relative")


@dataclass
class FitResult:
    profile: Profile
    log_errors: np.ndarray  # per row, log(pred / measured), on the rows it was fitted to

    @property
    def abs_errors(self) -> np.ndarray:
        return np.abs(np.expm1(self.log_errors))


def _subset(c: Candidates, row_mask: np.ndarray) -> Candidates:
    keep_rows = np.flatnonzero(row_mask)
    remap = -np.ones(len(c.rows), dtype=int)
    remap[keep_rows] = np.arange(len(keep_rows))
    cand_mask = row_mask[c.row_of]
    cols = {k: v[cand_mask] for k, v in c.columns.items()}
    scen = [s for s, m in zip(c.scenarios, cand_mask) if m]
    return Candidates(c.rows.iloc[keep_rows].reset_index(drop=True), cols, remap[c.row_of[cand_mask]], scen)


def log_errors(c: Candidates, profile: Profile) -> np.ndarray:
    pred, _ = predict(c, profile)
    return np.log(pred / c.rows["measured_step_s"].to_numpy())


def fit_profile(c: Candidates, params: Sequence[str] = DEFAULT_FIT, base: Profile | None = None,
                multistart: bool = False) -> FitResult:
    """Least-squares fit of ``params`` (soft-L1 loss on log error, so a few outliers cannot dominate).

    ``multistart`` also starts from the middle of every parameter's bounds and keeps the better
    fit: overlap parameters have flat regions (fully hidden communication) where a single start
    from the base profile can stall.
    """
    base = base or Profile()
    for p in params:
        if p not in FITTABLE:
            raise ValueError(f"cannot fit {p!r}; fittable: {', '.join(FITTABLE)}")
    lo = np.array([FITTABLE[p][0] for p in params])
    hi = np.array([FITTABLE[p][1] for p in params])
    x0 = np.clip([getattr(base, p) for p in params], lo, hi)
    scale = np.where(hi > 1e-2, 1.0, hi)  # let scipy see gemm_overhead_s on an O(1) scale

    def residuals(x: np.ndarray) -> np.ndarray:
        return log_errors(c, base.model_copy(update=dict(zip(params, x * scale))))

    res = least_squares(residuals, x0 / scale, bounds=(lo / scale, hi / scale), loss="soft_l1", f_scale=0.1)
    if multistart:
        mid = least_squares(residuals, 0.5 * (lo + hi) / scale, bounds=(lo / scale, hi / scale), loss="soft_l1", f_scale=0.1)
        res = mid if mid.cost < res.cost else res
    prof = base.model_copy(update={p: float(v) for p, v in zip(params, res.x * scale)})
    log.info("fitted %s", {p: getattr(prof, p) for p in params})
    return FitResult(prof, res.fun)


def cross_validate(c: Candidates, groups: np.ndarray, params: Sequence[str] = DEFAULT_FIT, base: Profile | None = None,
                   multistart: bool = False, configs: np.ndarray | None = None,
                   held: np.ndarray | None = None) -> np.ndarray:
    """Held-out log errors: each group's rows predicted by a profile fitted on all other groups.

    ``configs`` (:func:`configuration_ids`): a row of another group that repeats a configuration of the
    held-out group is left out of that group's fit too; otherwise the fit would have seen the held-out
    configuration (groups by source can split the copies of one configuration). ``held``: a mask of the rows
    that are held out, group by group (default all); the others are in every fit and their entries stay NaN
    (e.g. the dense rows while MoE models are held out one at a time)."""
    groups = np.asarray(groups)
    held = np.ones(len(c.rows), dtype=bool) if held is None else np.asarray(held, dtype=bool)
    out = np.full(len(c.rows), np.nan)
    for g in np.unique(groups[held]):
        test = (groups == g) & held
        train = ~test if configs is None else ~np.isin(configs, configs[test])
        if not train.any():
            continue
        fit = fit_profile(_subset(c, train), params, base, multistart)
        out[test] = log_errors(_subset(c, test), fit.profile)
    return out


def configuration_ids(c: Candidates) -> np.ndarray:
    """One id per row (0, 1, ... in order of first appearance); rows whose candidates have identical model
    columns share it. Such rows are repeated measurements of one configuration: the model predicts the same
    step time for each whatever the profile, so a held-out row must not have a copy in the fit."""
    cols = np.column_stack([np.broadcast_to(c.columns[k], c.row_of.shape) for k in sorted(c.columns)])
    cols = np.ascontiguousarray(cols, dtype=float)
    as_bytes = cols.view(np.dtype((np.void, cols.dtype.itemsize * cols.shape[1]))).ravel()  # NaN == NaN by bits
    cand = np.unique(as_bytes, return_inverse=True)[1].ravel()
    per_row: dict[int, set[int]] = {}
    for row, cid in zip(c.row_of.tolist(), cand.tolist()):
        per_row.setdefault(row, set()).add(cid)
    first: dict[tuple[int, ...], int] = {}
    return np.array([first.setdefault(tuple(sorted(per_row[r])), len(first)) for r in range(len(c.rows))], dtype=int)


# --- calibrated profiles as files, with the range they were fitted on (cosearch calibrate) -------

from pathlib import Path  # noqa: E402
from typing import Any, Mapping, Optional  # noqa: E402

from pydantic import BaseModel, ConfigDict  # noqa: E402

from ._files import write_output  # noqa: E402
from ._numbers import Float, Int  # noqa: E402
from .errors import CosearchError  # noqa: E402


class CalibratedRange(BaseModel):
    """What a profile was fitted on; predictions outside it are extrapolations."""

    model_config = ConfigDict(extra="forbid")

    rows: Int
    gpu_types: list[str]
    params_b: tuple[Float, Float]
    gpus: tuple[Int, Int]
    seq_len: tuple[Int, Int]


def calibrated_range(c: Candidates) -> CalibratedRange:
    """GPU types, model sizes, GPU counts and sequence lengths covered by ``c``."""
    from .model.flops import total_params

    col = c.columns
    params = total_params(col["layers"], col["hidden"], col["heads"], col["kv_heads"], col["ffn_hidden"],
                          col["gated_mlp"], col["vocab"], col["tied_embeddings"]) / 1e9
    return CalibratedRange(
        rows=len(c.rows),
        gpu_types=sorted({s["cluster"]["gpu"] for s in c.scenarios}),
        params_b=(round(float(params.min()), 3), round(float(params.max()), 3)),
        gpus=(int(col["gpus"].min()), int(col["gpus"].max())),
        seq_len=(int(col["seq_len"].min()), int(col["seq_len"].max())),
    )


def range_warnings(rng: CalibratedRange | Mapping[str, Any], scenario: Any, params: float | None = None,
                   log: bool = True) -> list[str]:
    """One message per way ``scenario`` leaves the calibrated range (also logged as warnings unless ``log`` is False)."""
    rng = rng if isinstance(rng, CalibratedRange) else CalibratedRange.model_validate(rng)
    cl, m = scenario.cluster, scenario.model
    out = []
    if cl.gpu not in rng.gpu_types:
        out.append(f"cluster.gpu {cl.gpu} is outside the calibrated range (profile fitted on {', '.join(rng.gpu_types)})")
    if params is not None:
        pb = params / 1e9
        lo, hi = rng.params_b
        if not lo <= pb <= hi:
            out.append(f"model size {pb:.3g}B parameters is outside the calibrated range {lo:g}-{hi:g}B")
    lo, hi = rng.gpus
    if not lo <= cl.gpus <= hi:
        out.append(f"cluster.gpus {cl.gpus} is outside the calibrated range {lo}-{hi}")
    lo, hi = rng.seq_len
    if not lo <= m.seq_len <= hi:
        out.append(f"model.seq_len {m.seq_len} is outside the calibrated range {lo}-{hi}")
    for msg in out if log else ():
        logging.getLogger("cosearch.estimate").warning("extrapolating: %s", msg)
    return out


#: Upper bounds of the profile constants that the model declares without one (seconds, GiB).
PROFILE_MAX = {"gemm_overhead_s": 1.0, "nvlink_latency_s": 1.0, "network_latency_s": 1.0, "hbm_reserved_gib": 1024.0}


def _check_profile_numbers(fields: Mapping[str, Any], path: str) -> None:
    """Every constant a finite number (not a boolean or text) within :data:`PROFILE_MAX`."""
    from pydantic import TypeAdapter, ValidationError

    number = TypeAdapter(Float)
    for key, value in fields.items():
        if key not in Profile.model_fields:
            continue  # read_profile_file names the unknown key
        try:
            value = number.validate_python(value)
        except ValidationError as err:
            raise CosearchError(f"{path}:{key}", f"{err.errors()[0]['msg']} (got {str(value)[:40]})") from None
        if key in PROFILE_MAX and not value <= PROFILE_MAX[key]:
            raise CosearchError(f"{path}:{key}", f"out of range (got {value:g}; allowed: 0 <= x <= {PROFILE_MAX[key]:g})")


def read_profile_file(path: str | Path) -> tuple[Profile, Optional[CalibratedRange]]:
    """A profile YAML (``profile:`` section, or the bare fields) and its ``calibrated_range`` if any. Fields it does
    not give keep the shipped profile's values (``DEFAULT_PROFILE``), as when no ``--profile`` is given: a file
    giving only ``matmul_scale`` changes only that (it used to reset the rest to the unfitted kernel constants, 7 %
    off); a file giving none is refused."""
    from .scenario import read_yaml

    data = read_yaml(path) or {}
    if not isinstance(data, Mapping):
        raise CosearchError(str(path), "a profile file is a mapping with a 'profile' section")
    fields = data.get("profile", data)
    if fields is data:
        fields = {k: v for k, v in data.items() if k not in ("calibrated_range", "fit_report", "fitted")}
    if not isinstance(fields, Mapping):
        raise CosearchError(f"{path}:profile", "must be a mapping of profile constants")
    _check_profile_numbers(fields, str(path))
    allowed = ", ".join(Profile.model_fields)
    if not fields:
        raise CosearchError(str(path), f"no profile constants given; allowed: {allowed}")
    unknown = [k for k in fields if k not in Profile.model_fields]
    if unknown:
        raise CosearchError(f"{path}:{unknown[0]}", f"not a profile constant; allowed: {allowed}")
    from .model.profile import DEFAULT_PROFILE

    try:
        prof = Profile.model_validate({**DEFAULT_PROFILE.model_dump(), **fields})
    except Exception as err:  # pydantic ValidationError
        first = err.errors()[0] if hasattr(err, "errors") else {"loc": (), "msg": str(err)}
        raise CosearchError(f"{path}:{'.'.join(map(str, first['loc']))}", first["msg"]) from None
    rng = data.get("calibrated_range")
    try:
        return prof, (CalibratedRange.model_validate(rng) if rng is not None else None)
    except Exception as err:  # pydantic ValidationError: name the field
        first = err.errors()[0] if hasattr(err, "errors") else {"loc": (), "msg": str(err).splitlines()[0]}
        where = ".".join(["calibrated_range", *map(str, first["loc"])])
        raise CosearchError(f"{path}:{where}", f"{first['msg']} (fields: rows, gpu_types, params_b, gpus, seq_len)") from None


def error_stats(log_err: np.ndarray) -> dict[str, float]:
    """Median, P90 and worst absolute relative error of log(pred/measured) errors."""
    e = np.abs(np.expm1(log_err[np.isfinite(log_err)]))
    if e.size == 0:
        return {"median": float("nan"), "p90": float("nan"), "worst": float("nan"), "rows": 0}
    return {"median": float(np.median(e)), "p90": float(np.quantile(e, 0.9)), "worst": float(e.max()), "rows": int(e.size)}


def kfold_groups(configs: np.ndarray, k: int, seed: int = 0) -> np.ndarray:
    """Fold label per row: the distinct configurations (:func:`configuration_ids`) dealt by a seeded
    permutation into ``min(k, configurations)`` near-equal folds, every row of a configuration in its fold
    (a copy of a held-out configuration in the fit would make the held-out error an in-sample one)."""
    d = int(configs.max()) + 1
    k = max(2, min(k, d))
    perm = np.random.default_rng(seed).permutation(d)
    fold_of = np.empty(d, dtype=int)
    fold_of[perm] = np.arange(d) % k
    return fold_of[configs]


def check_enough_configurations(d: int, n_params: int, folds: int, source: str = "measured") -> None:
    """Refuse unless every fit of the cross-validation sees at least as many distinct configurations as it
    fits parameters. Rule: with ``k = min(folds, d)`` folds over ``d`` configurations the largest fold holds
    ceil(d / k), so the smallest fit sees ``d - ceil(d / k)``; it must be >= ``n_params``, which needs
    ``d >= n_params + 1`` (leave one configuration out). Fewer and a fit is not determined by its rows, so its
    held-out error says nothing about the profile that is written (a 2-parameter fit from one point)."""
    k = max(2, min(folds, d))
    if d - -(-d // k) >= n_params:
        return
    what = (f"{d} distinct configuration{'s' * (d != 1)} (rows with identical scenario inputs are repeated measurements "
            f"of one) cannot fit {n_params} parameter{'s' * (n_params != 1)} and hold some out: each fit of the "
            f"{k}-fold cross-validation must see at least {n_params}")
    if d < n_params + 1:
        raise CosearchError(source, f"{what}; measure at least {n_params + 1} distinct configurations or fit fewer parameters")
    need = next(j for j in range(k + 1, d + 1) if d - -(-d // j) >= n_params)
    raise CosearchError(source, f"{what}; use at least {need} folds, more configurations or fewer parameters")


def calibrate(c: Candidates, params: Sequence[str] = DEFAULT_FIT, base: Profile | None = None, folds: int = 5,
              seed: int = 0, by_source: bool = False, source: str = "measured") -> tuple[FitResult, dict[str, Any]]:
    """Fit ``params`` on every row and report held-out errors before and after calibration.

    before: the base profile's errors (nothing is fitted, so every row is unseen by it, unless the
    base itself was fitted on these rows). after: ``folds``-fold cross-validation (each fold
    predicted by a profile fitted on the other folds; folds are formed by distinct configuration, see
    :func:`kfold_groups`). ``by_source`` adds leave-one-source-out. ``source`` (the CSV) names the input in
    the refusal of :func:`check_enough_configurations`.
    """
    base = base or Profile()
    n = len(c.rows)
    configs = configuration_ids(c)
    distinct = int(configs.max()) + 1 if n else 0
    check_enough_configurations(distinct, len(params), folds, source)
    fit = fit_profile(c, params, base, multistart=True)
    groups = kfold_groups(configs, folds, seed)
    report: dict[str, Any] = {
        "rows": n,
        "configurations": distinct,
        "params": list(params),
        "fitted": {p: float(getattr(fit.profile, p)) for p in params},
        "base": {p: float(getattr(base, p)) for p in params},
        "folds": int(groups.max() + 1),
        "before": error_stats(log_errors(c, base)),
        "after_in_sample": error_stats(fit.log_errors),
        "after_held_out": error_stats(cross_validate(c, groups, params, base, multistart=True, configs=configs)),
    }
    report["at_bound"] = [p for p in params if min(abs(report["fitted"][p] - b) for b in FITTABLE[p])
                          <= 1e-6 * max(1.0, *map(abs, FITTABLE[p]))]
    before, held = report["before"], report["after_held_out"]
    worse = [k for k in ("median", "p90") if held[k] > before[k]]
    report["worse_than_base"] = bool(worse)
    if worse:
        report["worse_than_base_note"] = (
            "held-out error after fitting is worse than the base profile's ("
            + ", ".join(f"{k} {100 * held[k]:.1f} % vs {100 * before[k]:.1f} %" for k in worse) + ")")
    if by_source and "source_id" in c.rows and c.rows["source_id"].nunique() > 1:
        report["after_leave_one_source_out"] = error_stats(cross_validate(c, c.rows["source_id"].to_numpy(), params, base,
                                                                           multistart=True, configs=configs))
    return fit, report


def write_profile_file(path: str | Path, fit: FitResult, rng: CalibratedRange, report: Mapping[str, Any], header: str = "") -> None:
    import yaml

    doc = {
        "profile": fit.profile.model_dump(),
        "fitted": list(report.get("params", [])),
        "calibrated_range": {**rng.model_dump(), "params_b": list(rng.params_b), "gpus": list(rng.gpus), "seq_len": list(rng.seq_len)},
        "fit_report": dict(report),
    }
    text = "".join(f"# {line}\n" for line in header.splitlines()) + yaml.safe_dump(doc, sort_keys=False)
    write_output("--out", path, lambda p: Path(p).write_text(text))
