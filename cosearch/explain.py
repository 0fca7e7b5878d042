"""``explain``: where one plan's step time and memory go, what limits it, and the change that helps most.

The breakdown comes from :func:`cosearch.estimate`. The advice comes from the model itself: every
neighbouring plan (one knob moved: micro-batch size, interleaving, recompute mode, ZeRO stage,
sequence parallelism, the expert-parallel knobs of a MoE plan, a factor moved between tp/pp/cp/dp at
the same GPU count) and a few hardware
upgrades (network and NVLink bandwidth, HBM capacity) are evaluated in **one** vectorized call of
:func:`cosearch.model.evaluate`; infeasible ones (a divisibility rule broken, or the memory does not
fit) are dropped and the rest ranked by predicted step time. The reported numbers of the changes
are then recomputed with :func:`cosearch.estimate` on the changed scenario, so what ``explain``
promises is exactly what ``cosearch estimate`` gives for the changed file.

Hardware upgrades keep the GPU's catalog price: their cost columns show the time saved, not the
price of the faster network. A rented scenario (``cloud`` section) is offered other instance types
with the same GPU count instead, priced from the catalog.
"""
from __future__ import annotations

import copy
from typing import Any, Mapping

import numpy as np

from .estimate import estimate
from .errors import CosearchError
from .inventory import inventory_link_columns
from .neighbours import HARDWARE_FACTORS, Change, inventory_changes, neighbours  # noqa: F401 - re-exported
from .model import evaluate
from .model.columns import CATEGORICAL_CODES, INPUT_COLUMNS
from .model.moe import expert_tp
from .model.profile import DEFAULT_PROFILE, Profile
from .scenario import Scenario, load_scenario, scenario_columns

#: Step-time parts grouped into what limits a plan.
LIMITERS: dict[str, tuple[str, ...]] = {
    "compute": ("compute", "optimizer"),
    "communication": ("tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm"),
    "bubble": ("bubble",),
    # work done only because HBM is too small: recomputed forwards, traffic to a memory expansion tier
    "memory": ("recompute", "offload"),
}
#: A change must cut the step time by at least this fraction to be worth suggesting.
MIN_GAIN = 0.005

_PART_LABELS = {
    "compute": "compute (forward + backward)",
    "recompute": "recompute (activation checkpointing)",
    "tp_comm": "tensor-parallel communication",
    "cp_comm": "context-parallel communication",
    "ep_comm": "expert-parallel all-to-all (token dispatch and combine)",
    "pp_comm": "pipeline sends",
    "dp_comm": "data-parallel gradient reduction",
    "bubble": "pipeline bubble",
    "optimizer": "optimizer step",
    "offload": "offload traffic (memory expansion tier)",
}


def _label(part: str) -> str:
    return _PART_LABELS.get(part, part.replace("_", " "))


def _limiter_of(part: str) -> str:
    return next((cat for cat, keys in LIMITERS.items() if part in keys), "other")


# --- step time and memory ---------------------------------------------------------------------


def _links(cols: Mapping[str, float]) -> dict[str, str]:
    """Which link each communication group crosses (Megatron rank order: tp, cp, dp, pp; the ep ranks at
    stride etp, cosearch.model.moe)."""
    dom, tp, cp, dp = cols["nvlink_domain"], cols["tp"], cols["cp"], cols["dp"]
    etp = expert_tp(cols.get("etp", float("nan")), tp)

    def link(size: float, stride: float) -> str:
        return "NVLink" if size * stride <= dom else "network"

    return {
        "tp_comm": link(tp, 1.0),
        "cp_comm": link(cp, tp),
        "ep_comm": link(cols.get("ep", 1.0), etp),
        "dp_comm": link(dp * cp, tp),
        "pp_comm": link(2.0, tp * cp * dp),
    }


def _limits(r: dict[str, Any], links: Mapping[str, str]) -> dict[str, Any]:
    total = r["step_time_s"] or 1.0
    parts = {k: (v or 0.0) for k, v in r["breakdown_s"].items()}
    shares = {cat: 0.0 for cat in LIMITERS}
    for k, v in parts.items():
        cat = _limiter_of(k)
        shares[cat] = shares.get(cat, 0.0) + v / total
    overheads = {k: v / total for k, v in parts.items() if k not in LIMITERS["compute"]}
    top_part = max(overheads, key=overheads.get)
    top_share = overheads[top_part]
    link = links.get(top_part)
    if not r["fits"]:
        limiter = "memory"
        over = r["memory_gib"] - r["usable_memory_gib"]
        reason = f"the plan does not fit: {r['memory_gib']:.1f} GiB per GPU needed, {r['usable_memory_gib']:.1f} usable ({over:+.1f} GiB)"
    else:
        limiter = max(shares, key=shares.get)
        mfu = r["mfu"] or 0.0
        if limiter == "compute":
            reason = f"{100 * shares['compute']:.0f} % of the step is useful math (MFU {100 * mfu:.0f} %)"
        elif limiter == "communication":
            comm = {k: parts[k] for k in LIMITERS["communication"]}
            worst = max(comm, key=comm.get)
            reason = (f"{100 * shares['communication']:.0f} % of the step waits on communication, "
                      f"mostly {_label(worst)} over {links.get(worst, 'the network')}")
        elif limiter == "bubble":
            reason = (f"{100 * shares['bubble']:.0f} % of the step is pipeline bubble: pp={r['scenario']['plan']['pp']} "
                      f"stages idle while {r['num_microbatches']:.0f} micro-batches fill and drain the pipeline")
        else:
            reason = (f"{100 * shares['memory']:.0f} % of the step is extra work because HBM is too small "
                      "(recomputed activations, offload traffic)")
    headroom = r["usable_memory_gib"] - r["memory_gib"]
    return {
        "limiter": limiter,
        "reason": reason,
        "shares": shares,
        "largest_overhead": {
            "part": top_part, "label": _label(top_part), "share": top_share,
            "seconds": parts[top_part], **({"link": link} if link else {}),
        },
        "memory_headroom_gib": headroom,
        "memory_bound": (not r["fits"]) or headroom < 0.1 * r["usable_memory_gib"],
    }


def _column_updates(updates: Mapping[str, Any], base: Mapping[str, float], sc: Scenario | None = None) -> dict[str, float]:
    cols: dict[str, float] = {}
    if "cloud.instance" in updates and sc is not None and sc.cloud is not None:
        # the instance type decides the hardware columns (cosearch.cloud.instance_columns)
        from .cloud import instance_columns
        from .cloud.provision import catalog_for

        cat = catalog_for(sc.cloud)
        code = cat.codes()[cat.get(updates["cloud.instance"]).key]
        hw = instance_columns(code, updates["cloud.instances"], float(sc.cloud.pricing == "spot"),
                              base["precision"], cat)
        cols.update({k: float(np.asarray(v).reshape(-1)[0]) for k, v in hw.items()})
        updates = {k: v for k, v in updates.items() if not k.startswith("cloud.")}
    for path, value in updates.items():
        key = path.split(".", 1)[1]
        if key in CATEGORICAL_CODES:
            value = CATEGORICAL_CODES[key][value]
        cols[key] = float(value)
    if "dp" not in cols and any(k in cols for k in ("tp", "pp", "cp")):
        tp, pp, cp = (cols.get(k, base[k]) for k in ("tp", "pp", "cp"))
        cols["dp"] = base["gpus"] / (tp * pp * cp)
    return cols


def changed_scenario(sc: Scenario, updates: Mapping[str, Any]) -> dict[str, Any]:
    """The scenario (as a dict) with ``updates`` (``section.key -> value``) applied."""
    data = copy.deepcopy(sc.model_dump(mode="json"))
    if any(path.startswith("cloud.") for path in updates):
        from .cloud.provision import DERIVED_CLUSTER_FIELDS

        for key in DERIVED_CLUSTER_FIELDS:  # the new instance type decides them again
            data["cluster"].pop(key, None)
    for path, value in updates.items():
        section, key = path.split(".", 1)
        data[section][key] = value
    return data


def rank_changes(sc: Scenario, profile: Profile = DEFAULT_PROFILE, changes: list[Change] | None = None,
                 stats: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Evaluate every change in one vectorized call; feasible ones, fastest first.

    Each entry: ``label``, ``kind``, ``updates``, ``step_time_s``, ``memory_gib``,
    ``cost_usd_per_step``, ``gain`` (fraction of the current step time saved) and ``speedup``.
    A change that only adds to a listed one without being faster is left out. ``stats``, when
    given, receives ``evaluated`` and ``feasible`` counts.
    """
    base = scenario_columns(sc)
    changes = neighbours(sc, base) if changes is None else changes
    if not changes:
        return []
    per_change = [_column_updates(c.updates, base, sc) for c in changes]
    keys = sorted({k for u in per_change for k in u})
    cols: dict[str, Any] = dict(base)
    for k in keys:
        cols[k] = np.array([u.get(k, base.get(k, INPUT_COLUMNS[k])) for u in per_change], dtype=float)
    if not keys:
        return []
    out = evaluate(cols, profile)
    n = len(changes)
    step = np.broadcast_to(out["step_time_s"], (n,))
    feasible = np.broadcast_to(out["feasible"], (n,)) & np.isfinite(step)
    if stats is not None:
        stats.update(evaluated=n, feasible=int(feasible.sum()))
    base_step = float(np.asarray(evaluate(base, profile)["step_time_s"]).reshape(-1)[0])
    ranked = []
    kept: list[int] = []
    for i in np.argsort(np.where(feasible, step, np.inf), kind="stable"):
        if not feasible[i]:
            break
        # a change that only adds to a kept change (e.g. more HBM on top of the same plan move)
        # without being faster is not worth listing
        mine = set(changes[i].updates.items())
        if any(set(changes[j].updates.items()) < mine and step[j] <= step[i] * (1 + 1e-9) for j in kept):
            continue
        kept.append(int(i))
        ranked.append({
            "label": changes[i].label,
            "kind": changes[i].kind,
            "updates": changes[i].updates,
            "step_time_s": float(step[i]),
            "memory_gib": float(np.broadcast_to(out["memory_gib"], (n,))[i]),
            "cost_usd_per_step": float(np.broadcast_to(out["cost_usd_per_step"], (n,))[i]),
            "gain": 1.0 - float(step[i]) / base_step,
            "speedup": base_step / float(step[i]),
        })
    return ranked


def _verified(sc: Scenario, entry: dict[str, Any], base: dict[str, Any], profile: Profile | None) -> dict[str, Any]:
    """An entry with its numbers from ``estimate`` on the changed scenario (and that scenario)."""
    scenario = changed_scenario(sc, entry["updates"])
    r = estimate(scenario, profile)
    return {
        **entry,
        "step_time_s": r["step_time_s"],
        "gain": 1.0 - r["step_time_s"] / base["step_time_s"],
        "speedup": base["step_time_s"] / r["step_time_s"],
        "memory_gib": r["memory_gib"],
        "fits": r["fits"],
        "mfu": r["mfu"],
        "cost_usd_per_step": r["cost_usd_per_step"],
        "time_to_train_days": r["time_to_train_days"],
        "cost_to_train_usd": r["cost_to_train_usd"],
        "scenario": scenario,
    }


# --- the whole explanation ----------------------------------------------------------------------


def explain(scenario: Any, profile: Profile | None = None, *, top: int = 5, calibrated_range: Any = None) -> dict[str, Any]:
    """Explain one scenario (path, dict or Scenario): breakdowns, limiter and suggested changes.

    Returns a JSON-able dict with ``estimate`` (the full :func:`cosearch.estimate` result, its ``warnings``
    included; ``calibrated_range`` as there),
    ``time`` (parts with seconds, share, label), ``memory`` (parts in GiB against usable HBM),
    ``limits`` (``limiter`` in compute | memory | communication | bubble, a ``reason``, the shares,
    the largest overhead), ``suggestion`` (the feasible change that cuts the step time most, or
    None), ``best_plan_change`` (the same restricted to the current hardware) and ``alternatives``
    (the ``top`` best changes).
    """
    sc = load_scenario(scenario)
    r = estimate(sc, profile, calibrated_range=calibrated_range)
    if sc.cluster.inventory is not None:  # hook: several GPU types (cosearch.inventory)

        cols = inventory_link_columns(sc)
    else:
        cols = scenario_columns(sc)
    total = r["step_time_s"]
    time_parts = [
        {"part": k, "label": _label(k), "limiter": _limiter_of(k), "seconds": r["breakdown_s"][k] or 0.0,
         "share": (r["breakdown_s"][k] or 0.0) / total}
        for k in r["breakdown_s"]
    ]
    usable = r["usable_memory_gib"]
    mem_parts = [  # no share where nothing is usable (an HBM override under the reserved memory)
        {"part": k, "gib": r["memory_breakdown_gib"][k] or 0.0,
         "share_of_usable": (r["memory_breakdown_gib"][k] or 0.0) / usable if usable > 0 else None}
        for k in r["memory_breakdown_gib"]
    ]
    links = _links(cols)
    stats: dict[str, int] = {}
    if sc.cluster.inventory is not None:

        ranked = rank_inventory_changes(sc, profile, stats)
        candidates = [None] * stats["evaluated"]
    else:
        candidates = neighbours(sc, cols)
        ranked = rank_changes(sc, profile or DEFAULT_PROFILE, candidates, stats)
    useful = [e for e in ranked if e["gain"] >= MIN_GAIN or not r["fits"]]
    alternatives = [_verified(sc, e, r, profile) for e in useful[:top]]
    plan_only = [e for e in useful if e["kind"] == "plan"]
    best_plan = None
    if plan_only:
        best_plan = next((a for a in alternatives if a["kind"] == "plan"), None) or _verified(sc, plan_only[0], r, profile)
    return {
        "estimate": r,
        "time": {"total_s": total, "parts": time_parts},
        "memory": {"total_gib": r["memory_gib"], "usable_gib": usable, "fits": r["fits"], "parts": mem_parts},
        "links": links,
        "limits": _limits(r, links),
        "suggestion": alternatives[0] if alternatives else None,
        "best_plan_change": best_plan,
        "alternatives": alternatives,
        "candidates_evaluated": len(candidates),
        "candidates_feasible": stats.get("feasible", 0),
        "candidates_listed": len(ranked),
    }


def rank_inventory_changes(sc: Scenario, profile: Profile | None = None,
                           stats: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """:func:`rank_changes` for an inventory: each neighbour estimated, feasible ones fastest first."""
    base = estimate(sc, profile)
    ranked = []
    changes = inventory_changes(sc)
    for label, updates in changes:
        try:
            r = estimate(changed_scenario(sc, updates), profile)
        except CosearchError:
            continue
        if not r["fits"]:
            continue
        ranked.append({"label": label, "kind": "plan", "updates": updates, "step_time_s": r["step_time_s"],
                       "memory_gib": r["memory_gib"], "cost_usd_per_step": r["cost_usd_per_step"],
                       "gain": 1.0 - r["step_time_s"] / base["step_time_s"], "speedup": base["step_time_s"] / r["step_time_s"]})
    if stats is not None:
        stats.update(evaluated=len(changes), feasible=len(ranked))
    return sorted(ranked, key=lambda e: e["step_time_s"])
