"""``estimate``: one scenario in, the full prediction out (the same numbers as the vectorized path)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import hardware
from ._numbers import kind_of
from .errors import CosearchError
from .inventory import inventory_outputs
from .model import BREAKDOWN_KEYS, MEMORY_KEYS, Profile
from .model.evaluate import evaluate_scalar_columns
from .model.feasibility import check_scalar
from .model.columns import scalar_columns
from .model.interval import interval_coverage
from .model.profile import DEFAULT_PROFILE
from .notebook import Estimate  # a dict that renders as a table in Jupyter
from .scenario import Scenario, load_scenario, scenario_columns


def _num(x: Any) -> float | bool | None:
    if type(x) is float:
        return None if x != x else x
    if type(x) is bool:
        return x
    v = np.asarray(x).reshape(-1)[0]
    if v.dtype == bool:
        return bool(v)
    v = float(v)
    return None if math.isnan(v) else v


def _band(value: float | None, ends: dict[str, float | None], step: float | None) -> list[float] | None:
    """``value`` scaled by the step-time band's ends (``ends``: the band's step times), or None."""
    if value is None or not step or ends["low"] is None or ends["high"] is None:
        return None
    return [value * ends["low"] / step, value * ends["high"] / step]


def _deeppool(sc: Scenario, cols: dict, out: dict, profile: Profile) -> dict[str, Any]:
    """Burst schedule (runs of blocks on one data-parallel width, then the head) and multiplexing."""
    from .model.evaluate import burst_schedule

    pl = sc.plan
    runs: list[dict[str, Any]] = []
    if pl.burst:
        widths = burst_schedule(cols, profile)
        first = 1
        for i, w in enumerate(widths):
            head = i == len(widths) - 1
            last = sc.model.layers if i == len(widths) - 2 else min(first + pl.burst_block_layers - 1, sc.model.layers)
            if not head and runs and runs[-1]["dp"] == w and "layers" in runs[-1]:
                runs[-1]["layers"][1] = last
            else:
                runs.append({"head": "logits", "dp": int(w)} if head else {"layers": [first, last], "dp": int(w)})
            first = last + 1
    uniform = _num(out["uniform_step_time_s"])
    step = _num(out["step_time_s"])
    return {
        "burst": bool(pl.burst), "multiplex": bool(pl.multiplex), "schedule": runs,
        "uniform_step_time_s": uniform, "burst_speedup": uniform / step if uniform and step else None,
        "burst_min_dp": _num(out["burst_min_dp"]), "idle_gpu_s": _num(out["idle_gpu_s"]),
        "background_tokens_per_s": _num(out["background_tokens_per_s"]),
        "total_tokens_per_s": _num(out["total_tokens_per_s"]),
        "interference": pl.multiplex_interference,
    }


def _burst_columns(sc: Scenario) -> dict[str, float]:
    """The model columns of an inventory plan that uses one GPU type, as the ordinary scenario of that type
    (:func:`cosearch.inventory.homogeneous_scenario`): what the burst schedule needs, since ``estimate`` keeps
    only ``dp`` of an inventory's columns. Only such plans reach the DeepPool hook (several types refuse burst
    and multiplexing)."""
    from .inventory import homogeneous_scenario

    return scalar_columns(scenario_columns(homogeneous_scenario(sc)))


def check_profile(profile: Any) -> Profile:
    """``profile`` as the public functions take it: a :class:`Profile`, or None for the shipped one.
    Anything else (a name, a dict, a file path) is a one-line error naming ``profile`` here rather
    than an AttributeError deep in the model."""
    if profile is None:
        return DEFAULT_PROFILE
    if not isinstance(profile, Profile):
        raise CosearchError("profile", f"expected a cosearch.Profile or None (got {kind_of(profile)}); "
                            "from a profile file: cosearch.calibration.read_profile_file(path)[0]")
    return profile


def estimate(scenario: Any, profile: Profile | None = None, *, calibrated_range: Any = None) -> dict[str, Any]:
    """Predict step time, throughput, memory and cost of one scenario (path, dict or Scenario).

    Raises :class:`cosearch.errors.CosearchError` with a one-line message for bad input,
    including plans that break a divisibility rule. ``calibrated_range`` (from a calibrated profile
    file, :func:`cosearch.calibration.read_profile_file`) adds a warning to ``warnings`` when the
    scenario lies outside what the profile was fitted on. ``step_time_interval_s`` (and
    ``time_to_train_interval_days``, ``cost_to_train_interval_usd``, each also as ``*_low_*`` and
    ``*_high_*``) is the 80 % prediction interval of the shipped band (cosearch.model.interval;
    None without one). With a ``cloud`` section,
    ``time_to_train_days``/``cost_to_train_usd`` are expected values under interruptions and
    ``cloud`` holds the transient-server economics (docs/cloud.md).
    """
    profile = check_profile(profile)
    sc: Scenario = load_scenario(scenario)
    by_type: dict[str, Any] = {}
    if sc.cluster.inventory is not None:  # hook: several GPU types (cosearch.inventory, cosearch.model.hetero)
        out, by_type = inventory_outputs(sc, profile)
        cols = {"dp": out["dp"]}
    else:
        cols = scalar_columns(scenario_columns(sc))
        out = evaluate_scalar_columns(cols, profile)
        if not out["valid"]:
            check_scalar(cols)  # the first rule the plan breaks, as a one-line error
    result: dict[str, Any] = {
        key: _num(out[key])
        for key in (
            "step_time_s", "tokens_per_s", "model_tflops_per_gpu", "hardware_tflops_per_gpu", "mfu",
            "memory_gib", "usable_memory_gib", "fits", "cost_usd_per_step", "time_to_train_days",
            "cost_to_train_usd", "energy_to_train_mwh", "num_microbatches", "params",
            "time_to_accuracy_days", "cost_to_accuracy_usd", "steps_to_target", "tokens_to_target",
            "statistical_efficiency", "expansion_used_gib", "expansion_fits", "idle_share",
            "active_params", "total_param_tflops_per_gpu",  # issue 13: MoE active vs total
        )
    }
    result["gpus"] = sc.cluster.gpus if not by_type else sum(by_type["gpus_by_type"].values())
    result.update(by_type)
    result["dp"] = int(cols["dp"])
    result["breakdown_s"] = {k: _num(out[f"time_{k}_s"]) for k in BREAKDOWN_KEYS}
    result["memory_breakdown_gib"] = {k: _num(out[f"mem_{k}_gib"]) for k in MEMORY_KEYS}
    result["scenario"] = sc.model_dump(mode="json")
    # --- hooks: cloud economics (cosearch.cloud) and calibrated-range warnings (cosearch.calibration)
    if sc.cloud is not None and result["time_to_train_days"] is not None:
        from .cloud.provision import cloud_estimate

        result["cloud"] = cloud_estimate(sc.cloud, out)
        result["time_to_train_days"] = result["cloud"]["expected_time_to_train_days"]
        result["cost_to_train_usd"] = result["cloud"]["expected_cost_to_train_usd"]
    elif sc.cloud is not None:
        result["cloud"] = None
    # --- the 80 % prediction interval (cosearch.model.interval): [low, high], None without a band
    ratio = {end: _num(out[f"step_time_{end}_s"]) for end in ("low", "high")}
    step = result["step_time_s"]
    result["interval_coverage"] = _num(interval_coverage())
    result["step_time_interval_s"] = _band(step, ratio, step)
    result["time_to_train_interval_days"] = _band(result["time_to_train_days"], ratio, step)
    result["cost_to_train_interval_usd"] = _band(result["cost_to_train_usd"], ratio, step)
    for key, band in (("step_time", "step_time_interval_s"), ("time_to_train", "time_to_train_interval_days"),
                      ("cost_to_train", "cost_to_train_interval_usd")):
        unit = band.rsplit("_", 1)[1]
        result[f"{key}_low_{unit}"], result[f"{key}_high_{unit}"] = result[band] or (None, None)
    if "total_tokens_per_s" in out:  # hook: DeepPool burst parallelism / multiplexing (cosearch.model.burst)
        result["deeppool"] = _deeppool(sc, _burst_columns(sc) if by_type else cols, out, profile)
    result["warnings"] = []
    if calibrated_range is not None:
        from .calibration import range_warnings

        if by_type:  # each type in use, as one cluster of that type with the job's GPU count
            stand_ins = [sc.model_copy(update={"cluster": sc.cluster.model_copy(update={"gpu": g, "gpus": result["gpus"]})})
                         for g, n in by_type["gpus_by_type"].items() if n]
            result["warnings"] = list(dict.fromkeys(w for s in stand_ins for w in range_warnings(calibrated_range, s, result["params"])))
        else:
            result["warnings"] = range_warnings(calibrated_range, sc, result["params"])
    for gpu in sc.cluster.inventory or [sc.cluster.gpu]:
        for assumed in (hardware.efficiency_warning(gpu),
                        hardware.fp8_efficiency_warning(gpu, sc.training.precision, profile.fp8_matmul_relative),
                        hardware.attention_warning(gpu, sc.training.attention)):
            if assumed:  # catalog efficiency not measured on this GPU
                result["warnings"].append(assumed)
    hidden_warning = _hidden_reduction_warning(_num(out["dp_reduce_hidden_s"]), step)
    if hidden_warning:
        result["warnings"].append(hidden_warning)
    dropping = _dropping_warning(sc.plan.capacity_factor if sc.model.experts else None)
    if dropping:
        result["warnings"].append(dropping)
    return Estimate(result)


def _dropping_warning(capacity_factor: float | None) -> str | None:
    """A warning when the expert capacity is below the mean load: then even perfectly balanced routing drops
    tokens, and the step is faster for computing fewer of them (the quality cost is not modelled)."""
    if capacity_factor is None or capacity_factor >= 1.0:
        return None
    return (f"plan.capacity_factor {capacity_factor:g} < 1: each expert keeps at most {capacity_factor:g}x the mean "
            f"load, so at least {100 * (1 - capacity_factor):.0f} % of the token copies are dropped even with balanced "
            "routing; the step time counts only the kept ones (the quality cost is not modelled)")


#: Share of the step above which a gradient reduction the model hides under the backward pass is worth a warning.
HIDDEN_REDUCTION_WARN_SHARE = 0.10


def _hidden_reduction_warning(hidden_s: float | None, step_s: float | None) -> str | None:
    """A warning when ``plan.overlap_grad_reduce`` hides a data-parallel gradient reduction worth at least
    :data:`HIDDEN_REDUCTION_WARN_SHARE` of the step: MaxText across GCP A3 VMs measured that reduction exposed
    (README, "Held-out JAX runs"), so the plan's step may be up to ``hidden_s`` longer."""
    if not hidden_s or not step_s or hidden_s < HIDDEN_REDUCTION_WARN_SHARE * step_s:
        return None
    return (f"plan.overlap_grad_reduce hides the data-parallel gradient reduction ({hidden_s:.3g} s, "
            f"{100 * hidden_s / step_s:.0f} % of the step) under the backward pass; MaxText across GCP A3 VMs measured "
            f"it exposed (README, Held-out JAX runs): with plan.overlap_grad_reduce false the step is "
            f"{step_s + hidden_s:.3g} s")
