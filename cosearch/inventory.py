"""Scenarios over a GPU inventory (``cluster: {inventory: {h100-sxm: 64, a100-80gb: 128}}``, issue 14).

The edge of :mod:`cosearch.model.hetero`: checks the inventory form with one-line errors, turns a
scenario into the common and per-type columns, and gives ``estimate`` its outputs and by-type tables.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import hardware
from .errors import CosearchError
from .model.feasibility import check_scalar
from .model.hetero import BY_TYPE, HETERO_CODES, common_columns, evaluate_hetero
from .model.profile import DEFAULT_PROFILE, Profile

from .scenario import (  # noqa: F401 - check_inventory_scenario, gpus_used re-exported
    Scenario, check_inventory_scenario, gpus_used, parse_scenario, scenario_columns,
)


def type_hardware(name: str, precision: str) -> dict[str, float]:
    """:data:`~cosearch.model.hetero.HARDWARE_COLUMNS` of one catalog GPU (no overrides: they are refused with an
    inventory): its catalog columns (:func:`cosearch.hardware.type_columns`, as the search path) and its peak at
    ``precision`` (a one-line error if it lacks it)."""
    return {"peak_tflops": hardware.peak_tflops(name, precision), **hardware.type_columns(name)}


def unused_type_hardware(name: str) -> dict[str, float]:
    """:data:`~cosearch.model.hetero.HARDWARE_COLUMNS` of a type the plan leaves idle: the catalog's columns with
    its peak NaN (never read), as the search path gives it (:func:`cosearch.hardware.type_columns`), so that an
    idle V100 or T4 (no bf16) does not refuse a bf16 or fp8 plan on the other types."""
    return {"peak_tflops": float("nan"), **hardware.type_columns(name)}


def inventory_columns(sc: Scenario) -> dict[str, Any]:
    """Arguments of :func:`cosearch.model.hetero.evaluate_hetero` for one scenario."""
    names = list(sc.cluster.inventory)
    stand_in = sc.model_copy(update={"cluster": sc.cluster.model_copy(update={"gpu": names[0], "gpus": 1, "inventory": None})})
    common = common_columns(scenario_columns(stand_in))
    common["dp"] = float(sc.plan.dp) if sc.plan.dp is not None else 1.0
    used = gpus_used(sc)
    hws = []
    for n in names:
        try:
            hws.append(type_hardware(n, sc.training.precision))
        except CosearchError:  # a precision the type lacks: an error only where the plan uses the type
            if used[n]:
                raise
            hws.append(unused_type_hardware(n))
    return dict(common=common, hardware=hws,
                use=[float(used[n]) for n in names], mode=float(HETERO_CODES[sc.plan.hetero]), names=names,
                inventory=[float(sc.cluster.inventory[n]) for n in names])


def _first_error(sc: Scenario, args: dict[str, Any]) -> CosearchError:
    """The first rule an inventory plan breaks, named by its field."""
    pl, names, use = sc.plan, args["names"], args["use"]
    data = pl.hetero == "data"
    group = pl.tp * pl.cp * (pl.pp if data else (pl.dp or 1))
    what = "tp*pp*cp" if data else "tp*cp*dp"
    for name, n in zip(names, use):
        if n % group:
            return CosearchError(f"plan.gpus_by_type.{name}", f"{n:.0f} GPUs is not a multiple of {what} ({group})")
    mixed = sum(n > 0 for n in use) > 1
    if mixed and pl.zero >= 3:
        return CosearchError("plan.zero", "ZeRO-3/FSDP across GPU types is not modelled (allowed with an inventory: 0, 1, 2)")
    if mixed and pl.offload != "none":
        return CosearchError("plan.offload", "offload with several GPU types is not modelled (allowed: none)")
    if mixed and pl.schedule not in (None, "1f1b", "interleaved"):
        return CosearchError("plan.schedule", f"{pl.schedule} across GPU types is not modelled (allowed with an inventory: 1f1b, interleaved)")
    if mixed and (sc.model.experts or sc.model.attention == "mla" or sc.model.head_dim is not None):  # issue 13
        return CosearchError("model.experts" if sc.model.experts else "model.attention",
                             "mixture-of-experts / MLA / head_dim models across GPU types are not modelled (one GPU type)")
    if mixed and (sc.model.mtp_layers or sc.model.sliding_window is not None):
        return CosearchError("model.mtp_layers" if sc.model.mtp_layers else "model.sliding_window",
                             "multi-token prediction / sliding windows across GPU types are not modelled (one GPU type)")
    if mixed and (pl.burst or pl.multiplex):
        return CosearchError("plan.burst" if pl.burst else "plan.multiplex",
                             "DeepPool burst/multiplexing across GPU types is not modelled (allowed: false)")
    if mixed and not data and pl.interleave != 1:
        return CosearchError("plan.interleave", "the pipeline of several GPU types runs 1F1B (allowed: 1)")
    replicas = sum(use) / group if data else (pl.dp or 1)
    if data and mixed and sc.training.global_batch % pl.microbatch == 0 and sc.training.global_batch // pl.microbatch < replicas:
        return CosearchError("training.global_batch", f"{sc.training.global_batch} sequences give fewer micro-batches "
                             f"than the {replicas:.0f} replicas")
    stages = pl.pp if data else sum(use) / group
    from .model.columns import scalar_columns

    for hw, n in zip(args["hardware"], use):  # the homogeneous rules, on each type in use
        cols = {**args["common"], **hw, "pp": float(stages), "dp": float(replicas),
                "gpus": float(pl.tp * pl.cp * stages * replicas), "interleave": float(pl.interleave if data else 1)}
        try:
            if n:
                check_scalar(scalar_columns(cols))
        except CosearchError as err:
            return err
    return CosearchError("plan", "the layers do not split over the pipeline stages of the inventory")


def inventory_outputs(sc: Scenario, profile: Profile | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model outputs of one inventory scenario as scalars, by-type tables for ``estimate``)."""
    args = inventory_columns(sc)
    out = evaluate_hetero(profile=profile or DEFAULT_PROFILE, **args)
    if not bool(out["valid"][0]):
        raise _first_error(sc, args)
    scalars = {k: (bool(v[0]) if np.asarray(v).dtype == bool else float(v[0])) for k, v in out.items()}
    extra = {key: {n: scalars[f"{key}.{n}"] for n in args["names"]} for key in BY_TYPE}
    extra["gpus_by_type"] = {n: int(v) for n, v in extra["gpus_by_type"].items()}
    for key in ("pp_by_type", "dp_by_type", "layers_by_type", "microbatches_by_type"):
        extra[key] = {n: int(v) for n, v in extra[key].items()}
    extra["hetero"] = sc.plan.hetero
    return scalars, extra


def inventory_link_columns(sc: Scenario) -> dict[str, float]:
    """Columns for :func:`cosearch.explain._links`: the first type's NVLink domain, the plan's sizes."""
    args = inventory_columns(sc)
    cols = {**args["common"], **args["hardware"][0]}
    if sc.plan.hetero == "data":
        cols["dp"] = sum(args["use"]) / (sc.plan.tp * sc.plan.pp * sc.plan.cp)
    return cols


def homogeneous_scenario(sc: Scenario) -> Scenario:
    """The same plan as an ordinary one-type scenario when the plan uses one GPU type (unchanged otherwise):
    ``gpu``/``gpus`` from that type, ``pp`` (pipeline composition) or ``dp`` (data) from its count."""
    used = {g: n for g, n in gpus_used(sc).items() if n}
    if len(used) != 1:
        return sc
    (gpu, n), pl = next(iter(used.items())), sc.plan
    data = sc.model_dump(mode="json", exclude_none=True)
    data["cluster"] = {k: v for k, v in data["cluster"].items() if k != "inventory"} | {"gpu": gpu, "gpus": n}
    plan = {k: v for k, v in data["plan"].items() if k not in ("hetero", "gpus_by_type")}
    if pl.hetero == "pipeline":
        dp = pl.dp or 1
        plan.update(dp=dp, pp=n // (pl.tp * pl.cp * dp))
    else:
        plan.update(dp=n // (pl.tp * pl.pp * pl.cp))
    data["plan"] = plan
    return parse_scenario(data)
