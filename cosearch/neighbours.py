"""The plans one move away from a scenario, and a few hardware upgrades: what ``explain`` tries.

One knob moved at a time (micro-batch, interleaving, schedule, recompute, ZeRO stage, sequence
parallelism, overlaps, fp8 weights, DeepPool burst, the expert-parallel knobs of a MoE model, a factor moved between
tp/pp/cp/dp at the same GPU count),
faster network/NVLink or more HBM, or for a rented cluster the other instance types with the same
GPU count. :mod:`cosearch.explain` evaluates and ranks them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import permutations
from typing import Any, Mapping

from .model.columns import CATEGORICAL_CODES
from .model.moe import expert_tp
from .model.schedules import SCHEDULE_INTERLEAVE, schedule_name
from .scenario import Scenario, gpus_used

#: Hardware upgrades tried (column, factors).
HARDWARE_FACTORS = {"network_gbps": (2.0, 4.0), "nvlink_gbps": (2.0,), "hbm_gib": (1.5, 2.0)}


@dataclass
class Change:
    """One candidate change: scenario paths -> new values, and what kind of change it is."""

    label: str
    kind: str  # "plan" | "hardware"
    updates: dict[str, Any] = field(default_factory=dict)


def _divisors_near(x: int) -> list[int]:
    return sorted({max(1, x // 2), x * 2, x + 1, max(1, x - 1), 1, 2, 4, 8} - {x})


def neighbours(sc: Scenario, cols: Mapping[str, float]) -> list[Change]:
    """Every plan one move away from ``sc`` (same GPUs) and a few hardware upgrades."""
    pl = sc.plan
    out: list[Change] = []
    for mb in _divisors_near(pl.microbatch):
        out.append(Change(f"microbatch {pl.microbatch} -> {mb}", "plan", {"plan.microbatch": mb}))
    for v in sorted({1, 2, 3, 4, 6, 8, pl.interleave * 2, max(1, pl.interleave // 2)} - {pl.interleave}):
        upd: dict[str, Any] = {"plan.interleave": v}
        if pl.schedule in ("1f1b", "interleaved"):  # an explicit 1F1B-family schedule follows v
            upd["plan.schedule"] = "interleaved" if v > 1 else "1f1b"
        out.append(Change(f"interleave {pl.interleave} -> {v}", "plan", upd))
    if pl.pp > 1:
        out += schedule_changes(pl)
    for rc in CATEGORICAL_CODES["recompute"]:
        if rc != pl.recompute:
            out.append(Change(f"recompute {pl.recompute} -> {rc}", "plan", {"plan.recompute": rc}))
    for z in (0, 1, 2, 3):
        if z != pl.zero:
            out.append(Change(f"zero {pl.zero} -> {z}", "plan", {"plan.zero": z}))
    if pl.tp > 1 or pl.sequence_parallel:
        out.append(Change(f"sequence_parallel {str(pl.sequence_parallel).lower()} -> {str(not pl.sequence_parallel).lower()}",
                          "plan", {"plan.sequence_parallel": not pl.sequence_parallel}))
    if not pl.overlap_grad_reduce:
        out.append(Change("overlap_grad_reduce false -> true", "plan", {"plan.overlap_grad_reduce": True}))
    if pl.pp == 1 and not pl.burst:  # DeepPool burst parallelism (cosearch.model.burst)
        out.append(Change("burst false -> true", "plan", {"plan.burst": True}))
    if pl.tp > 1 and not pl.tp_comm_overlap:
        out.append(Change("tp_comm_overlap false -> true", "plan", {"plan.tp_comm_overlap": True}))
    if sc.training.precision == "fp8" and pl.zero >= 1 and not pl.fp8_param_gather:
        out.append(Change("fp8_param_gather false -> true", "plan", {"plan.fp8_param_gather": True}))
    if sc.model.experts:
        out += moe_changes(sc)
    # Move a factor between two mesh dimensions; the GPU count stays the same.
    mesh = {"tp": float(cols["tp"]), "pp": float(cols["pp"]), "cp": float(cols["cp"]), "dp": float(cols["dp"])}
    for up, down in permutations(mesh, 2):
        for f in (2, 3, 4):
            if mesh[down] % f:
                continue
            new = dict(mesh, **{up: mesh[up] * f, down: mesh[down] / f})
            upd = {f"plan.{k}": int(new[k]) for k in ("tp", "pp", "cp") if new[k] != mesh[k]}
            if pl.dp is not None:
                upd["plan.dp"] = int(new["dp"])
            label = f"{up} {mesh[up]:.0f} -> {new[up]:.0f}, {down} {mesh[down]:.0f} -> {new[down]:.0f}"
            out.append(Change(label, "plan", upd))
    if sc.cloud is not None:
        out.extend(_instance_changes(sc))
        return out  # a rented cluster's hardware comes from its instance type, not from upgrades
    hw = {k: float(cols[k]) for k in HARDWARE_FACTORS}
    names = {"network_gbps": ("network", "Gbit/s per GPU"), "nvlink_gbps": ("NVLink", "GB/s"), "hbm_gib": ("HBM", "GiB")}
    for key, factors in HARDWARE_FACTORS.items():
        word, unit = names[key]
        for f in factors:
            val = round(hw[key] * f, 3)
            label = f"{word} {hw[key]:g} -> {val:g} {unit} (x{f:g})"
            out.append(Change(label, "hardware", {f"cluster.{key}": val}))
            if key == "hbm_gib":
                # More memory is worth something only through what it lets the plan drop.
                for rc in CATEGORICAL_CODES["recompute"]:
                    if rc != pl.recompute:
                        out.append(Change(f"{label}, recompute {pl.recompute} -> {rc}", "hardware",
                                          {f"cluster.{key}": val, "plan.recompute": rc}))
                for mb in (pl.microbatch * 2, pl.microbatch * 4):
                    out.append(Change(f"{label}, microbatch {pl.microbatch} -> {mb}", "hardware",
                                      {f"cluster.{key}": val, "plan.microbatch": mb}))
    return out


def moe_changes(sc: Scenario) -> list[Change]:
    """Expert-parallel moves of a MoE plan (issue 13): ep halved or doubled, experts not tensor-split
    (etp 1), the other token dispatcher, the all-to-all hidden behind compute, fp8 dispatch under fp8,
    one-launch grouped GEMMs instead of one launch per expert.
    Moves the model's rules refuse (experts % ep, ep*etp dividing tp*cp*dp) are dropped by the caller."""
    pl = sc.plan
    out = [Change(f"ep {pl.ep} -> {e}", "plan", {"plan.ep": e}) for e in sorted({max(1, pl.ep // 2), pl.ep * 2} - {pl.ep})]
    etp = expert_tp(pl.etp, pl.tp)
    if etp > 1:
        out.append(Change(f"etp {etp} -> 1", "plan", {"plan.etp": 1}))
    other = "deepep" if pl.moe_dispatcher == "alltoall" else "alltoall"
    out.append(Change(f"moe_dispatcher {pl.moe_dispatcher} -> {other}", "plan", {"plan.moe_dispatcher": other}))
    if pl.moe_a2a_overlap < 1.0:
        out.append(Change(f"moe_a2a_overlap {pl.moe_a2a_overlap:g} -> 1", "plan", {"plan.moe_a2a_overlap": 1.0}))
    if sc.training.precision == "fp8" and not pl.moe_fp8_dispatch:
        out.append(Change("moe_fp8_dispatch false -> true", "plan", {"plan.moe_fp8_dispatch": True}))
    if pl.moe_grouped_gemm == "per_expert":
        out.append(Change("moe_grouped_gemm per_expert -> grouped", "plan", {"plan.moe_grouped_gemm": "grouped"}))
    return out


def schedule_changes(pl: Any) -> list[Change]:
    """The other pipeline schedules, each with the interleave it runs (zb-v 2 chunks, interleaved v or 2)."""
    cur = schedule_name(pl.schedule, pl.interleave)
    out = []
    for name, chunks in SCHEDULE_INTERLEAVE.items():
        if name == cur:
            continue
        v = chunks if chunks is not None else (pl.interleave if pl.interleave > 1 else 2)
        upd: dict[str, Any] = {"plan.schedule": name}
        label = f"schedule {cur} -> {name}"
        if v != pl.interleave:
            upd["plan.interleave"] = v
            label += f", interleave {pl.interleave} -> {v}"
        out.append(Change(label, "plan", upd))
    return out


def _instance_changes(sc: Scenario) -> list[Change]:
    """Other catalog instance types that rent the same number of GPUs (spot ones only when the
    scenario rents spot), for a scenario with a ``cloud`` section."""
    from .cloud.provision import catalog_for, instance_of

    cat, current = catalog_for(sc.cloud), instance_of(sc.cloud)
    gpus = sc.cluster.gpus
    out = []
    for it in cat.instances.values():
        if it.key == current.key or gpus % it.gpus or (sc.cloud.pricing == "spot" and not it.has_spot):
            continue
        n = gpus // it.gpus
        out.append(Change(f"instance {current.key} x {sc.cloud.instances} -> {it.key} x {n}", "hardware",
                          {"cloud.instance": it.key, "cloud.instances": n}))
    return out


def inventory_changes(sc: Scenario) -> list[tuple[str, dict[str, Any]]]:
    """Neighbouring plans of an inventory scenario: the other composition, fewer GPUs of one type (a
    half, none), a factor moved between tp and the replica / stage count, micro-batch and recompute."""
    pl, used = sc.plan, gpus_used(sc)
    out: list[tuple[str, dict[str, Any]]] = []
    other = "data" if pl.hetero == "pipeline" else "pipeline"
    out.append((f"compose by {other}", {"plan.hetero": other}))
    for name, n in used.items():
        for new in sorted({n // 2, 0, sc.cluster.inventory[name]} - {n}):
            if sum(used.values()) - n + new > 0:
                out.append((f"{name}: {n} -> {new} GPUs", {"plan.gpus_by_type": {**used, name: new}}))
    size = "pp" if pl.hetero == "data" else "dp"
    current = getattr(pl, size) or 1
    for f in (2, 4):
        out.append((f"tp {pl.tp} -> {pl.tp * f}", {"plan.tp": pl.tp * f}))
        out.append((f"{size} {current} -> {current * f}", {f"plan.{size}": current * f}))
        if pl.tp % f == 0:
            out.append((f"tp {pl.tp} -> {pl.tp // f}", {"plan.tp": pl.tp // f}))
        if current % f == 0:
            out.append((f"{size} {current} -> {current // f}", {f"plan.{size}": current // f}))
    for mb in (pl.microbatch * 2, pl.microbatch // 2):
        if mb >= 1:
            out.append((f"microbatch {pl.microbatch} -> {mb}", {"plan.microbatch": mb}))
    for rc in ("none", "selective", "full"):
        if rc != pl.recompute:
            out.append((f"recompute {pl.recompute} -> {rc}", {"plan.recompute": rc}))
    return out
