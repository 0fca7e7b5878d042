"""From one step time to the run: throughput, time, cost and energy to train, to a target loss, and
their 80 % prediction band. One formula for the homogeneous model (:mod:`.evaluate`) and the
mixed-type compositions (:mod:`.hetero`)."""
from __future__ import annotations

from . import _ops as ops
from .interval import interval_factors
from .statistical import statistical_efficiency, steps_to_target, tokens_to_target

SECONDS_PER_DAY = 86400.0


def training_metrics(step_s, tokens_step, usd_per_hour, watts, tokens, target_tokens, critical_batch_tokens, moe=False):
    """Metrics of training at ``step_s`` per step of ``tokens_step`` tokens on GPUs that cost
    ``usd_per_hour`` and draw ``watts`` in all; ``tokens`` to train, ``target_tokens`` /
    ``critical_batch_tokens`` for time to a target (:mod:`.statistical`); ``moe``: rows whose model has
    routed experts, which take the MoE runs' band."""
    train_s = tokens / tokens_step * step_s
    target_steps = steps_to_target(target_tokens, critical_batch_tokens, tokens_step)
    accuracy_s = target_steps * step_s
    band_low, band_high = interval_factors()  # 80 % prediction interval (cosearch.model.interval)
    if ops.any(moe):
        moe_low, moe_high = interval_factors(moe=True)
        band_low, band_high = ops.where(moe, moe_low, band_low), ops.where(moe, moe_high, band_high)
    train_days, train_usd = train_s / SECONDS_PER_DAY, usd_per_hour * train_s / 3600.0
    return {
        "tokens_per_s": tokens_step / step_s,
        "cost_usd_per_step": usd_per_hour * step_s / 3600.0,
        "time_to_train_days": train_days,
        "cost_to_train_usd": train_usd,
        "energy_to_train_mwh": watts * train_s / 3.6e9,
        "steps_to_target": target_steps,
        "tokens_to_target": tokens_to_target(target_tokens, critical_batch_tokens, tokens_step),
        "statistical_efficiency": statistical_efficiency(critical_batch_tokens, tokens_step),
        "time_to_accuracy_days": accuracy_s / SECONDS_PER_DAY,
        "cost_to_accuracy_usd": usd_per_hour * accuracy_s / 3600.0,
        "step_time_low_s": step_s * band_low,
        "step_time_high_s": step_s * band_high,
        "time_to_train_low_days": train_days * band_low,
        "time_to_train_high_days": train_days * band_high,
        "cost_to_train_low_usd": train_usd * band_low,
        "cost_to_train_high_usd": train_usd * band_high,
    }
