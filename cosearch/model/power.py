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

# Acklam's rational approximation of the standard normal quantile (relative error below 1.2e-9), the central
# region and the upper tail (the quantiles here are at or above 0.5)
_A = (-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02, 1.383577518672690e+02,
      -3.066479806614716e+01, 2.506628277459239e+00)
_B = (-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02, 6.680131188771972e+01,
      -1.328068155288572e+01)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00, -2.549732539343734e+00,
      4.374664141464968e+00, 2.938163982698783e+00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00, 3.754408661907416e+00)
_P_HIGH = 1.0 - 0.02425
_LN2 = 0.6931471805599453


def _poly(coefs, x):
    out = 0.0 * x + coefs[0]
    for k in coefs[1:]:
        out = out * x + k
    return out


def normal_quantile_upper(p):
    """Phi^-1(p) for 0.5 <= p < 1 (scalars or arrays)."""
    q = p - 0.5
    r = q * q
    central = _poly(_A, r) * q / (_poly(_B, r) * r + 1.0)
    t = (-2.0 * _LN2 * ops.log2(ops.maximum(1.0 - p, 1e-300))) ** 0.5
    tail = -_poly(_C, t) / (_poly(_D, t) * t + 1.0)
    return ops.where(p > _P_HIGH, tail, central)


def _blom(n):
    """Blom's approximation of E[max of n standard normals], Phi^-1((n - 0.375) / (n + 0.25)); 0 for n <= 1."""
    return np.where(n > 1.0, normal_quantile_upper((n - 0.375) / (n + 0.25)), 0.0)


#: Blom's E[max] tabulated in 1/16-octave steps of n from 1 to 2^20 GPUs (linear in log2 n between them, within
#: 1e-4 of the formula; clamped beyond): one interpolation per row instead of the quantile's two branches.
_LOG2_N = np.linspace(0.0, 20.0, 321)
_EMAX = _blom(2.0 ** _LOG2_N)


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
