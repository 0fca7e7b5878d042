"""A short digest of the model's answers on fixed probe scenarios.

Every script in experiments/ that reports model outputs writes it into its results JSON
(``model_fingerprint``), and tests/test_results_fresh.py compares it with the current model's: a change
to the physics, the catalog or the shipped profile that moves a probe's step time or memory makes the
committed results stale until their scripts are re-run. A refactor that leaves every answer the same
leaves the digest the same. The probes span the model's branches: dense and MoE, bf16 and fp8,
3-D parallel, ZeRO-3, context parallel, and several GPU vendors and generations.
"""
from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

from .estimate import estimate
from .presets import preset

#: (name, scenario): shipped presets on catalog GPUs, plans chosen to reach different branches (not all fit)
PROBES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("llama3-70b h100 bf16 3-D", {
        "model": "llama3-70b", "training": {"global_batch": 64, "precision": "bf16"},
        "cluster": {"gpu": "h100-sxm", "gpus": 64},
        "plan": {"tp": 4, "pp": 4, "interleave": 5, "sequence_parallel": True, "zero": 1, "tp_comm_overlap": True}}),
    ("llama3-70b h100 fp8 weights fsdp", {  # plan.fp8_param_gather: 1-byte weights, fp8 FSDP gathers
        "model": "llama3-70b", "training": {"global_batch": 128, "precision": "fp8"},
        "cluster": {"gpu": "h100-sxm", "gpus": 64},
        "plan": {"tp": 2, "zero": 3, "microbatch": 1, "recompute": "full", "sequence_parallel": True,
                 "fp8_param_gather": True}}),
    ("llama3-8b b200 fp8", {
        "model": "llama3-8b", "training": {"global_batch": 128, "precision": "fp8"},
        "cluster": {"gpu": "b200", "gpus": 16},
        "plan": {"tp": 1, "pp": 1, "microbatch": 2, "zero": 1}}),
    ("gpt3-175b a100 selective", {
        "model": "gpt3-175b", "training": {"global_batch": 1536},
        "cluster": {"gpu": "a100-80gb", "gpus": 1024},
        "plan": {"tp": 8, "pp": 16, "interleave": 3, "recompute": "selective", "sequence_parallel": True}}),
    ("mpt-30b a100 zero-3", {
        "model": "mpt-30b", "training": {"global_batch": 512},
        "cluster": {"gpu": "a100-40gb", "gpus": 64},
        "plan": {"zero": 3, "recompute": "full", "microbatch": 2}}),
    ("llama3-405b h100 long context", {
        "model": {**preset("llama3-405b"), "seq_len": 131072}, "training": {"global_batch": 64, "precision": "bf16"},
        "cluster": {"gpu": "h100-sxm", "gpus": 1024},
        "plan": {"tp": 8, "pp": 8, "cp": 16, "sequence_parallel": True, "zero": 1, "recompute": "full"}}),
    ("llama2-70b mi300x", {
        "model": "llama2-70b", "training": {"global_batch": 256},
        "cluster": {"gpu": "mi300x", "gpus": 64},
        "plan": {"tp": 2, "pp": 1, "zero": 3, "recompute": "selective"}}),
    ("deepseek-v3 h800 moe", {
        "model": "deepseek-v3", "training": {"global_batch": 8192, "precision": "fp8"},
        "cluster": {"gpu": "h800", "gpus": 2048},
        "plan": {"tp": 1, "pp": 16, "ep": 64, "recompute": "selective", "zero": 1, "schedule": "dualpipe",
                 "recompute_mla_up_proj": True, "moe_dispatcher": "deepep", "moe_a2a_overlap": 1.0}}),
    ("qwen3-30b-a3b h100 moe all-to-all", {  # 16 experts a rank: Megatron-Core's sort by local expert
        "model": "qwen3-30b-a3b", "training": {"global_batch": 256, "precision": "bf16"},
        "cluster": {"gpu": "h100-sxm", "gpus": 16},
        "plan": {"tp": 1, "pp": 1, "ep": 8, "microbatch": 2, "zero": 1, "moe_dispatcher": "alltoall"}}),
    ("mixtral-8x7b gb200 moe", {
        "model": "mixtral-8x7b", "training": {"global_batch": 256, "precision": "bf16"},
        "cluster": {"gpu": "gb200", "gpus": 64},
        "plan": {"tp": 2, "pp": 1, "ep": 8, "sequence_parallel": True, "zero": 1}}),
    # the stated-stack branches: FlashAttention-2's rate, eager memory-bound ops, a power limit, per-op SAC,
    # prefetching FSDP, and a full recompute stopped early under async TP (forward collectives hidden only)
    ("llama3-8b h100 500 W eager op-sac", {
        "model": "llama3-8b", "training": {"global_batch": 64, "precision": "bf16", "attention": "flash2",
                                           "fusion": "eager"},
        "cluster": {"gpu": "h100-sxm", "gpus": 8, "power_limit_w": 500},
        "plan": {"zero": 3, "microbatch": 2, "recompute": "op", "fsdp_overlap": 1.0}}),
    ("llama3-8b h200 fp8 early stop", {
        "model": "llama3-8b", "training": {"global_batch": 64, "precision": "fp8", "attention": "flash2"},
        "cluster": {"gpu": "h200", "gpus": 16},
        "plan": {"tp": 2, "zero": 3, "microbatch": 2, "recompute": "full", "recompute_early_stop": True,
                 "sequence_parallel": True, "tp_comm_overlap": True, "tp_overlap_passes": "forward"}}),
)

#: Outputs digested (the prediction band's ends are left out: experiments/prediction_interval.py writes
#: the band, and its own results would otherwise be stale the moment it saved them).
KEYS = ("step_time_s", "memory_gib", "fits")


def probe_values() -> list[tuple[str, dict[str, Any]]]:
    """(probe name, {output: value}) of each probe under the shipped profile."""
    found = []
    for name, sc in PROBES:
        out = estimate(sc)
        found.append((name, {k: out[k] for k in KEYS}))
    return found


def digest(values: list[tuple[str, dict[str, Any]]]) -> str:
    """12 hex digits of SHA-256 over :func:`probe_values`-shaped outputs, each rounded to 6 significant
    digits (so that a last-bit difference of a libm function on another machine does not count)."""
    text = ";".join(f"{name}:" + ",".join(f"{float(v):.6g}" for v in out.values()) for name, out in values)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@lru_cache(maxsize=1)
def model_fingerprint() -> str:
    """:func:`digest` of the probes under the shipped profile (computed once per process)."""
    return digest(probe_values())
