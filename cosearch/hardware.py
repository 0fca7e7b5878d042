"""GPU hardware catalog: datasheet numbers with their sources, loaded from ``data/gpus.yaml``.

Units (the names say them): ``peak_tflops`` dense TFLOP/s per precision, ``hbm_gib`` GiB,
``hbm_tbps`` TB/s, ``nvlink_gbps`` GB/s per GPU per direction (bytes), ``network_gbps``
Gbit/s per GPU per direction (bits, as NICs are sold), ``power_w`` W,
``price_usd_per_gpu_hour`` USD.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

import yaml

from .errors import CosearchError
from .model.columns import EFFICIENCY_COLUMNS  # noqa: F401 - the columns catalog() fills, re-exported
from .model.compute import fp8_matmul_eta
from .data import data_yaml

#: The model's GEMM time is ``t0 + max(2mnk / (eta * peak), bytes / bw)``; eta is a FIT with a
#: per-kernel overhead t0, not a raw achieved fraction. For the reference GPU (H100 SXM) the fit of
#: that formula to the 230 measured bf16 GEMMs in ``experiments/data/measurements/h100/gemm.csv``
#: gives eta = 0.707 with t0 = 19 us (experiments/fit_gemm.py), while its best large GEMMs reach
#: 0.80 of peak (the catalog's ``efficiency.large_gemm_bf16`` of h100-sxm). Every GPU's eta is its
#: measured large-GEMM fraction scaled by that same ratio (see :func:`matmul_eta`).
REFERENCE_GPU = "h100-sxm"
REFERENCE_FIT_ETA = 0.707

PRECISIONS = ("bf16", "fp16", "fp8")


def matmul_eta(large_gemm_fraction: float | None, reference_fraction: float) -> float:
    """The model's matmul efficiency for a measured large-GEMM fraction of peak (bf16 or fp8):
    ``fraction x REFERENCE_FIT_ETA / reference_fraction``, so the reference GPU reproduces its fitted
    0.707 exactly and every other GPU (and precision) scales by its fraction relative to the
    reference's bf16 fraction. ``None`` (no fp8 measurement / no fp8) -> NaN, which the model
    replaces by the bf16 eta x ``profile.fp8_matmul_relative``."""
    if large_gemm_fraction is None:
        return float("nan")
    return REFERENCE_FIT_ETA * (float(large_gemm_fraction) / reference_fraction)


def _efficiency_block(gid: str, entry: dict[str, Any]) -> dict[str, Any]:
    eff = entry.get("efficiency")
    if not isinstance(eff, dict) or eff.get("large_gemm_bf16") is None or not eff.get("source"):
        raise CosearchError(f"gpus.yaml:{gid}.efficiency",
                            "each GPU needs an efficiency block with large_gemm_bf16, measured and source")
    return eff


def _reference_fraction(gpus: dict[str, dict[str, Any]]) -> float:
    ref = gpus.get(REFERENCE_GPU)
    if ref is None:  # a site catalog without H100: the shipped reference still defines the scale
        from importlib import resources

        ref = yaml.safe_load(resources.files("cosearch.data").joinpath("gpus.yaml").read_text())["gpus"][REFERENCE_GPU]
    return float(_efficiency_block(REFERENCE_GPU, ref)["large_gemm_bf16"])



@lru_cache(maxsize=1)
def catalog() -> dict[str, dict[str, Any]]:
    """The GPU catalog as ``{id: entry}``. Each entry also gets the model's ``matmul_efficiency``
    (bf16) and ``matmul_efficiency_fp8`` (NaN without an fp8 measurement) from its ``efficiency``
    block (:func:`matmul_eta`), ``legacy_attention_efficiency`` (the fraction of 16-bit peak that
    attention kernels written for an older architecture reach; NaN: no cap), ``attention_speedup``
    (the GPU's own attention kernel relative to the profile's ratio to its GEMM rate; 1 unless
    measured), ``efficiency_measured`` (bool, of the bf16 efficiency and of a given fp8 one), ``efficiency_fp8``
    (:func:`fp8_status`), ``efficiency_source`` and ``efficiency_assumption`` (None when measured). A null price
    becomes NaN (cost outputs empty)."""
    gpus = data_yaml("gpus.yaml", "gpus")
    ref = _reference_fraction(gpus)
    for gid, entry in gpus.items():
        entry.setdefault("gpus_per_node", 8)
        entry.setdefault("nvlink_domain", entry["gpus_per_node"])
        if entry.get("price_usd_per_gpu_hour") is None:
            entry["price_usd_per_gpu_hour"] = float("nan")
        eff = _efficiency_block(gid, entry)
        entry["matmul_efficiency"] = matmul_eta(eff["large_gemm_bf16"], ref)
        entry["matmul_efficiency_fp8"] = matmul_eta(eff.get("large_gemm_fp8"), ref)
        legacy = eff.get("legacy_attention")
        entry["legacy_attention_efficiency"] = float("nan") if legacy is None else float(legacy)
        entry["attention_speedup"] = float(eff.get("attention_speedup", 1.0))
        entry["efficiency_measured"] = bool(eff.get("measured", False))
        entry["efficiency_fp8"] = fp8_status(entry)
        entry["efficiency_source"] = str(eff["source"])
        entry["efficiency_assumption"] = None if entry["efficiency_measured"] else str(
            eff.get("assumption") or "no public GEMM measurement; see efficiency.source")
    return gpus


def efficiency_warning(gpu_id: str) -> str | None:
    """One line when ``gpu_id``'s matmul efficiency is assumed rather than measured, else None."""
    entry = gpu(gpu_id)
    if entry["efficiency_measured"]:
        return None
    return f"{gpu_id}: no public GEMM measurement; matmul efficiency assumed ({entry['efficiency_assumption']})"


def fp8_status(entry: dict[str, Any]) -> str:
    """How a catalog entry's fp8 GEMM efficiency is known, since ``efficiency.measured`` alone cannot say:
    ``measured``, ``assumed`` (with the bf16 one, see ``efficiency_assumption``), ``default`` (no fp8
    measurement: the model uses :func:`fp8_eta_used`) or ``none`` (the GPU has no fp8 peak)."""
    if not entry["peak_tflops"].get("fp8"):
        return "none"
    if entry["efficiency"].get("large_gemm_fp8") is None:
        return "default"
    return "measured" if entry["efficiency_measured"] else "assumed"


def fp8_eta_used(entry: dict[str, Any], fp8_matmul_relative: float) -> float:
    """The fp8 matmul efficiency the model uses for a catalog entry: its own, or without an fp8 measurement
    the bf16 one x ``profile.fp8_matmul_relative`` (:func:`cosearch.model.compute.fp8_matmul_eta`, as the model)."""
    return fp8_matmul_eta(entry["matmul_efficiency"], entry["matmul_efficiency_fp8"], fp8_matmul_relative)


def fp8_efficiency_warning(gpu_id: str, precision: str, fp8_matmul_relative: float) -> str | None:
    """One line when an fp8 run on ``gpu_id`` uses the default fp8 matmul efficiency (no fp8 measurement), with
    the value used: ``efficiency.measured`` describes the bf16 number, so :func:`efficiency_warning` is silent."""
    if precision != "fp8":
        return None
    entry = gpu(gpu_id)
    if entry["efficiency_fp8"] != "default":
        return None
    return (f"{gpu_id}: no public fp8 GEMM measurement; fp8 matmul efficiency assumed "
            f"{fp8_eta_used(entry, fp8_matmul_relative):.3f} (the bf16 {entry['matmul_efficiency']:.3f} x "
            f"profile.fp8_matmul_relative {fp8_matmul_relative:g})")


#: GPUs FlashAttention-2 and the 2023 Triton kernel were written for (Ampere, and Ada, which shares its
#: tensor-core instructions): their flash rate is the kernel's own, no cap is needed.
LEGACY_ATTENTION_NATIVE = ("a100-40gb", "a100-80gb", "a10g", "l4", "l40s")


def attention_warning(gpu_id: str, attention: str) -> str | None:
    """One line when an older-architecture attention kernel runs on a GPU without a measurement of it."""
    if attention not in ("flash2", "triton") or gpu_id in LEGACY_ATTENTION_NATIVE:
        return None
    if not math.isnan(gpu(gpu_id)["legacy_attention_efficiency"]):
        return None
    return (f"{gpu_id}: no public measurement of training.attention {attention} on this GPU; modelled at its own "
            "flash-attention rate" + (" / 1.8" if attention == "triton" else ""))


def gpu_ids() -> list[str]:
    return sorted(catalog())


def gpu(gpu_id: str) -> dict[str, Any]:
    """One catalog entry, or a one-line error listing the known ids."""
    cat = catalog()
    if gpu_id not in cat:
        raise CosearchError("cluster.gpu", f"unknown GPU id {gpu_id!r}; allowed: {', '.join(sorted(cat))}")
    return cat[gpu_id]


def type_columns(name: str) -> dict[str, float]:
    """The catalog's hardware columns of GPU ``name`` (:data:`cosearch.model.hetero.HARDWARE_COLUMNS`, no
    overrides) but its peak, which depends on the precision: the caller sets it."""
    from .model.hetero import HARDWARE_COLUMNS

    entry = gpu(name)
    return {k: float(entry[k]) for k in HARDWARE_COLUMNS if k != "peak_tflops"}

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
