"""Burst parallelism and GPU multiplexing (DeepPool: Park et al., "Efficient Strong Scaling Through
Burst Parallel Training", MLSys 2022).

At a fixed global batch each block of layers runs on its own data-parallel width ``w`` (a power-of-two
fraction of the plan's ``dp``, as DeepPool's planner splits the batch: ``parallelizationPlanner.py``,
``searchBestSplits``), chosen by a shortest path over the blocks that minimizes the step time. The
cost of one block at width ``w`` is read off the uniform model evaluated at ``dp = w``
(:func:`cosearch.model.evaluate`, no physics is rewritten here): with ``X`` the micro-batch work
(compute, recompute, tensor/context-parallel comm), ``H`` the logits head's share of it, ``R`` the rest
of the step (gradient reduction, FSDP traffic, optimizer, offload) and ``phi`` a block's parameter share,

  T_layer(w) = (X - H) / L + phi_layer * R        T_head(w) = H + phi_head * R

so that ``L * T_layer + T_head`` is exactly the uniform step at width ``w``. Changing width between
consecutive blocks moves activations forward and their gradients backward (DeepPool's
``calcInputXfer``): each GPU of the narrower set receives the sequences it did not hold,
``B (1/w_lo - 1/w_hi)`` sequences of ``s h`` 16-bit values split over ``tp * cp`` ranks.

Multiplexing: a low-priority background job runs in the foreground's idle GPU-seconds (GPUs a narrow
block leaves, pipeline bubbles, exposed communication): ``bg = idle_gpu_s / step * rate * (1 - i)``
with ``rate`` the background job's standalone tokens/s per GPU and ``i`` the interference factor.
"""
from __future__ import annotations

import numpy as np

from . import collectives as coll
from .memory import GIB

#: Data-parallel widths tried per block: dp, dp/2, ..., dp/2**(BURST_WIDTHS-1) (integers only; down to
#: one replica for dp <= 1024).
BURST_WIDTHS = 11
#: Share of the idle GPU time a multiplexed background job loses (kernel-granular priority scheduling,
#: cache and HBM contention, context switches). ASSUMPTION: DeepPool schedules the background job on
#: low-priority CUDA streams; the public record (the MLSys'22 abstract: 1.2-2.3x total cluster
#: throughput over data parallelism at scale) gives no per-job loss. Set plan.multiplex_interference
#: to a measured value.
DEFAULT_INTERFERENCE = 0.25
#: Bytes per activation element moved between blocks (16-bit activations).
ACT_BYTES = 2.0

_COST_KEYS = ("step_time_s", "time_compute_s", "time_recompute_s", "time_tp_comm_s", "time_cp_comm_s",
              "memory_gib", "fits", "valid")


def candidate_widths(dp, n_widths=BURST_WIDTHS):
    """(N, K) data-parallel widths dp / 2**k; NaN where not a positive integer."""
    w = np.asarray(dp, dtype=float)[:, None] / 2.0 ** np.arange(n_widths)
    return np.where((w >= 1.0) & (w == np.floor(w)), w, np.nan)


def block_costs(step_s, work_s, busy_s, head_s, layers, layer_param_share):
    """Per-layer and head step time and busy time at each width (all (N, K) arrays but the shares).

    ``step_s``: uniform step at that width; ``work_s``: its micro-batch work (compute, recompute, tp
    and cp comm); ``busy_s``: its compute + recompute; ``head_s``: the logits head's compute.
    Returns (t_layer, t_head, busy_layer, busy_head); ``layers * t_layer + t_head == step_s``."""
    rest = step_s - work_s
    head_share = 1.0 - layers * layer_param_share
    t_layer = (work_s - head_s) / layers + layer_param_share * rest
    t_head = head_s + head_share * rest
    return t_layer, t_head, (busy_s - head_s) / layers, head_s


def amplification_ok(t, widths, limit):
    """(N, K) widths a block may use under DeepPool's amplification limit: its GPU time ``w * t(w)`` at
    most ``limit`` times that on the narrowest usable width (``searchBestSplits``, default 2.0 there);
    the narrowest usable width is always allowed. ``limit`` NaN: no limit."""
    gpu_time = widths * t
    base_idx = (np.isfinite(gpu_time) * np.arange(gpu_time.shape[1])).argmax(axis=1)[:, None]
    base = np.take_along_axis(gpu_time, base_idx, axis=1)
    lim = np.asarray(limit, dtype=float)[:, None]
    return np.isnan(lim) | (gpu_time <= lim * base)


def transition_s(widths, global_batch, seq_len, hidden, tp, cp, fabric):
    """(N, K, K) time to move activations (forward) and their gradients (backward) from a block on
    width i to a block on width j: the narrower set's GPUs each receive B(1/w_lo - 1/w_hi) sequences."""
    wi, wj = widths[:, :, None], widths[:, None, :]
    lo, hi = np.minimum(wi, wj), np.maximum(wi, wj)
    per_seq = seq_len * hidden * ACT_BYTES / (tp * cp)
    moved = global_batch * (1.0 / lo - 1.0 / hi) * per_seq
    stride = lo * tp * cp
    t = 2.0 * (moved / fabric.bandwidth_Bps(2.0, stride) + fabric.latency_s(2.0, stride))
    return np.where(wi == wj, 0.0, t)


def shortest_schedule(stages, trans, widths, gpus_per_width, record=False):
    """Min-plus shortest path over ``stages`` ((cost (N, K), busy (N, K), repeat) in order).

    A stage repeated n times is iterated until its increments stop changing (then the rest is added
    in one go: the min-plus step commutes with adding a constant, so this is exact). Returns
    (step_s, busy_gpu_s, min_width, path) with ``path`` the (N, n_stages) width indices when
    ``record`` (no shortcut then)."""
    n, k = widths.shape
    big = np.inf
    value = busy = minw = None
    path: list[np.ndarray] = []
    rows = np.arange(n)[:, None]
    for cost, busy_stage, repeat in stages:
        done = 0
        while done < repeat:
            gpu_busy = gpus_per_width * busy_stage
            if value is None:
                new_v, new_b, new_m = cost.copy(), gpu_busy, widths.copy()
                back = np.zeros((n, k), dtype=np.intp)
            else:
                total = value[:, :, None] + trans               # (N, from, to)
                back = np.argmin(total, axis=1)                  # best predecessor of each width
                new_v = np.take_along_axis(total, back[:, None, :], axis=1)[:, 0, :] + cost
                new_b = busy[rows, back] + gpu_busy
                new_m = np.fmin(minw[rows, back], widths)
            new_v = np.where(np.isnan(new_v), big, new_v)
            done += 1
            if record:
                path.append(back)
            elif value is not None and done < repeat:
                left = repeat - done
                step_inc = _steady_increment(new_v - value, new_b - busy, np.isfinite(new_v), np.isfinite(value))
                if step_inc is not None and np.array_equal(new_m, minw, equal_nan=True):
                    dv, db = step_inc
                    new_v = np.where(np.isfinite(new_v), new_v + left * dv, big)
                    new_b = new_b + left * db
                    done = repeat
            value, busy, minw = new_v, new_b, new_m
    best = np.argmin(value, axis=1)
    out = (value[rows[:, 0], best], busy[rows[:, 0], best], minw[rows[:, 0], best])
    if not record:
        return (*out, None)
    idx = np.empty((n, len(path)), dtype=np.intp)
    cur = best
    for s in range(len(path) - 1, -1, -1):
        idx[:, s] = cur
        cur = path[s][rows[:, 0], cur]
    return (*out, idx)


def _steady_increment(dv, db, fin_new, fin_old):
    """(dv, db) per row, (N, 1), when every reachable width grew by the same step time and busy time
    (and the unreachable ones stayed unreachable); None otherwise."""
    if not np.array_equal(fin_new, fin_old) or not fin_new.any(axis=1).all():
        return None
    ref = np.argmax(fin_new, axis=1)[:, None]
    v0, b0 = np.take_along_axis(dv, ref, axis=1), np.take_along_axis(db, ref, axis=1)
    tol_v, tol_b = 1e-12 * np.abs(v0) + 1e-300, 1e-12 * np.abs(b0) + 1e-300
    same = np.where(fin_new, (np.abs(dv - v0) <= tol_v) & (np.abs(db - b0) <= tol_b), True)
    return (v0, b0) if same.all() else None


def background_tokens_per_s(idle_gpu_s, step_s, rate_tokens_per_gpu_s, interference):
    """Tokens/s a multiplexed background job gets: idle GPU share x standalone rate x (1 - interference)."""
    return idle_gpu_s / step_s * rate_tokens_per_gpu_s * (1.0 - interference)


def burst_step(c, fabric, step_s, memory_bytes, fits, head_s, layer_params, params_stage, evaluate_fn, record=False):
    """Burst step of the rows of ``c`` with ``burst == 1`` (others keep theirs).

    Returns (step_s, memory_bytes, fits, busy_gpu_s, min_dp, (widths, path) or None): ``busy_gpu_s``
    is NaN on rows without burst (the caller uses its own busy time there)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _burst_step(c, fabric, step_s, memory_bytes, fits, head_s, layer_params, params_stage, evaluate_fn, record)


def _burst_step(c, fabric, step_s, memory_bytes, fits, head_s, layer_params, params_stage, evaluate_fn, record):
    scalar = np.ndim(c["gpus"]) == 0
    on = np.atleast_1d(np.asarray(c["burst"]) == 1.0) & np.ones(np.shape(np.atleast_1d(c["gpus"])), dtype=bool)
    n_all = on.shape[0]
    col = {k: np.broadcast_to(np.atleast_1d(np.asarray(v, dtype=float)), (n_all,))[on] for k, v in c.items()}
    sub = lambda x: np.broadcast_to(np.atleast_1d(np.asarray(x, dtype=float)), (n_all,))[on]  # noqa: E731
    widths = candidate_widths(col["dp"])
    n, k = widths.shape
    # the uniform model at every width (no recursion: burst and multiplex off)
    rep = {key: np.tile(v, k) for key, v in col.items()}
    rep["dp"] = widths.T.reshape(-1)
    rep["gpus"] = rep["dp"] * rep["tp"] * rep["pp"] * rep["cp"]
    rep["burst"] = rep["multiplex"] = np.full(n * k, np.nan)
    bad = np.isnan(rep["dp"])
    rep["dp"] = np.where(bad, 1.0, rep["dp"])
    rep["gpus"] = np.where(bad, 1.0, rep["gpus"])
    res = evaluate_fn(rep)
    r = {key: np.asarray(res[key]).reshape(k, n).T for key in _COST_KEYS}
    ok = r["valid"] & r["fits"] & ~np.isnan(widths) & np.isfinite(r["step_time_s"])
    L = col["layers"][:, None]
    ratio = col["dp"][:, None] / widths
    head = sub(head_s)[:, None] * ratio
    work = r["time_compute_s"] + r["time_recompute_s"] + r["time_tp_comm_s"] + r["time_cp_comm_s"]
    busy = r["time_compute_s"] + r["time_recompute_s"]
    phi = (sub(layer_params) / sub(params_stage))[:, None]
    t_layer, t_head, b_layer, b_head = block_costs(r["step_time_s"], work, busy, head, L, phi)
    t_layer, t_head = np.where(ok, t_layer, np.nan), np.where(ok, t_head, np.nan)
    amp = col["burst_amplification"]
    t_layer = np.where(amplification_ok(t_layer, widths, amp), t_layer, np.nan)
    t_head = np.where(amplification_ok(t_head, widths, amp), t_head, np.nan)
    sub_fabric = coll.Fabric(*(sub(getattr(fabric, f))[:, None, None] for f in coll.Fabric.__slots__))
    trans = transition_s(widths, col["global_batch"][:, None, None], col["seq_len"][:, None, None],
                         col["hidden"][:, None, None], col["tp"][:, None, None], col["cp"][:, None, None], sub_fabric)
    trans = np.where(np.isnan(trans), np.inf, trans)
    gpus_w = widths * (col["tp"] * col["cp"])[:, None]
    # blocks of `burst_block_layers` layers in order, a shorter last block, then the logits head; one
    # shortest-path run per distinct (layers, block size) pair
    layers = col["layers"].astype(np.int64)
    per = np.clip(col["burst_block_layers"], 1, None).astype(np.int64)
    step_b, busy_b, minw = np.full(n, np.inf), np.full(n, np.nan), np.full(n, np.nan)
    path = None
    pairs, group = np.unique(np.stack([layers, per], axis=1), axis=0, return_inverse=True)
    for g, (n_layers, size) in enumerate(pairs):
        sel = np.flatnonzero(group.reshape(-1) == g)
        full, rem = int(n_layers // size), int(n_layers % size)
        tl, bl = t_layer[sel], b_layer[sel]
        stages = [(size * tl, size * bl, full)] + ([(rem * tl, rem * bl, 1)] if rem else [])
        stages.append((t_head[sel], b_head[sel], 1))
        s_g, b_g, m_g, path_g = shortest_schedule(stages, trans[sel], widths[sel], gpus_w[sel], record=record)
        step_b[sel], busy_b[sel], minw[sel] = s_g, b_g, m_g
        if record and len(pairs) == 1:
            path = path_g
    # memory: the narrowest width used holds the largest optimizer/gradient shards (ZeRO over w)
    pick = np.argmax(widths == minw[:, None], axis=1)
    rows = np.arange(n)
    mem_b = r["memory_gib"][rows, pick] * GIB
    fits_b = r["fits"][rows, pick]
    step_new = np.array(np.broadcast_to(np.atleast_1d(np.asarray(step_s, dtype=float)), (n_all,)))
    mem_new = np.array(np.broadcast_to(np.atleast_1d(np.asarray(memory_bytes, dtype=float)), (n_all,)))
    fits_new = np.array(np.broadcast_to(np.atleast_1d(np.asarray(fits, dtype=bool)), (n_all,)))
    busy_new = np.full(n_all, np.nan)
    minw_new = np.array(np.broadcast_to(np.atleast_1d(np.asarray(c["dp"], dtype=float)), (n_all,)))
    found = np.isfinite(step_b)
    step_new[on] = np.where(found, step_b, step_new[on])
    mem_new[on] = np.where(found, mem_b, mem_new[on])
    fits_new[on] = np.where(found, fits_b, fits_new[on])
    busy_new[on] = np.where(found, busy_b, np.nan)
    minw_new[on] = np.where(found, minw, minw_new[on])
    if scalar:
        return (float(step_new[0]), float(mem_new[0]), bool(fits_new[0]), float(busy_new[0]), float(minw_new[0]),
                (widths[0], path[0]) if record and path is not None and found.all() else None)
    return step_new, mem_new, fits_new, busy_new, minw_new, ((widths, path) if record and path is not None else None)
