"""Exact integer min-max splits: layers over pipeline stages, micro-batches over data-parallel replicas.

The heterogeneous compositions (:mod:`.hetero`) ask the same question twice: give ``total`` units to
groups of identical members (stages or replicas of one GPU type), each unit costing the group's time per
unit, so that the slowest member finishes first. Vectorized over rows (no loop per configuration).
"""
from __future__ import annotations

import numpy as np

#: Halvings of the bisection before its answer is checked (and after, where the check fails: to the last bit).
_BISECTIONS = 64


def balanced_split(total, count, per_unit_s, fixed_s, cap=None):
    """Exact integer min-max split of ``total`` units (layers, micro-batches) over groups of identical members.

    Group g has ``count[g]`` members, each taking ``n`` units (1 <= n <= cap[g]) in time
    ``fixed_s[g] + n * per_unit_s[g]``; members of a group may differ by one unit. Minimizes the
    largest member time T: T is the least value with ``sum_g count_g * min(cap_g, floor((T - fixed_g) /
    per_unit_g)) >= total``, found by bisection over the whole column of rows between the continuous
    relaxation's bound and that bound plus the slowest unit, then read back as the time of an actual split
    and checked: no smaller T may hold the units (else the bisection goes on to the last float bit).
    Arrays are (groups, rows). Returns (T, units per member at most, units per group, feasible); surplus
    units are taken from the slowest-per-unit groups first, which keeps the sum of member times least.
    """
    count = np.asarray(count, dtype=float)
    w, e = np.broadcast_arrays(np.asarray(per_unit_s, dtype=float), np.asarray(fixed_s, dtype=float))
    total = np.broadcast_to(np.asarray(total, dtype=float), w.shape[1:])
    cap = np.full(w.shape, np.inf) if cap is None else np.broadcast_to(np.asarray(cap, dtype=float), w.shape)
    active = count > 0
    lim = np.where(active, np.minimum(cap, total), np.inf)
    feasible = np.all(~active | (lim >= 1), axis=0) & (np.sum(count * np.where(active, lim, 0.0), axis=0) >= total)
    cnt = np.where(active, count, 0.0)
    inv_w = np.where(active, 1.0 / w, 0.0)
    e0, lim0 = np.where(active, e, 0.0), np.where(active, lim, 0.0)

    def units(t):
        u = np.floor((t - e0) * inv_w)
        np.maximum(u, 0.0, out=u)
        return np.minimum(u, lim0, out=u)

    def enough(t):
        return np.sum(cnt * units(t), axis=0) >= total

    lo = floor = np.max(np.where(active, e + w, -np.inf), axis=0)              # every member takes one unit
    hi = np.max(np.where(active, e + w * np.where(np.isfinite(lim), lim, total), -np.inf), axis=0)
    # the continuous relaxation bounds T* from below; without binding caps T* <= that bound + the slowest unit
    t_c = (total + np.sum(cnt * e0 * inv_w, axis=0)) / np.sum(cnt * inv_w, axis=0)
    near = t_c + np.max(np.where(active, w, 0.0), axis=0)
    lo = np.where(feasible, np.maximum(lo, t_c), 0.0)
    hi = np.where(feasible, np.where(enough(near), np.minimum(near, hi), hi), 0.0)
    hi = np.where(enough(hi), hi, np.nextafter(hi, np.inf))  # a member time floor() rounded down
    lo = np.minimum(lo, hi)
    for rounds in (_BISECTIONS // 2, _BISECTIONS):
        for _ in range(rounds):
            mid = 0.5 * (lo + hi)
            ok = enough(mid)
            hi = np.where(ok, mid, hi)
            lo = np.where(ok, lo, mid)
        # optimal when no T below the split's own largest member time holds the units, or when that time is
        # the one-unit floor (to 1e-12: rounding)
        n = np.where(active, np.maximum(units(hi), 1.0), 0.0)
        t_snap = np.max(np.where(active, e + n * w, -np.inf), axis=0)
        below = t_snap * (1.0 - 1e-12)
        if not np.any(feasible & (below > floor) & enough(below)):
            break
    group_units = cnt * n
    surplus = np.sum(group_units, axis=0) - total
    for g in np.argsort(-w, axis=0, kind="stable"):  # row-wise order: slowest per unit first
        rows = np.arange(w.shape[1])
        take = np.minimum(np.maximum(surplus, 0.0), count[g, rows] * (n[g, rows] - 1.0) * active[g, rows])
        group_units[g, rows] -= take
        surplus = surplus - take
    n = np.where(active, np.ceil(group_units / np.where(active, count, 1.0)), 0.0)  # members differ by one at most
    t_max = np.max(np.where(active & (n > 0), e + n * w, -np.inf), axis=0)
    return np.where(feasible, t_max, np.nan), n, group_units, feasible
