"""Efficiency constants of the performance model, each with the measurement or source behind it.

These are the only tunables of the model. They are global (never per run) and can be refitted to a
user's own measurements (``cosearch calibrate``), which writes a profile YAML with these fields.

Two profiles ship:
* ``KERNEL_PROFILE`` (the field defaults): kernel-level physics. On one transformer layer measured
  on a real H100 and H200 it predicts forward+backward within a few per cent
  (experiments/gpu/compare_layer.py).
* ``DEFAULT_PROFILE``: the kernel profile with the end-to-end constants (sustained matmul fraction,
  attention kernel efficiency, FSDP overlap) refitted to the published runs in
  experiments/data/validation (data/profile_published.yaml, made by experiments/calibrate_default.py).
  Real frameworks lose throughput to things a kernel model does not see (clock throttling, host
  overhead, collective/compute contention, older attention kernels); this profile carries them.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


#: Floor of every rate fraction below: a rate under 1 % of its datasheet value is no working GPU, and
#: near zero it only turns step times into inf (a profile is refused instead).
RATE_FLOOR = 0.01


class Profile(BaseModel):
    """Achievable fractions of datasheet rates and fixed latencies."""

    model_config = ConfigDict(extra="forbid")

    #: Per-GEMM fixed time (launch, fill and drain of the tile pipeline), seconds. Fit of
    #: ``t = t0 + max(F/(eta*peak), bytes/bw)`` to experiments/data/measurements/h100/gemm.csv (experiments/fit_gemm.py).
    gemm_overhead_s: float = Field(19e-6, ge=0)
    #: Scale on each GPU's catalog matmul efficiency (1.0 = as measured / catalogued).
    matmul_scale: float = Field(1.0, ge=RATE_FLOOR, le=1.5)
    #: Flash-attention throughput relative to the GPU's large-GEMM throughput. FlashAttention-2
    #: (Dao 2023, Fig. 5-7) reaches 50-73 % of A100 peak forward and about 60 % backward, i.e. about
    #: 0.75 of a large GEMM; the causal mask halves the work and is accounted for separately.
    flash_attention_relative: float = Field(0.75, ge=RATE_FLOOR, le=1.5)
    #: The 2023 Triton flash-attention kernel relative to FlashAttention-2: "FlashAttention-2 is
    #: 1.3-2.5x faster than FlashAttention in Triton" (Dao 2023, sec. 4.1); the geometric mid-point 1.8.
    triton_attention_relative: float = Field(1.0 / 1.8, ge=RATE_FLOOR, le=1.0)
    #: Achieved fraction of HBM bandwidth in memory-bound kernels (norms, activations, optimizer).
    #: A device-to-device copy on the measured H100 moved 3.00 of 3.35 TB/s (gemm.csv README).
    #: Measured device-to-device copies: H100 2.98 of 3.35 TB/s, H200 3.93 of 4.8 (results/gpu/gemm_*.csv).
    hbm_efficiency: float = Field(0.85, ge=RATE_FLOOR, le=1.0)
    #: NCCL bus bandwidth over NVLink as a fraction of the per-direction link rate (nccl-tests on
    #: DGX A100: ~230 of 300 GB/s; DGX H100: ~360-370 of 450 GB/s).
    nvlink_efficiency: float = Field(0.78, ge=RATE_FLOOR, le=1.0)
    #: NCCL bus bandwidth over the scale-out network as a fraction of NIC line rate (nccl-tests
    #: issues #119, #175: 85-96 of 100 GB/s per node on 4x HDR; 86 of 100 GB/s).
    network_efficiency: float = Field(0.85, ge=RATE_FLOOR, le=1.0)
    #: Per-step latency of a collective hop inside the NVLink domain / across the network, seconds.
    nvlink_latency_s: float = Field(4e-6, ge=0)
    network_latency_s: float = Field(10e-6, ge=0)
    #: Fraction of one micro-batch's backward pass that can hide the data-parallel gradient
    #: reduction (bucketed overlap as in PyTorch DDP / Megatron --overlap-grad-reduce).
    dp_overlap: float = Field(1.0, ge=0, le=1.0)
    #: Fraction of compute that hides FSDP/ZeRO-3 parameter gathers and gradient reduce-scatters
    #: (prefetch of the next layer while the current one computes).
    fsdp_overlap: float = Field(1.0, ge=0, le=1.0)
    #: Fraction of tensor-parallel communication hidden behind GEMMs when the plan turns on
    #: ``tp_comm_overlap`` (Megatron-Core/NeMo with Transformer Engine userbuffers: collectives are
    #: split into chunks pipelined with the GEMM chunks; the first chunk and SM sharing stay exposed).
    tp_overlap: float = Field(0.75, ge=0, le=1.0)
    #: HBM kept by the CUDA context (~0.5 GiB), cuBLAS workspaces and NCCL buffers, GiB.
    hbm_reserved_gib: float = Field(1.5, ge=0)
    #: Fraction of the remaining HBM lost to allocator fragmentation. NeMo/Megatron-Core recipes run
    #: PyTorch's caching allocator with ``expandable_segments:True``, which maps segments on demand
    #: and leaves little fragmentation; a few per cent stay for transient workspaces.
    hbm_fragmentation: float = Field(0.03, ge=0, lt=1)
    #: FP8 GEMM efficiency relative to the bf16 efficiency: measured fp8/bf16 throughput of
    #: torch._scaled_mm vs matmul on H100 and H200 is 1.80x for a 2x peak (results/gpu/gemm_*.csv).
    #: Casting activations to fp8 is charged separately as memory traffic.
    fp8_matmul_relative: float = Field(0.90, ge=RATE_FLOOR, le=1.0)


def _published_profile() -> "Profile":
    from ..data import data_doc

    try:
        fitted = data_doc("profile_published.yaml") or {}
    except FileNotFoundError:
        return Profile()
    return Profile(**fitted.get("profile", {}))


KERNEL_PROFILE = Profile()
DEFAULT_PROFILE = _published_profile()
