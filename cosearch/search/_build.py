"""From assigned values to model input columns and to complete scenario dicts."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from .. import hardware
from ..cloud import CloudSpec, instance_columns
from ..cloud.provision import derived_cluster
from ..errors import CosearchError
from ..model.columns import CATEGORICAL_CODES, INPUT_COLUMNS, OPTIONAL_MODEL_COLUMNS
from ..presets import ARCH_FIELDS, moe_columns, preset
from ..scenario import HARDWARE_OVERRIDES
from ._cloud import cloud_columns
from ._names import _SIZE_KEYS, SECTIONS
from ._values import _Cat, _Resolver, _copy_tree, _del_path, _plain, _set_path

if TYPE_CHECKING:
    from .space import SearchSpace


def columns(space: "SearchSpace", assign: Mapping[str, Sequence[Any] | np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
    """The model's input columns for the assigned values (fixed values from the base)."""
    n = len(next(iter(assign.values()))) if assign else 1
    get = _Resolver(space.base, assign, n)
    cols: dict[str, Any] = {}
    # model: a preset name (fixed or chosen) or explicit fields
    model = get.raw("model")
    if isinstance(model, _Cat):
        table = {name: preset(name) for name in model.names}
        for key in ARCH_FIELDS:
            cols[key] = model.lookup(lambda nm, key=key: float(_arch_default(key, table[nm])))
    else:
        arch = preset(model) if isinstance(model, str) else dict(model)
        for key in ARCH_FIELDS:
            cols[key] = get.number(f"model.{key}", _arch_default(key, arch) if key not in arch else arch[key])
    _moe_model_columns(cols, model, get)  # issue 13: MoE / MLA columns
    # training
    cols["global_batch"] = get.number("training.global_batch")
    cols["tokens"] = get.number("training.tokens", np.nan)
    cols["precision"] = get.coded("training.precision", "bf16")
    cols["attention"] = get.coded("training.attention", "flash")
    if space.is_cloud:
        # rented cluster: the instance type decides GPU, count, node, network and price
        cl = cloud_columns(space, get)
        cols.update(instance_columns(cl["instance"], cl["instances"], cl["spot"], cols["precision"], space.catalog))
    else:
        # cluster: catalog lookups by GPU id, then overrides
        gpu = get.raw("cluster.gpu")
        if isinstance(gpu, _Cat):
            gpu_names, gidx = gpu.names, gpu.codes
        else:
            gpu_names, gidx = [gpu], 0
        cat = {g: hardware.gpu(g) for g in gpu_names}
        for key in HARDWARE_OVERRIDES + hardware.EFFICIENCY_COLUMNS:
            table = np.array([float(cat[g][key]) for g in gpu_names])
            cols[key] = table[gidx]
        prec = get.raw("training.precision", "bf16")
        prec_names = ("bf16", "fp16", "fp8")
        peak_table = np.array([[_peak(cat[g], p) for p in prec_names] for g in gpu_names])
        pidx = prec.lookup(prec_names.index).astype(np.intp) if isinstance(prec, _Cat) else prec_names.index(prec)
        cols["peak_tflops"] = peak_table[gidx, pidx]
    for key in HARDWARE_OVERRIDES:
        if get.has(f"cluster.{key}"):
            v = get.number(f"cluster.{key}")
            cols[key] = np.where(np.isnan(v), cols[key], v)  # null choice: catalog value
    if get.has("cluster.gpus_per_node") and not get.has("cluster.nvlink_domain"):
        node_scoped = np.array([cat[g]["nvlink_domain"] <= cat[g]["gpus_per_node"] for g in gpu_names])[gidx]
        cols["nvlink_domain"] = np.where(node_scoped, cols["gpus_per_node"], cols["nvlink_domain"])
    # plan knobs and any other scenario field that names a model column (generic, so a new
    # knob added to the scenario and INPUT_COLUMNS is searchable without touching this file)
    for section in ("training", "plan", "cluster"):
        for key in INPUT_COLUMNS:
            path = f"{section}.{key}"
            if key in cols and key not in ("tp", "pp", "cp", "microbatch", "interleave") or key in _SIZE_KEYS:
                continue
            if get.has(path):
                cols[key] = get.coded(path, None) if key in CATEGORICAL_CODES else get.number(path)
    for key in ("tp", "pp", "cp", "microbatch", "interleave"):
        cols[key] = get.number(f"plan.{key}", 1.0)
    mp = cols["tp"] * cols["pp"] * cols["cp"]
    if space.is_cloud:
        pass  # gpus = instances x GPUs per instance, set above
    elif get.has("cluster.nodes"):
        cols["gpus"] = get.number("cluster.nodes") * cols["gpus_per_node"]
    elif get.has("cluster.gpus"):
        cols["gpus"] = get.number("cluster.gpus")
    if get.has("plan.dp"):
        cols["dp"] = get.number("plan.dp")
        if "gpus" not in cols:
            cols["gpus"] = mp * cols["dp"]
    else:
        if "gpus" not in cols:
            raise CosearchError("cluster.gpus", "the space must set cluster.gpus, cluster.nodes or plan.dp")
        cols["dp"] = cols["gpus"] / mp
    return {k: np.broadcast_to(np.asarray(v, dtype=float), (n,)) for k, v in cols.items()}, n


def scenario(space: "SearchSpace", values: Mapping[str, Any]) -> dict[str, Any]:
    """The complete scenario dict of one point (values by dimension path).

    ``None`` (catalog value) drops the override; ``cluster.nodes`` becomes ``cluster.gpus``
    (nodes x gpus per node); with ``plan.dp`` and no GPU count, ``cluster.gpus`` is derived.
    The result passes :func:`cosearch.scenario.parse_scenario` for every valid point.
    """
    sc = _copy_tree({k: v for k, v in space.base.items() if k in SECTIONS})
    for path, value in values.items():
        if value is None:
            _del_path(sc, path)
        else:
            _set_path(sc, path, _plain(value))
    cluster = sc.setdefault("cluster", {})
    plan = sc.get("plan") or {}
    if space.is_cloud:
        # the stored scenario repeats what the instance type decides (GPU, count, price), so
        # tables and `cosearch estimate` read it like any other scenario
        spec = CloudSpec.model_validate(sc["cloud"])
        try:
            sc["cluster"] = derived_cluster(spec, cluster)
        except CosearchError:  # spot asked where there is no spot market: an infeasible point, no price
            sc["cluster"] = derived_cluster(spec.model_copy(update={"pricing": "on_demand"}), cluster)
            sc["cluster"].pop("price_usd_per_gpu_hour")
    elif "inventory" in cluster:
        pass  # several GPU types: the inventory and plan.gpus_by_type say the counts (cosearch.inventory)
    elif "nodes" in cluster:
        nodes = cluster.pop("nodes")
        per_node = cluster.get("gpus_per_node") or hardware.gpu(cluster["gpu"])["gpus_per_node"]
        cluster["gpus"] = _plain(nodes * per_node)
    elif "gpus" not in cluster and plan.get("dp") is not None:
        cluster["gpus"] = _plain(plan.get("tp", 1) * plan.get("pp", 1) * plan.get("cp", 1) * plan["dp"])
    return sc


def _moe_model_columns(cols: dict[str, Any], model: Any, get: _Resolver) -> None:
    """The optional model columns (MoE/MLA, MTP, sliding windows) of a preset (fixed or chosen) or explicit fields."""
    if isinstance(model, _Cat):
        table = {name: moe_columns(preset(name)) for name in model.names}
        for key in OPTIONAL_MODEL_COLUMNS:
            if any(key in t for t in table.values()):
                cols[key] = model.lookup(lambda nm, key=key: float(table[nm].get(key, INPUT_COLUMNS[key])))
        return
    arch = preset(model) if isinstance(model, str) else dict(model)
    fixed = moe_columns({k: v for k, v in arch.items() if not isinstance(v, (list, dict))})
    for key in OPTIONAL_MODEL_COLUMNS:
        if key != "mla" and get.has(f"model.{key}"):
            cols[key] = get.number(f"model.{key}")
        elif key in fixed:
            cols[key] = fixed[key]


def _arch_default(key: str, arch: Mapping[str, Any]) -> Any:
    if key in arch:
        return arch[key]
    return {"kv_heads": arch.get("heads"), "ffn_hidden": 4 * arch.get("hidden", 0), "gated_mlp": False,
            "tied_embeddings": True}.get(key)


def _peak(entry: Mapping[str, Any], precision: str) -> float:
    v = entry["peak_tflops"].get(precision)
    return float(v) if v else np.nan

