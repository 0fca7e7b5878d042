"""Transient-server economics: checkpoints, revocations, restarts; expected time and cost, and their spread.

A job needs ``W`` hours of failure-free compute on ``N`` instances. It saves a checkpoint (``delta``
hours) after every ``tau`` hours of compute. Interruptions (spot revocations plus hardware failures)
arrive as a Poisson process at ``lam = N * rate_per_instance`` per hour: a job of N instances is
interrupted N times as often as one instance. An interruption loses the work since the last
checkpoint and costs a restart ``R`` (re-provisioning plus reading the checkpoint back).

* Optimal interval (Young 1974 first order; Daly 2006, FGCS 22(3), the form most cited):
  ``tau = sqrt(2 * delta * M) - delta`` with ``M = 1 / lam`` the job's mean time to interruption
  (``tau = M`` when ``delta >= 2 M``), and never longer than the job itself.
* Expected wall time (Daly 2006 eq. 13, exact for exponential interruptions that can also hit
  checkpoints and restarts): ``T = (W / tau) * exp(lam * R) * (exp(lam * (tau + delta)) - 1) / lam``.
  At ``lam -> 0`` it is ``W + (W / tau) * delta``: the plain time plus the checkpoint overhead.
* Spread: the number of failed segment attempts over ``S = W / tau`` segments is negative-binomial
  (``S`` successes, success probability ``q = exp(-lam (tau + delta))``); each failure loses a
  truncated-exponential amount of work and one restart. ``spread="mc"`` samples that (seeded,
  vectorized over configurations x samples); ``spread="analytic"`` matches a gamma distribution to
  its exact mean and variance (cheap enough for millions of configurations). Both have exactly
  Daly's mean.

Cost = wall time x instances x instance price (every instance is billed for the whole wall time,
restarts included: a slight overestimate, since a revoked instance stops billing until replaced).

All functions take and return numpy arrays (broadcast together); hours unless a name says otherwise.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

#: Bytes per parameter in a training checkpoint with mixed-precision Adam: 16-bit weights (2),
#: fp32 master weights (4), Adam first and second moments (4 + 4). Gradients are not saved.
CHECKPOINT_BYTES_PER_PARAM = 14.0
QUANTILES = (0.1, 0.5, 0.9)


def checkpoint_bytes(params) -> np.ndarray:
    return np.asarray(params, dtype=float) * CHECKPOINT_BYTES_PER_PARAM


def checkpoint_write_s(params, instances, storage_gbps) -> np.ndarray:
    """Seconds to write one checkpoint: model + optimizer state, sharded over all instances, each
    writing its shards at ``storage_gbps`` Gbit/s."""
    bw = np.asarray(instances, dtype=float) * np.asarray(storage_gbps, dtype=float) * 1e9 / 8.0
    return checkpoint_bytes(params) / bw


def optimal_interval(delta_h, mtti_h, method: str = "daly") -> np.ndarray:
    """Checkpoint interval (hours of compute between checkpoints) minimizing expected wall time.

    ``young``: ``sqrt(2 delta M)`` (Young 1974). ``daly``: ``sqrt(2 delta M) - delta`` (Daly 2006,
    first-order form), ``M`` when ``delta >= 2 M``. Infinite where ``M`` is infinite (no interruptions).
    """
    d = np.asarray(delta_h, dtype=float)
    m = np.asarray(mtti_h, dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):
        young = np.sqrt(2.0 * d * m)
        if method == "young":
            return young
        if method != "daly":
            raise ValueError(f"method must be 'young' or 'daly', got {method!r}")
        return np.where(d >= 2.0 * m, m, young - d)


def _expm1_over(x, lam):
    """``expm1(lam * x) / lam``, continuous at ``lam = 0`` (where it is ``x``)."""
    lam = np.asarray(lam, dtype=float)
    safe = np.where(lam > 0, lam, 1.0)
    return np.where(lam > 0, np.expm1(lam * x) / safe, x)


def expected_wall_time(work_h, tau_h, delta_h, restart_h, rate_per_h) -> np.ndarray:
    """Daly's expected wall-clock hours to finish ``work_h`` of compute (see module docstring)."""
    W, tau, d, R, lam = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (work_h, tau_h, delta_h, restart_h, rate_per_h)))
    tau = np.minimum(tau, W)  # one segment at most as long as the job
    segments = W / tau
    with np.errstate(over="ignore", invalid="ignore"):
        return segments * np.exp(lam * R) * _expm1_over(tau + d, lam)


def _truncated_exp_moments(a, lam):
    """Mean and variance of an exponential(lam) conditioned on falling in [0, a] (lost work)."""
    a = np.asarray(a, dtype=float)
    lam = np.asarray(lam, dtype=float)
    x = lam * a
    small = x < 1e-4
    xs = np.where(small, 1.0, x)
    lam_s = np.where(lam > 0, lam, 1.0)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        r = np.exp(-xs) / -np.expm1(-xs)               # e^{-x} / (1 - e^{-x})
        mean = 1.0 / lam_s - a * r
        second = 2.0 / lam_s**2 - (a * a + 2.0 * a / lam_s) * r
        var = np.maximum(second - mean**2, 0.0)
    mean = np.where(small, a / 2.0, mean)
    var = np.where(small, a * a / 12.0, var)
    return mean, var


def _segment_model(work_h, tau_h, delta_h, restart_h, rate_per_h):
    W, tau, d, R, lam = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (work_h, tau_h, delta_h, restart_h, rate_per_h)))
    tau = np.minimum(tau, W)
    a = tau + d
    S = W / tau
    with np.errstate(over="ignore", invalid="ignore"):
        q = np.exp(-lam * a)                           # a segment attempt succeeds
        r_eff = _expm1_over(R, lam)                    # mean restart, restarts can fail too
    lost_mean, lost_var = _truncated_exp_moments(a, lam)
    return S, a, q, r_eff, lost_mean, lost_var


def wall_time_moments(work_h, tau_h, delta_h, restart_h, rate_per_h) -> tuple[np.ndarray, np.ndarray]:
    """Exact mean (Daly's) and variance of the wall time under the segment model."""
    S, a, q, r_eff, lm, lv = _segment_model(work_h, tau_h, delta_h, restart_h, rate_per_h)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        ef = S * (1.0 - q) / q                         # expected failed attempts
        vf = S * (1.0 - q) / q**2
        x = lm + r_eff                                 # time lost per failure
        mean = S * a + ef * x
        var = ef * lv + vf * x * x
    return mean, var


def wall_time_quantiles(work_h, tau_h, delta_h, restart_h, rate_per_h, quantiles: Sequence[float] = QUANTILES,
                        spread: str = "analytic", samples: int = 2000, seed: int = 0) -> dict[float, np.ndarray]:
    """Quantiles of the wall time, ``{q: hours}``. ``analytic``: gamma fit to the exact mean and
    variance of the random part. ``mc``: Monte Carlo over failure counts (seeded)."""
    S, a, q, r_eff, lm, lv = _segment_model(work_h, tau_h, delta_h, restart_h, rate_per_h)
    base = S * a
    if spread == "analytic":
        from scipy import stats

        mean, var = wall_time_moments(work_h, tau_h, delta_h, restart_h, rate_per_h)
        extra = mean - base
        with np.errstate(invalid="ignore", divide="ignore"):
            shape = np.where(var > 0, extra * extra / np.where(var > 0, var, 1.0), np.inf)
            scale = np.where(extra > 0, var / np.where(extra > 0, extra, 1.0), 0.0)
        out = {}
        for qq in quantiles:
            with np.errstate(invalid="ignore"):
                z = stats.gamma.ppf(qq, np.where(np.isfinite(shape), shape, 1.0), scale=scale)
            out[qq] = base + np.where(np.isfinite(shape) & (var > 0), z, extra)
        return out
    if spread != "mc":
        raise ValueError(f"spread must be 'analytic' or 'mc', got {spread!r}")
    rng = np.random.default_rng(seed)
    shp = S.shape
    Sf, qf = S.reshape(-1, 1), q.reshape(-1, 1)
    ok = np.isfinite(Sf) & (Sf > 0) & (qf > 0)
    fails = np.zeros((Sf.shape[0], samples))
    fails_ok = rng.negative_binomial(np.where(ok, Sf, 1.0), np.where(ok, np.clip(qf, 1e-300, 1.0), 1.0), size=fails.shape)
    fails = np.where(ok, fails_ok, np.nan).astype(float)
    lmf, lvf = lm.reshape(-1, 1), lv.reshape(-1, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.where(fails > 0, fails * lmf * lmf / np.where(lvf > 0, lvf, 1.0), 0.0)   # gamma sum of lost work
        theta = np.where(lmf > 0, lvf / np.where(lmf > 0, lmf, 1.0), 0.0)
    lost = np.where((fails > 0) & (lvf > 0), rng.gamma(np.where(k > 0, k, 1.0), np.where(theta > 0, theta, 1.0)), fails * lmf)
    total = base.reshape(-1, 1) + lost + fails * r_eff.reshape(-1, 1)
    return {qq: np.quantile(total, qq, axis=1).reshape(shp) for qq in quantiles}


def transient_metrics(work_h, params, instances, usd_per_instance_hour, rate_per_instance_hour,
                      restart_s, storage_gbps, checkpoint_interval_h=np.nan, *, spread: str = "analytic",
                      quantiles: Sequence[float] = QUANTILES, samples: int = 2000, seed: int = 0,
                      deadline_days: float | None = None) -> dict[str, np.ndarray]:
    """Expected and quantile time and cost to train under interruptions, for arrays of configurations.

    ``work_h``: failure-free compute hours (tokens / throughput). ``params``: model parameters
    (checkpoint size). ``rate_per_instance_hour``: interruptions per instance-hour (spot revocations
    plus hardware failures). ``restart_s``: fixed restart seconds (the checkpoint read is added).
    ``checkpoint_interval_h``: NaN for the optimal (Daly) interval. Returns hours, days and USD.
    """
    W = np.asarray(work_h, dtype=float)
    n = np.asarray(instances, dtype=float)
    lam = n * np.asarray(rate_per_instance_hour, dtype=float)
    delta = checkpoint_write_s(params, n, storage_gbps) / 3600.0
    restart = np.asarray(restart_s, dtype=float) / 3600.0 + delta          # restart + read the checkpoint back
    with np.errstate(divide="ignore"):
        mtti = np.where(lam > 0, 1.0 / np.where(lam > 0, lam, 1.0), np.inf)
    given = np.asarray(checkpoint_interval_h, dtype=float)
    tau = np.where(np.isnan(given), optimal_interval(delta, mtti), given)
    tau = np.minimum(tau, W)
    mean, var = wall_time_moments(W, tau, delta, restart, lam)
    qs = wall_time_quantiles(W, tau, delta, restart, lam, quantiles, spread, samples, seed)
    usd_per_h = n * np.asarray(usd_per_instance_hour, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = {
            "checkpoint_write_s": delta * 3600.0,
            "restart_s": restart * 3600.0,
            "interruptions_per_hour": lam,
            "mtti_h": mtti,
            "checkpoint_interval_h": tau,
            "checkpoints": W / tau,
            "expected_interruptions": lam * mean,
            "ideal_time_to_train_days": W / 24.0,
            "ideal_cost_to_train_usd": W * usd_per_h,
            "expected_time_to_train_days": mean / 24.0,
            "expected_cost_to_train_usd": mean * usd_per_h,
            "std_time_to_train_days": np.sqrt(var) / 24.0,
            "overhead_fraction": mean / W - 1.0,
        }
    for qq, hours in qs.items():
        tag = f"p{int(round(qq * 100))}"
        out[f"{tag}_time_to_train_days"] = hours / 24.0
        out[f"{tag}_cost_to_train_usd"] = hours * usd_per_h
    if deadline_days is not None:
        out["p_meet_deadline"] = prob_within(W, tau, delta, restart, lam, deadline_days * 24.0)
    return out


def prob_within(work_h, tau_h, delta_h, restart_h, rate_per_h, limit_h) -> np.ndarray:
    """P(wall time <= limit_h) under the gamma approximation of the spread."""
    from scipy import stats

    S, a, *_ = _segment_model(work_h, tau_h, delta_h, restart_h, rate_per_h)
    mean, var = wall_time_moments(work_h, tau_h, delta_h, restart_h, rate_per_h)
    base = S * a
    extra = mean - base
    with np.errstate(invalid="ignore", divide="ignore"):
        shape = extra * extra / var
        scale = var / extra
        p = stats.gamma.cdf(np.asarray(limit_h) - base, np.where(var > 0, shape, 1.0), scale=np.where(var > 0, scale, 1.0))
    return np.where(var > 0, p, (mean <= np.asarray(limit_h)).astype(float))
