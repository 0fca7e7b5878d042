"""Cloud search spaces: instance choices resolved from the catalog, what a cloud space may vary,
and the rented-cluster columns of assigned rows (docs/cloud.md)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from ..cloud import CloudSpec, load_catalog
from ..cloud.provision import instance_of
from ..errors import CosearchError
from ._names import _CLOUD_DECIDES
from ._values import Dimension, _Cat, _Resolver

if TYPE_CHECKING:
    from .space import SearchSpace


def _expand_cloud(cloud: Mapping[str, Any]) -> dict[str, Any]:
    """Resolve the instance choices of a cloud space: ``instance: any`` (or no instance) means every
    catalog instance type of the listed ``provider`` (one or a list) offered in ``region``, and the
    ``gpu`` filter (one id or a list); explicit instances are checked against the region. Prices are
    the same in every listed region of an instance type (data/instances.yaml), so the region is a
    filter, not a knob."""
    c = dict(cloud)
    cat = load_catalog(c["catalog"]) if c.get("catalog") else load_catalog()
    prov = c.get("provider")
    provs = prov if isinstance(prov, list) else [prov] if prov is not None else None
    for p in provs or []:
        if p not in cat.providers:
            raise CosearchError("cloud.provider", f"unknown provider {p!r}; allowed: {', '.join(cat.providers)}")
    region = c.get("region")
    if region is not None and not isinstance(region, str):
        raise CosearchError("cloud.region", "must be a single region (prices do not differ between an instance's regions)")
    gpus = c.pop("gpu", None)
    gpus = gpus if isinstance(gpus, list) or gpus is None else [gpus]
    inst = c.get("instance", "any")
    if inst == "any":
        keys = [it.key for it in cat.instances.values() if (provs is None or it.provider in provs)
                and (region is None or region in it.regions) and (gpus is None or it.gpu in gpus)]
        if not keys:
            raise CosearchError("cloud.instance", "no catalog instance type matches cloud.provider/region/gpu "
                                "(see `cosearch catalog`)")
        c["instance"] = keys
        c.pop("provider", None)
    else:
        if gpus is not None:
            raise CosearchError("cloud.gpu", "a GPU filter goes with instance: any")
        names = inst if isinstance(inst, list) else [inst]
        if isinstance(prov, list):
            if any("/" not in str(n) for n in names):
                raise CosearchError("cloud.provider", "with a list of providers write instances as provider/instance")
            c.pop("provider")
        for n in names:  # the scenario's own check: instance known, offered in the region
            instance_of(CloudSpec(instance=str(n), provider=prov if isinstance(prov, str) else None, region=region,
                                  instances=1, catalog=c.get("catalog")))
    return c


def _check_cloud_space(base: Mapping[str, Any], dims: Sequence[Dimension]) -> None:
    """A cloud space rents instances: the instance type decides the cluster, and only the
    instance, count, pricing and transient knobs may vary (one-line errors otherwise)."""
    cloud, cluster = base["cloud"], base.get("cluster") or {}
    for key in _CLOUD_DECIDES:
        if key in cluster:
            raise CosearchError(f"cluster.{key}", "decided by cloud.instance in a cloud space; vary cloud.instance/"
                                "instances/pricing instead")
    if "dp" in (base.get("plan") or {}):
        raise CosearchError("plan.dp", "in a cloud space dp is derived from cloud.instances; drop plan.dp")
    if "instances" not in cloud:
        raise CosearchError("cloud.instances", "required in a cloud space")
    fixed_only = {"provider", "region", "catalog"}
    for d in dims:
        if d.path.startswith("cloud.") and d.path.split(".", 1)[1] in fixed_only:
            raise CosearchError(d.path, "must be a single value; list provider/instance keys in cloud.instance instead")



def cloud_columns(space: "SearchSpace", get: _Resolver) -> dict[str, Any]:
    """:data:`cosearch.cloud.CLOUD_COLUMNS` of the assigned rows: instance codes, counts, spot flags."""
    cat = space.catalog
    codes = cat.codes()
    provider = space.base["cloud"].get("provider")
    key = lambda name: float(codes[cat.get(name, provider).key])  # noqa: E731
    inst = get.raw("cloud.instance")
    cl: dict[str, Any] = {"instance": inst.lookup(key) if isinstance(inst, _Cat) else key(inst),
                          "instances": get.number("cloud.instances")}
    pricing = get.raw("cloud.pricing", "on_demand")
    spot = lambda p: float(p == "spot")  # noqa: E731
    cl["spot"] = pricing.lookup(spot) if isinstance(pricing, _Cat) else spot(pricing)
    for k in ("checkpoint_interval_h", "revocation_per_hour", "failure_per_hour", "restart_s", "storage_gbps"):
        cl[k] = get.number(f"cloud.{k}", np.nan)
    return cl
