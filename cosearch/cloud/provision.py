"""The ``cloud`` section of a scenario, and the vectorized bridge between instance types and the model.

A scenario with a ``cloud`` section rents ``instances`` x one catalog instance type; the cluster
(GPU id, GPU count, GPUs per node, NVLink domain, network per GPU, price per GPU-hour) is derived
from the instance type, so cost is instances x instance price x hours::

    cloud:
      provider: aws
      instance: p5.48xlarge       # or instance: aws/p5.48xlarge
      instances: 32
      pricing: spot               # on_demand | spot
      region: us-east-1           # optional; default the catalog's first region
      checkpoint_interval_h: 2.0  # optional; default the optimal (Young/Daly) interval
      revocation_per_hour: 0.01   # optional; spot revocations per instance-hour (catalog default)
      failure_per_hour: 1.6e-4    # optional; hardware failures per instance-hour (catalog default)
      restart_s: 600              # optional; seconds to restart after an interruption
      storage_gbps: 10            # optional; checkpoint write/read Gbit/s per instance
      catalog: my_prices.yaml     # optional; extra catalog YAML (negotiated prices)

For search, :func:`evaluate_cloud` takes numeric columns (instance codes from
:func:`instance_codes`, ``instances``, ``spot`` 0/1, ...) for millions of configurations at once.
"""
from __future__ import annotations

import math
from typing import Any, Literal, Mapping, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .. import hardware
from .._numbers import Float, Int
from ..errors import CosearchError
from .catalog import Catalog, InstanceType, load_catalog
from .transient import QUANTILES, transient_metrics

PRICING = ("on_demand", "spot")
#: Cluster fields the instance type decides (a scenario may repeat them only with the same value).
DERIVED_CLUSTER_FIELDS = ("gpu", "gpus", "gpus_per_node", "nvlink_domain", "network_gbps", "price_usd_per_gpu_hour")
#: Model input columns the instance type decides (:func:`instance_columns`; :func:`evaluate_cloud` refuses
#: them from the caller, whose columns also drop the derived ``dp``).
INSTANCE_COLUMNS = ("gpus", "gpus_per_node", "nvlink_domain", "network_gbps", "price_usd_per_gpu_hour", "peak_tflops",
                    *hardware.EFFICIENCY_COLUMNS, "hbm_gib", "hbm_tbps", "nvlink_gbps", "power_w")


class CloudSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    provider: Optional[str] = None
    instance: str
    instances: Int = Field(gt=0, le=10**7, description="number of instances rented")
    region: Optional[str] = None
    pricing: Literal["on_demand", "spot"] = "on_demand"
    checkpoint_interval_h: Optional[Float] = Field(None, ge=1e-3, le=1e5, description="hours of compute between checkpoints; default optimal")
    revocation_per_hour: Optional[Float] = Field(None, ge=0, le=1e3, description="spot revocations per instance-hour; default catalog")
    failure_per_hour: Optional[Float] = Field(None, ge=0, le=1e3, description="hardware failures per instance-hour; default catalog")
    restart_s: Optional[Float] = Field(None, ge=0, le=1e7)
    storage_gbps: Optional[Float] = Field(None, ge=1e-3, le=1e6, description="checkpoint write/read Gbit/s per instance")
    catalog: Optional[str] = Field(None, description="extra catalog YAML file")


def catalog_for(spec: CloudSpec) -> Catalog:
    return load_catalog(spec.catalog) if spec.catalog else load_catalog()


def instance_of(spec: CloudSpec) -> InstanceType:
    """The catalog entry of ``spec`` after checking provider, region and pricing (one-line errors)."""
    it = catalog_for(spec).get(spec.instance, spec.provider)
    if spec.region is not None and spec.region not in it.regions:
        raise CosearchError("cloud.region", f"{it.key} is not offered in {spec.region!r}; allowed: {', '.join(it.regions)}")
    if spec.pricing == "spot" and not it.has_spot:
        raise CosearchError("cloud.pricing", f"spot is not offered for {it.key}; allowed: on_demand")
    return it


def derived_cluster(spec: CloudSpec, cluster: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``cluster`` section implied by ``spec``, merged with the user's ``cluster`` overrides
    (HBM, NVLink bandwidth, power ...). Fields the instance type decides may be repeated only with
    the same value, so cost always comes from instances."""
    it = instance_of(spec)
    derived = {
        "gpu": it.gpu,
        "gpus": spec.instances * it.gpus,
        "gpus_per_node": it.gpus,
        "nvlink_domain": it.domain,
        "network_gbps": it.network_gbps / it.gpus,
        "price_usd_per_gpu_hour": it.price(spec.pricing) / it.gpus,
    }
    out = dict(cluster or {})
    for key, value in derived.items():
        given = out.get(key)
        if given is not None:
            try:
                same = given == value if isinstance(value, str) else (
                    isinstance(given, (int, float)) and not isinstance(given, bool)
                    and math.isclose(float(given), float(value), rel_tol=1e-9))
            except OverflowError:  # a 400-digit integer
                same = False
            if not same:
                raise CosearchError(f"cluster.{key}", f"set by cloud.instance {it.key} x {spec.instances} ({value!r}); "
                                    "change cloud.instance/instances/pricing instead, or drop the cloud section")
        out[key] = value
    return out


def transient_params(spec: CloudSpec) -> dict[str, float]:
    """Per-instance interruption rate, restart seconds and storage bandwidth of ``spec``."""
    it = instance_of(spec)
    cat = catalog_for(spec)
    revoc = 0.0
    if spec.pricing == "spot":
        revoc = spec.revocation_per_hour if spec.revocation_per_hour is not None else float(it.revocation_per_hour or 0.0)
    fail = spec.failure_per_hour if spec.failure_per_hour is not None else float(it.failure_per_hour)
    return {
        "instance_usd_per_hour": it.price(spec.pricing),
        "revocation_per_hour": revoc,
        "failure_per_hour": fail,
        "restart_s": spec.restart_s if spec.restart_s is not None else cat.defaults.restart_s,
        "storage_gbps": spec.storage_gbps if spec.storage_gbps is not None else float(it.storage_gbps),
    }


def cloud_estimate(spec: CloudSpec, out: Mapping[str, np.ndarray], spread: str = "analytic",
                   samples: int = 4000, seed: int = 0) -> dict[str, Any]:
    """Transient-server economics for one scenario, from the model output ``out`` (evaluate's dict)."""
    it = instance_of(spec)
    tp = transient_params(spec)
    work_h = float(np.asarray(out["time_to_train_days"]).reshape(-1)[0]) * 24.0
    params = float(np.asarray(out["params"]).reshape(-1)[0])
    m = transient_metrics(work_h, params, spec.instances, tp["instance_usd_per_hour"],
                          tp["revocation_per_hour"] + tp["failure_per_hour"], tp["restart_s"], tp["storage_gbps"],
                          np.nan if spec.checkpoint_interval_h is None else spec.checkpoint_interval_h,
                          spread=spread, samples=samples, seed=seed)
    num = {k: (None if not np.isfinite(v := float(np.asarray(x).reshape(-1)[0])) else v) for k, x in m.items()}
    return {
        "provider": it.provider, "instance": it.instance, "instances": spec.instances,
        "region": spec.region or it.regions[0], "pricing": spec.pricing, "gpu": it.gpu, "gpus": spec.instances * it.gpus,
        "instance_usd_per_hour": tp["instance_usd_per_hour"], "cluster_usd_per_hour": tp["instance_usd_per_hour"] * spec.instances,
        "revocation_per_instance_hour": tp["revocation_per_hour"], "failure_per_instance_hour": tp["failure_per_hour"],
        "storage_gbps": tp["storage_gbps"], "price_date": it.price_date, **num,
    }


# --- vectorized (search) path -----------------------------------------------------------------

def instance_codes(catalog: Catalog | None = None) -> dict[str, int]:
    """``provider/instance`` -> integer code for the ``instance`` column of :func:`evaluate_cloud`."""
    return (catalog or load_catalog()).codes()


#: Cloud columns :func:`evaluate_cloud` reads, with defaults (NaN: catalog default / optimal).
CLOUD_COLUMNS: dict[str, float | None] = {
    "instance": None,            # integer code from instance_codes()
    "instances": None,           # instance count
    "spot": 0.0,                 # 1 = spot pricing, 0 = on-demand
    "checkpoint_interval_h": np.nan,
    "revocation_per_hour": np.nan,
    "failure_per_hour": np.nan,
    "restart_s": np.nan,
    "storage_gbps": np.nan,
}


def instance_columns(instance, instances, spot=0.0, precision="bf16", catalog: Catalog | None = None) -> dict[str, np.ndarray]:
    """Model input columns (hardware, ``gpus``, ``gpus_per_node``, ``nvlink_domain``, per-GPU
    network and price) for arrays of instance codes, counts and pricing flags. ``precision`` is a
    word (bf16/fp16/fp8) or an array of the model's precision codes (0: 16-bit, 1: fp8). Rows asking
    for spot on an instance type without spot get a NaN price (treat as infeasible)."""
    cat = catalog or load_catalog()
    code = np.asarray(instance, dtype=float)
    n = np.asarray(instances, dtype=float)
    sp = np.asarray(spot, dtype=float)
    if isinstance(precision, str):
        a = cat.arrays(precision)
        code, n, sp = np.broadcast_arrays(code, n, sp)
        peak_of = lambda idx: a["peak_tflops"][idx]  # noqa: E731
    else:
        a = cat.arrays("bf16")
        a8 = cat.arrays("fp8")
        code, n, sp, pc = np.broadcast_arrays(code, n, sp, np.asarray(precision, dtype=float))
        peak_of = lambda idx: np.where(pc > 0, a8["peak_tflops"][idx], a["peak_tflops"][idx])  # noqa: E731
    idx = code.astype(np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= len(a["gpus_per_instance"])):
        raise ValueError(f"instance codes must lie in 0..{len(a['gpus_per_instance']) - 1}")
    g = a["gpus_per_instance"][idx]
    price_inst = np.where(sp > 0, a["spot_usd_per_hour"][idx], a["on_demand_usd_per_hour"][idx])
    derived = {"gpus": n * g, "gpus_per_node": g, "network_gbps": a["network_gbps_per_gpu"][idx],
               "price_usd_per_gpu_hour": price_inst / g, "peak_tflops": peak_of(idx)}
    return {key: derived[key] if key in derived else a[key][idx] for key in INSTANCE_COLUMNS}


def band_of_expected(out: Mapping[str, np.ndarray], res: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The prediction-interval ends of the expected time and cost to train: the model's step-time
    band (``step_time_low_s``/``step_time_high_s`` over ``step_time_s``) applied to the expected
    values (interruption overheads scale with the work, to first order)."""
    if "step_time_high_s" not in out:
        return {}
    with np.errstate(divide="ignore", invalid="ignore"):
        step = np.asarray(out["step_time_s"], dtype=float)
        lo, hi = np.asarray(out["step_time_low_s"]) / step, np.asarray(out["step_time_high_s"]) / step
    t, c = np.asarray(res["expected_time_to_train_days"]), np.asarray(res["expected_cost_to_train_usd"])
    return {"time_to_train_low_days": t * lo, "time_to_train_high_days": t * hi,
            "cost_to_train_low_usd": c * lo, "cost_to_train_high_usd": c * hi}


def apply_cloud(out: Mapping[str, np.ndarray], cloud: Mapping[str, object], catalog: Catalog | None = None, *,
                spread: str = "analytic", quantiles=QUANTILES, deadline_days: float | None = None) -> dict[str, np.ndarray]:
    """Add transient-server economics to the model output ``out`` of cloud configurations.

    ``cloud`` holds :data:`CLOUD_COLUMNS` (arrays or scalars; NaN = catalog default / optimal).
    Returns a new dict: ``time_to_train_days``/``cost_to_train_usd`` become the EXPECTED values
    under interruptions (failure-free ones kept as ``ideal_*``), plus ``p10/p50/p90_*``,
    ``checkpoint_interval_h``, ``checkpoint_write_s``, ``interruptions_per_hour``,
    ``overhead_fraction``, ``spot_available``; ``feasible`` is cleared where spot is unavailable.
    """
    cat = catalog or load_catalog()
    cl = {k: cloud.get(k, v) for k, v in CLOUD_COLUMNS.items()}
    missing = [k for k, v in CLOUD_COLUMNS.items() if v is None and cl[k] is None]
    if missing:
        raise KeyError(f"missing cloud columns: {', '.join(missing)}")
    a = cat.arrays()
    shape = np.shape(out["step_time_s"])
    f = lambda k: np.broadcast_to(np.asarray(cl[k], dtype=float), shape)  # noqa: E731
    idx = f("instance").astype(np.int64)
    n, spot = f("instances"), f("spot") > 0
    revoc = np.where(spot, np.where(np.isnan(f("revocation_per_hour")), a["revocation_per_hour"][idx], f("revocation_per_hour")), 0.0)
    fail = np.where(np.isnan(f("failure_per_hour")), a["failure_per_hour"][idx], f("failure_per_hour"))
    restart = np.where(np.isnan(f("restart_s")), cat.defaults.restart_s, f("restart_s"))
    storage = np.where(np.isnan(f("storage_gbps")), a["storage_gbps"][idx], f("storage_gbps"))
    price_inst = np.where(spot, a["spot_usd_per_hour"][idx], a["on_demand_usd_per_hour"][idx])
    m = transient_metrics(np.asarray(out["time_to_train_days"]) * 24.0, out["params"], n, price_inst, revoc + fail,
                          restart, storage, f("checkpoint_interval_h"), spread=spread, quantiles=quantiles,
                          deadline_days=deadline_days)
    res = dict(out)
    res.update({k: np.broadcast_to(v, shape) for k, v in m.items()})
    spot_ok = ~(spot & np.isnan(a["spot_usd_per_hour"][idx]))
    res["time_to_train_days"] = res["expected_time_to_train_days"]
    res["cost_to_train_usd"] = res["expected_cost_to_train_usd"]
    res.update(band_of_expected(out, res))
    res["spot_available"] = spot_ok
    res["feasible"] = np.asarray(out["feasible"]) & spot_ok
    res["instances"] = n
    return res


def evaluate_cloud(columns: Mapping[str, object], profile=None, *, precision="bf16", catalog: Catalog | None = None,
                   spread: str = "analytic", quantiles=QUANTILES, deadline_days: float | None = None) -> dict[str, np.ndarray]:
    """The model plus transient-server economics for arrays of cloud configurations, in one call.

    ``columns``: the model's input columns for everything but the hardware (model, training, plan:
    see ``cosearch.model.columns.INPUT_COLUMNS``) plus :data:`CLOUD_COLUMNS`. ``precision``: a word,
    or by default the ``precision`` column's codes when present. Equivalent to
    :func:`instance_columns` -> ``cosearch.model.evaluate`` -> :func:`apply_cloud`.
    """
    from ..model import evaluate
    from ..model.profile import DEFAULT_PROFILE

    cat = catalog or load_catalog()
    cols = dict(columns)
    cloud = {k: cols.pop(k, v) for k, v in CLOUD_COLUMNS.items()}
    missing = [k for k, v in CLOUD_COLUMNS.items() if v is None and cloud[k] is None]
    if missing:
        raise KeyError(f"missing cloud columns: {', '.join(missing)}")
    prec = cols["precision"] if ("precision" in cols and precision == "bf16") else precision
    hw = instance_columns(cloud["instance"], cloud["instances"], cloud["spot"], prec, cat)
    clash = sorted(set(hw) & set(cols))
    if clash:
        raise KeyError(f"columns decided by the instance type: {', '.join(clash)}")
    out = evaluate({**cols, **hw}, profile or DEFAULT_PROFILE)
    return apply_cloud(out, cloud, cat, spread=spread, quantiles=quantiles, deadline_days=deadline_days)
