"""GPU hardware catalog: datasheet numbers with their sources, loaded from ``data/gpus.yaml``.

Units (the names say them): ``peak_tflops`` dense TFLOP/s per precision, ``hbm_gib`` GiB,
``hbm_tbps`` TB/s, ``nvlink_gbps`` GB/s per GPU per direction (bytes), ``network_gbps``
Gbit/s per GPU per direction (bits, as NICs are sold), ``power_w`` W,
``price_usd_per_gpu_hour`` USD.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import yaml

from .errors import CosearchError
from .data import data_text

#: Fraction of the datasheet dense peak that large bf16 GEMMs reach, per GPU id.
#: h100-sxm: least-squares fit of ``t = t0 + max(F/(eta*peak), bytes/bw)`` to the 230 measured
#: GEMMs in ``experiments/data/measurements/h100/gemm.csv`` (eta = 0.707, t0 = 19 us; experiments/fit_gemm.py).
#: Other GPUs: no measurement here; 0.80 is the large-GEMM plateau cuBLAS reports on A100/V100-class
#: parts that do not power-throttle as the 700 W H100 does; Hopper/Blackwell parts take the H100 value.
MATMUL_EFFICIENCY_DEFAULT = 0.80
MATMUL_EFFICIENCY: dict[str, float] = {
    "h100-sxm": 0.707,
    "h100-pcie": 0.707,
    "h200": 0.707,
    "b200": 0.707,
    "gb200": 0.707,
}

PRECISIONS = ("bf16", "fp16", "fp8")


@lru_cache(maxsize=1)
def catalog() -> dict[str, dict[str, Any]]:
    """The GPU catalog as ``{id: entry}``; each entry also gets ``matmul_efficiency``."""
    text = data_text("gpus.yaml")
    gpus = yaml.safe_load(text)["gpus"]
    for gid, entry in gpus.items():
        entry.setdefault("gpus_per_node", 8)
        entry.setdefault("nvlink_domain", entry["gpus_per_node"])
        entry["matmul_efficiency"] = MATMUL_EFFICIENCY.get(gid, MATMUL_EFFICIENCY_DEFAULT)
    return gpus


def gpu_ids() -> list[str]:
    return sorted(catalog())


def gpu(gpu_id: str) -> dict[str, Any]:
    """One catalog entry, or a one-line error listing the known ids."""
    cat = catalog()
    if gpu_id not in cat:
        raise CosearchError("cluster.gpu", f"unknown GPU id {gpu_id!r}; allowed: {', '.join(sorted(cat))}")
    return cat[gpu_id]


def peak_tflops(gpu_id: str, precision: str) -> float:
    """Dense peak TFLOP/s of ``gpu_id`` at ``precision``; error if the GPU lacks it."""
    entry = gpu(gpu_id)
    value = entry["peak_tflops"].get(precision)
    if value is None:
        have = [p for p in PRECISIONS if entry["peak_tflops"].get(p)]
        raise CosearchError(
            "training.precision",
            f"{precision} is not supported on {gpu_id}; allowed there: {', '.join(have)}",
        )
    return float(value)
