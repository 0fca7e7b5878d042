"""Tensor-core clock of a GPU run under a power limit below its rated board power, and the pace of a job's
slowest GPU.

Large GEMMs hold an H100 SXM at its 700 W limit, so a lower limit (``nvidia-smi -pl``; Meta's Grand Teton
H100s run at 500 W, torchtitan docs/performance.md) lowers the clock the matmul and attention rates scale
with. Dynamic power goes as C V^2 f and voltage tracks frequency along the DVFS curve, so
``P = P_static + (P_rated - P_static) (f / f_rated)^3`` (the cube law of CMOS dynamic power). Memory-bound
kernels keep the HBM's own clock and are not scaled.

GPUs of one SKU do not sustain the same clock: manufacturing spread under the same power management makes some
slower (Sinha et al. 2022). A synchronous job ends every step in collectives that wait for the last rank, so
its compute runs at the pace of the slowest of its N GPUs: the SKU's rate times 1 - sigma E[max of N standard
normals] (:func:`slowest_pace_factor`).
"""
from __future__ import annotations

from statistics import NormalDist

import numpy as np

from . import _ops as ops

#: Maximum achievable bf16 matmul rates and board powers of two Hopper parts with the same SM, each measured
#: with a torch.matmul shape sweep (hardware catalog, gpus.yaml): H100 SXM 792 TFLOP/s at 700 W on 132 SMs
#: (experiments/results/gpu/gemm_h100.csv; stas00/ml-engineering 794.5), H100 PCIe 496 TFLOP/s at 350 W on
#: 114 SMs (zzc0721/torch-performance-test-data issue #95).
_SXM_TFLOPS, _SXM_W, _SXM_SMS = 792.0, 700.0, 132
_PCIE_TFLOPS, _PCIE_W, _PCIE_SMS = 496.0, 350.0, 114


def _static_share() -> float:
    """Share of the rated power that does not scale with the SM clock, solved from the two parts above under
    the cube law with one static power for both: their per-SM rates give the clock ratio r, and
    ``700 = P0 + 132 k``, ``350 = P0 + 114 k r^3`` give P0 (about 180 W of 700: HBM, I/O, leakage)."""
    r = (_PCIE_TFLOPS / _PCIE_SMS) / (_SXM_TFLOPS / _SXM_SMS)
    k = (_SXM_W - _PCIE_W) / (_SXM_SMS - _PCIE_SMS * r ** 3)  # watts per SM at the SXM clock
    return (_SXM_W - _SXM_SMS * k) / _SXM_W


#: P_static / P_rated (0.254), taken for every GPU: no other part has a public rate at two power limits.
STATIC_POWER_SHARE = _static_share()


def clock_factor(power_limit_w, rated_w):
    """Sustained tensor-core clock at ``power_limit_w`` over the clock at the part's rated power ``rated_w``
    (1 at or above it, and where no limit is given: NaN). A limit at or below the static power cannot run
    the GPU; :mod:`.feasibility` refuses it, the factor here stays positive so the row still evaluates."""
    static = STATIC_POWER_SHARE * rated_w
    dynamic = ops.minimum((power_limit_w - static) / (rated_w - static), 1.0)
    factor = ops.maximum(dynamic, 1e-6) ** (1.0 / 3.0)
    return ops.where(ops.isnan(power_limit_w), 1.0, factor)


def limited(power_limit_w) -> bool:
    """Whether some row states a power limit (``power_limit_w`` neither None nor NaN everywhere): the callers
    skip the clock and draw arithmetic otherwise."""
    return power_limit_w is not None and not ops.all(ops.isnan(power_limit_w))


def drawn_w(power_w, power_limit_w):
    """Board power a GPU draws for the energy count: its rated ``power_w``, at most its limit (NaN or None: none)."""
    if not limited(power_limit_w):
        return power_w
    return ops.where(power_limit_w < power_w, power_limit_w, power_w)


#: Spread of the sustained compute rate among GPUs of one SKU, as a standard deviation (fraction of the mean).
#: Sinha et al., "Not All GPUs Are Created Equal" (SC'22, arXiv 2208.11035): 8 % average performance variation
#: across the GPUs of a cluster (Summit, Vortex, Frontera, Longhorn: V100; Corona: MI60), on compute-bound
#: kernels, outliers aside; read as the range of a cluster of 10^3-10^4 GPUs, 6.5-7.8 sigma for normal draws:
#: sigma = 1 %. ASSUMED the same for every GPU type (none measured on newer parts).
PACE_SIGMA = 0.01


def _blom(n: float) -> float:
    """Blom's approximation of E[max of n standard normals], Phi^-1((n - 0.375) / (n + 0.25)); 0 for n <= 1."""
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25)) if n > 1.0 else 0.0


#: Blom's E[max] tabulated in 1/16-octave steps of n from 1 to 2^20 GPUs (linear in log2 n between them, within
#: 1e-4 of the formula; clamped beyond): one interpolation per row, the quantile evaluated only here.
_LOG2_N = np.linspace(0.0, 20.0, 321)
_EMAX = np.array([_blom(2.0 ** x) for x in _LOG2_N])


def expected_max_normal(n):
    """E[max of n standard normal draws] (Blom's approximation, tabulated: :data:`_EMAX`); 0 for n <= 1."""
    x = ops.log2(ops.maximum(n, 1.0))
    return float(np.interp(x, _LOG2_N, _EMAX)) if ops.is_scalar(x) else np.interp(x, _LOG2_N, _EMAX)


def slowest_pace_factor(gpus, sigma=PACE_SIGMA):
    """Compute rate of the slowest of ``gpus`` GPUs over the SKU's mean: 1 - sigma E[max of N normals]
    (1 for one GPU; 0.986 for 8, 0.966 for 2,048 at sigma 1 %)."""
    if not ops.is_scalar(gpus):
        g = np.asarray(gpus, dtype=float)
        if g.size and g.min() == g.max():  # one job size in every row (the usual space): evaluated once
            return 1.0 - sigma * expected_max_normal(float(g.flat[0]))
    return 1.0 - sigma * expected_max_normal(gpus)
