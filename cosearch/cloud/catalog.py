"""Cloud instance catalog: instance types, prices and default revocation rates (``data/instances.yaml``).

An instance type is addressed as ``provider/instance`` (``aws/p5.48xlarge``). The shipped file can
be replaced as a whole through ``COSEARCH_DATA_DIR`` and extended or overridden field by field with
user YAML files of the same layout (negotiated prices, a private cloud, a new region)::

    providers:
      aws:
        instances:
          p5.48xlarge: {on_demand_usd_per_hour: 40.0}   # negotiated; other fields kept

For the vectorized model every instance type has an integer code (:meth:`Catalog.codes`), and
:meth:`Catalog.arrays` gives per-code numeric arrays to index with those codes.
"""
from __future__ import annotations

import copy
import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .. import hardware
from ..data import data_doc
from .._numbers import Float, kind_of
from ..errors import CosearchError

if TYPE_CHECKING:
    import pandas as pd

FILE = "instances.yaml"


#: Dearest instance-hour a catalog entry may state: finite prices only (.inf or 1e300 printed as inf and failed later,
#: in estimate, under another name); a million dollars an hour is far above any instance.
MAX_USD_PER_HOUR = 1e6


class Defaults(BaseModel):
    model_config = ConfigDict(extra="forbid")

    failure_per_gpu_hour: float = Field(ge=0)
    restart_s: float = Field(ge=0)
    storage_gbps: float = Field(gt=0)


class InstanceType(BaseModel):
    """One rentable instance type of one provider (prices per instance-hour)."""

    model_config = ConfigDict(extra="forbid")

    provider: str
    instance: str
    gpu: str
    gpus: int = Field(gt=0)
    nvlink: bool = True
    nvlink_domain: Optional[int] = Field(None, gt=0)
    network_gbps: Float = Field(gt=0, le=1e9, description="scale-out network per instance, Gbit/s")
    regions: list[str] = Field(min_length=1)
    on_demand_usd_per_hour: Float = Field(ge=0, le=MAX_USD_PER_HOUR)
    spot_usd_per_hour: Optional[Float] = Field(None, ge=0, le=MAX_USD_PER_HOUR)
    revocation_per_hour: Optional[Float] = Field(None, ge=0, le=1e6)
    failure_per_hour: Optional[Float] = Field(None, ge=0, le=1e6, description="default: defaults.failure_per_gpu_hour * gpus")
    storage_gbps: Optional[Float] = Field(None, gt=0, le=1e9)
    price_date: str = ""
    sources: dict[str, str] = {}

    @property
    def key(self) -> str:
        return f"{self.provider}/{self.instance}"

    @property
    def has_spot(self) -> bool:
        return self.spot_usd_per_hour is not None

    def price(self, pricing: str) -> float:
        return float(self.spot_usd_per_hour if pricing == "spot" else self.on_demand_usd_per_hour)

    @property
    def domain(self) -> int:
        """GPUs per NVLink domain (the instance itself unless the catalog says it spans instances)."""
        return int(self.nvlink_domain or self.gpus)


def _merge(base: dict, over: Mapping) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else copy.deepcopy(v)
    return out


def _read(path: str | Path) -> dict:
    from .._files import read_yaml

    data = read_yaml(path)  # size, encoding, alias and depth caps; one-line errors
    if data is None:
        return {}
    if not isinstance(data, Mapping) or not set(data) <= {"defaults", "providers"}:
        raise CosearchError(str(path), "a catalog file is a mapping with 'providers' (and optionally 'defaults')")
    _providers(data, str(path))  # a wrong shape is named in this file, before merging hides which
    return dict(data)


def _mapping(value: Any, where: str, of: str) -> dict:
    """``value`` as a dict (null: empty); one-line error naming ``where`` if it is not a mapping."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CosearchError(where, f"must be a mapping ({of}), got {kind_of(value)}")
    return dict(value)


def _providers(data: Mapping[str, Any], origin: str) -> dict[str, tuple[dict, dict[str, dict]]]:
    """``{provider: (provider fields, {instance: instance fields})}`` of catalog ``data``, every level
    type-checked: a list or a number where a mapping belongs is a one-line error naming its key
    path (``providers.aws.instances.p5``), not an AttributeError."""
    out = {}
    for prov, pdata in _mapping(data.get("providers"), f"{origin}: providers", "provider name: its fields").items():
        where = f"{origin}: providers.{prov}"
        pdata = _mapping(pdata, where, "instances: ...")
        insts = _mapping(pdata.pop("instances", None), f"{where}.instances", "instance name: its fields")
        out[str(prov)] = (pdata, {str(name): _mapping(fields, f"{where}.instances.{name}", "gpu: ..., gpus: ..., ...")
                                  for name, fields in insts.items()})
    return out



#: The columns of :meth:`Catalog.table`, one row per instance type.
TABLE_COLUMNS = ("provider", "instance", "gpu", "gpus", "nvlink", "nvlink_domain", "network_gbps", "network_gbps_per_gpu",
                 "on_demand_usd_per_hour", "spot_usd_per_hour", "on_demand_usd_per_gpu_hour", "spot_usd_per_gpu_hour",
                 "revocation_per_hour", "failure_per_hour", "storage_gbps", "regions", "price_date", "large_gemm_bf16",
                 "large_gemm_fp8", "matmul_efficiency", "efficiency_measured", "efficiency_source")

class Catalog:
    """The merged instance catalog."""

    def __init__(self, data: Mapping[str, Any], origin: str = FILE) -> None:
        try:
            self.defaults = Defaults.model_validate(_mapping(data.get("defaults"), f"{origin}: defaults", "restart_s: ..., ..."))
        except ValidationError as err:
            e = err.errors()[0]
            raise CosearchError(f"{origin}: defaults.{'.'.join(map(str, e['loc']))}", e["msg"]) from None
        self.providers: dict[str, dict[str, Any]] = {}
        self.instances: dict[str, InstanceType] = {}
        for prov, (pdata, insts) in _providers(data, origin).items():
            self.providers[prov] = pdata
            for name, fields in insts.items():
                where = f"{origin}: providers.{prov}.instances.{name}"
                try:
                    it = InstanceType.model_validate({**fields, "provider": prov, "instance": name})
                except ValidationError as err:
                    e = err.errors()[0]
                    field = ".".join(map(str, e["loc"]))
                    raise CosearchError(f"{where}.{field}", e["msg"]) from None
                if it.gpu not in hardware.catalog():
                    raise CosearchError(f"{where}.gpu", f"unknown GPU id {it.gpu!r}; allowed: {', '.join(hardware.gpu_ids())}")
                if it.spot_usd_per_hour is not None and it.revocation_per_hour is None:
                    raise CosearchError(f"{where}.revocation_per_hour", "required when spot_usd_per_hour is set")
                if it.failure_per_hour is None:
                    it = it.model_copy(update={"failure_per_hour": self.defaults.failure_per_gpu_hour * it.gpus})
                if it.storage_gbps is None:
                    it = it.model_copy(update={"storage_gbps": self.defaults.storage_gbps})
                self.instances[it.key] = it

    # --- look-ups ------------------------------------------------------------------------------
    def keys(self) -> list[str]:
        return list(self.instances)

    def codes(self) -> dict[str, int]:
        """``provider/instance`` -> integer code (catalog order), for categorical model columns."""
        return {k: i for i, k in enumerate(self.instances)}

    def get(self, instance: str, provider: Optional[str] = None, field: str = "cloud.instance") -> InstanceType:
        """Look an instance type up by ``provider/instance`` or by ``instance`` and ``provider``;
        one-line error naming ``field`` and the allowed values otherwise."""
        if "/" in instance:
            prov, name = instance.split("/", 1)
            if provider is not None and provider != prov:
                raise CosearchError("cloud.provider", f"{provider!r} does not match instance {instance!r}")
            provider = prov
        else:
            name = instance
        if provider is None:
            matches = [it for it in self.instances.values() if it.instance == name]
            if len(matches) == 1:
                return matches[0]
            raise CosearchError("cloud.provider", f"required (or write the instance as provider/instance); allowed: {', '.join(self.providers)}")
        if provider not in self.providers:
            raise CosearchError("cloud.provider", f"unknown provider {provider!r}; allowed: {', '.join(self.providers)}")
        key = f"{provider}/{name}"
        if key not in self.instances:
            allowed = [it.instance for it in self.instances.values() if it.provider == provider]
            raise CosearchError(field, f"unknown {provider} instance type {name!r}; allowed: {', '.join(allowed)}")
        return self.instances[key]

    def table(self, gpu: Optional[str] = None, provider: Optional[str] = None) -> "pd.DataFrame":
        """The catalog as a table (one row per instance type), optionally filtered."""
        import pandas as pd

        if gpu is not None and gpu not in hardware.catalog():
            raise CosearchError("--gpu", f"unknown GPU id {gpu!r}; allowed: {', '.join(hardware.gpu_ids())}")
        if provider is not None and provider not in self.providers:
            raise CosearchError("--provider", f"unknown provider {provider!r}; allowed: {', '.join(self.providers)}")
        rows = []
        gpus_cat = hardware.catalog()
        for it in self.instances.values():
            if (gpu and it.gpu != gpu) or (provider and it.provider != provider):
                continue
            rows.append({
                "provider": it.provider, "instance": it.instance, "gpu": it.gpu, "gpus": it.gpus,
                "nvlink": it.nvlink, "nvlink_domain": it.domain, "network_gbps": it.network_gbps,
                "network_gbps_per_gpu": it.network_gbps / it.gpus,
                "on_demand_usd_per_hour": it.on_demand_usd_per_hour, "spot_usd_per_hour": it.spot_usd_per_hour,
                "on_demand_usd_per_gpu_hour": it.on_demand_usd_per_hour / it.gpus,
                "spot_usd_per_gpu_hour": None if it.spot_usd_per_hour is None else it.spot_usd_per_hour / it.gpus,
                "revocation_per_hour": it.revocation_per_hour, "failure_per_hour": it.failure_per_hour,
                "storage_gbps": it.storage_gbps, "regions": " ".join(it.regions), "price_date": it.price_date,
                "large_gemm_bf16": gpus_cat[it.gpu]["efficiency"]["large_gemm_bf16"],
                "large_gemm_fp8": gpus_cat[it.gpu]["efficiency"].get("large_gemm_fp8"),
                "matmul_efficiency": gpus_cat[it.gpu]["matmul_efficiency"],
                "efficiency_measured": gpus_cat[it.gpu]["efficiency_measured"],
                "efficiency_source": gpus_cat[it.gpu]["efficiency_source"],
            })
        # the columns even when nothing matches (a GPU nobody rents): its --csv is a header, not one empty line
        return pd.DataFrame(rows, columns=TABLE_COLUMNS)

    def arrays(self, precision: str = "bf16") -> dict[str, np.ndarray]:
        """Per-code numeric arrays (index with :meth:`codes`): everything the vectorized model and
        the transient-server economics need from an instance type. Peak FLOP/s is at
        ``precision`` (bf16 falls back to fp16 on GPUs without bf16; NaN where absent)."""
        its = list(self.instances.values())
        gpus_cat = hardware.catalog()

        def peak(gid: str) -> float:
            p = gpus_cat[gid]["peak_tflops"]
            v = p.get(precision) or (p.get("fp16") if precision == "bf16" else None)
            return float(v) if v else np.nan

        def col(f) -> np.ndarray:
            return np.array([f(it) for it in its], dtype=float)

        g = lambda key: col(lambda it: gpus_cat[it.gpu][key])  # noqa: E731
        return {
            "gpus_per_instance": col(lambda it: it.gpus),
            "nvlink_domain": col(lambda it: it.domain),
            "network_gbps_per_gpu": col(lambda it: it.network_gbps / it.gpus),
            "on_demand_usd_per_hour": col(lambda it: it.on_demand_usd_per_hour),
            "spot_usd_per_hour": col(lambda it: np.nan if it.spot_usd_per_hour is None else it.spot_usd_per_hour),
            "revocation_per_hour": col(lambda it: np.nan if it.revocation_per_hour is None else it.revocation_per_hour),
            "failure_per_hour": col(lambda it: it.failure_per_hour),
            "storage_gbps": col(lambda it: it.storage_gbps),
            "peak_tflops": col(lambda it: peak(it.gpu)),
            **{key: g(key) for key in hardware.EFFICIENCY_COLUMNS},
            "hbm_gib": g("hbm_gib"), "hbm_tbps": g("hbm_tbps"), "nvlink_gbps": g("nvlink_gbps"),
            "power_w": g("power_w"),
        }


@lru_cache(maxsize=8)
def _load(extra: tuple[str, ...], _key: tuple) -> Catalog:
    data = data_doc(FILE) or {}  # a COSEARCH_DATA_DIR copy is a user file: data_doc reads it safely
    origin = FILE
    for path in extra:
        data = _merge(data, _read(path))
        origin = path
    return Catalog(data, origin)


def load_catalog(extra: Iterable[str | Path] | str | Path | None = None) -> Catalog:
    """The shipped catalog (or the one in ``COSEARCH_DATA_DIR``), overridden by ``extra`` YAML files
    in order. Cached per combination of files."""
    if extra is None:
        paths: tuple[str, ...] = ()
    elif isinstance(extra, (str, Path)):
        paths = (str(extra),)
    else:
        paths = tuple(str(p) for p in extra)
    key = (os.environ.get("COSEARCH_DATA_DIR"),) + tuple(_mtime(p) for p in paths)
    return _load(paths, key)


def _mtime(path: str) -> float:
    try:
        return Path(path).stat().st_mtime
    except OSError:
        return -1.0


def clear_cache() -> None:
    _load.cache_clear()
