"""Heterogeneous GPU inventories: one job over several GPU types (issue 14).

Two ways to combine types, each composed from the homogeneous model's per-layer and per-stage
costs (:func:`cosearch.model.evaluate.evaluate_parts`), so no kernel or collective physics is
repeated here:

pipeline (HetPipe, Park et al. ATC'20; Metis, Um et al. ATC'24): every type holds whole pipeline
  stages, ``pp_t = use_t / (tp*cp*dp)`` of them; stages are ordered by usable memory (the first
  stages keep the most micro-batches in flight). Layers are split over the stages by an exact
  integer min-max (:func:`balanced_split`) under each stage's memory cap, and the 1F1B step is
  ``(m-1) * max_s T_s + sum_s T_s`` (fill and drain of unequal stages; equal stages give the
  homogeneous ``(m + p - 1) * slot``), plus the slowest stage's exposed gradient reduction and optimizer.
  Pipeline sends run at the slower type's links.
data (Sailor, Strati et al. 2025; Cephalo, Guo et al. 2024): every type holds whole replicas with the
  same (tp, pp, cp), ``dp_t = use_t / (tp*pp*cp)`` of them; the global batch's micro-batches are split
  over the replicas by the same exact min-max on ``(m_t + (pp-1)/v) * slot_t`` (faster types take more),
  and the gradient all-reduce spans all replicas at the slower type's links.

Memory is checked per type. Rows that use one type only are the homogeneous model exactly. Not
modelled for mixed rows (flagged invalid): ZeRO-3/FSDP, offload to an expansion tier, and
interleaving in the pipeline composition.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from . import collectives as coll
from . import communication as comm
from . import flops as fl
from . import memory as mem
from .columns import EFFICIENCY_COLUMNS, INPUT_COLUMNS
from .evaluate import BREAKDOWN_KEYS, evaluate, evaluate_parts
from .pipeline import bubble_slots
from .power import drawn_w
from .profile import DEFAULT_PROFILE, Profile
from .split import balanced_split
from .schedules import SCHEDULE_CODES
from .training import training_metrics

HETERO_CODES = {"pipeline": 0, "data": 1}
#: Per-GPU-type columns (catalog values with overrides); everything else is shared by the types.
HARDWARE_COLUMNS = ("peak_tflops", *EFFICIENCY_COLUMNS, "hbm_gib", "hbm_tbps", "nvlink_gbps", "nvlink_domain",
                    "gpus_per_node", "network_gbps", "power_w", "price_usd_per_gpu_hour")
BY_TYPE = ("gpus_by_type", "memory_gib_by_type", "pp_by_type", "dp_by_type", "layers_by_type", "microbatches_by_type")


def _fabric_min(fabrics, used):
    """The slower links of the types in use, element by element (a collective across types runs at them)."""
    def low(attr, fn=np.fmin, bad=np.inf):
        vals = [np.where(u, getattr(f, attr), bad) for f, u in zip(fabrics, used)]
        out = vals[0]
        for v in vals[1:]:
            out = fn(out, v)
        return out
    f0 = fabrics[0]
    return coll.Fabric(low("nvl_Bps"), low("net_Bps"), f0.nvl_lat_s, f0.net_lat_s, low("domain"),
                       low("oversubscription", np.fmax, -np.inf), low("leaf_gpus"))


def composable(sh) -> np.ndarray:
    """Rows whose plan the mixed-type compositions model: a 1F1B or interleaved schedule (zero-bubble and
    DualPipe are not composed across types), no DeepPool burst or background job, a dense model with full
    attention and no multi-token prediction."""
    sched = np.asarray(sh.get("schedule", np.nan), dtype=float)
    ok = np.isnan(sched) | (sched <= SCHEDULE_CODES["interleaved"])
    for key in ("burst", "multiplex"):
        v = np.asarray(sh.get(key, np.nan), dtype=float)
        ok = ok & (np.isnan(v) | (v == 0.0))
    # issue 13: MoE / MLA / head_dim rows are not composed across types (their per-layer parts differ)
    # nor multi-token prediction or sliding windows (the composition counts full attention and one output head)
    for key, dense in (("experts", 0.0), ("mla", 0.0), ("ep", 1.0), ("mtp_layers", 0.0), ("sliding_window", 0.0)):
        ok = ok & (np.asarray(sh.get(key, dense), dtype=float) == dense)
    return ok & np.isnan(np.asarray(sh.get("head_dim", np.nan), dtype=float))


def _pipeline(sh, hws, use, p: Profile):
    """Pipeline stages on different types: metrics of rows that use two or more types."""
    K, n = len(hws), len(sh["layers"])
    tp, cp, dp, L, B, mb = sh["tp"], sh["cp"], sh["dp"], sh["layers"], sh["global_batch"], sh["microbatch"]
    pp_t = [u / (tp * cp * dp) for u in use]
    P = sum(pp_t)
    m = B / (dp * mb)
    gpus_total = tp * cp * dp * P
    res = [evaluate_parts({**sh, **hw, "pp": P, "interleave": 1.0, "gpus": gpus_total}) for hw in hws]
    outs, parts = [r[0] for r in res], [r[1] for r in res]
    used = [q > 0 for q in pp_t]
    valid = np.all([o["valid"] | ~u for o, u in zip(outs, used)], axis=0) & (sh["interleave"] == 1) & composable(sh)
    for q in pp_t:
        valid &= (q >= 0) & (q == np.floor(q))
    q0 = parts[0]
    slow = _fabric_min([q["fabric"] for q in parts], used)
    stride = tp * cp * dp
    pp_mb = 2.0 * comm.p2p_s(q0["p2p_bytes"], slow.bandwidth_Bps(2.0, stride), slow.latency_s(2.0, stride))
    order = sorted(range(K), key=lambda k: -float(np.max(hws[k]["hbm_gib"])))  # stage order: most memory first
    pos = np.zeros(n)
    last_type = np.zeros(n, dtype=np.intp)
    for k in order:
        last_type = np.where(used[k], k, last_type)
    states = sh["optimizer_states"]
    opt_B, opt_traffic = mem.optimizer_bytes(states)
    fp8p = sh["precision"] * sh["fp8_param_gather"]
    sb = sum(mem.model_state_bytes(1.0, sh["zero"], q0["opt_group"], sh["precision"], optimizer_bytes=opt_B,
                                   fp8_params=fp8p))  # per param
    lp, emb, act, work = q0["layer_params"], q0["emb_params"], q0["act_layer_bytes"], q0["working_bytes"]
    g_type, g_count, g_rank, g_last = [], [], [], []
    for k in order:
        g_type.append(np.full(n, k))
        g_count.append(pp_t[k] - (last_type == k))
        g_rank.append(pos.copy())
        g_last.append(np.zeros(n, dtype=bool))
        pos = pos + pp_t[k]
    g_type.append(last_type); g_count.append(np.ones(n)); g_rank.append(P - 1.0); g_last.append(np.ones(n, dtype=bool))
    ty, cnt, rank, last = np.array(g_type), np.array(g_count), np.array(g_rank), np.array(g_last)
    rows = np.arange(n)

    def per_type(key):  # (groups, rows) of a per-type part
        table = np.array([np.broadcast_to(q[key], (n,)) for q in parts])
        return table[ty, rows]
    w = per_type("layer_compute_s") + per_type("layer_recompute_s") + per_type("layer_tp_s") + per_type("layer_cp_s")
    e = pp_mb + last * per_type("logits_s")
    first = (rank == 0) & (cnt > 0)
    per_layer_bytes = lp * sb + mem.inflight_layers(1.0, P, 1.0, m, rank=rank) * act
    fixed_bytes = work + first * emb * sb + last * (emb * sb + q0["logits_bytes"])
    usable = per_type("usable_bytes")
    cap = np.floor((usable - fixed_bytes) / per_layer_bytes)
    t_max, n_g, units, ok = balanced_split(L, cnt, w, e)
    tight = ok & np.any((cnt > 0) & (n_g > cap), axis=0)
    if np.any(tight):  # the balanced split overflows a stage: split again under the memory caps
        i = np.nonzero(tight)[0]
        t2, n2, u2, ok2 = balanced_split(L[i], cnt[:, i], w[:, i], e[:, i], cap[:, i])
        j = i[ok2]
        t_max[j], n_g[:, j], units[:, j] = t2[ok2], n2[:, ok2], u2[:, ok2]
    valid &= ok
    # memory of each group's worst stage (its first rank, n_g layers)
    params = n_g * lp + first * emb + last * emb
    wb, gb, ob = mem.model_state_bytes(params, sh["zero"], q0["opt_group"], sh["precision"], optimizer_bytes=opt_B,
                                       fp8_params=fp8p)
    act_b = mem.inflight_layers(n_g, P, 1.0, m, rank=rank) * act + work + last * q0["logits_bytes"]
    tot = np.where(cnt > 0, wb + gb + ob + act_b, 0.0)
    fits_g = (tot <= usable) | (cnt <= 0)
    # gradient reduction of each stage within its type's data-parallel group, then its optimizer step
    end = np.zeros_like(w)
    dp_exp = np.zeros_like(w)
    for k in range(K):
        f = parts[k]["fabric"]
        red = coll.collective_s("all_reduce", sh["dp_collective"], params * mem.GRAD_BYTES, dp * cp, tp, f)
        red = np.where(dp * cp > 1, red, 0.0)
        hide = p.dp_overlap * sh["overlap_grad_reduce"] * (n_g * parts[k]["layer_back_s"] + last * parts[k]["logits_back_s"])
        exp_k = np.maximum(red - hide, 0.0)
        opt_k = params / np.where(sh["zero"] >= 1, q0["opt_group"], 1.0) * opt_traffic / parts[k]["hbm_Bps"]
        dp_exp = np.where(ty == k, exp_k, dp_exp)
        end = np.where(ty == k, exp_k + opt_k, end)
    end = np.where(cnt > 0, end, -np.inf)
    t_g = np.where(cnt > 0, e + n_g * w, -np.inf)
    fill = np.sum(np.where(cnt > 0, w * units + cnt * e, 0.0), axis=0)
    gend = np.argmax(end, axis=0)
    end_max = end[gend, rows]
    step = (m - 1.0) * t_max + fill + end_max
    gb_ = np.argmax(t_g, axis=0)  # the bottleneck stage's group
    nb, lastb = n_g[gb_, rows], last[gb_, rows]

    def at_b(key):
        return per_type(key)[gb_, rows]
    brk = {
        "compute": m * (nb * at_b("layer_compute_s") + lastb * at_b("logits_s")),
        "recompute": m * nb * at_b("layer_recompute_s"), "tp_comm": m * nb * at_b("layer_tp_s"),
        "cp_comm": m * nb * at_b("layer_cp_s"), "pp_comm": m * pp_mb, "dp_comm": dp_exp[gend, rows],
        "bubble": fill - t_max, "optimizer": end_max - dp_exp[gend, rows], "offload": np.zeros(n),
        "ep_comm": np.zeros(n),  # MoE rows are not composed (composable)
    }
    busy = m * np.sum(np.where(cnt > 0, units * (per_type("layer_compute_s") + per_type("layer_recompute_s"))
                               + last * per_type("logits_s"), 0.0), axis=0)
    memk = [np.max(np.where(ty == k, tot, 0.0), axis=0) for k in range(K)]
    fitk = [np.all(np.where(ty == k, fits_g, True), axis=0) for k in range(K)]
    gmem = np.argmax(np.where(cnt > 0, tot / usable, -np.inf), axis=0)
    memparts = {"weights": wb, "gradients": gb, "optimizer": ob, "activations": act_b}
    by = {
        "pp_by_type": pp_t, "dp_by_type": [np.where(u, dp, 0.0) for u in used],
        "layers_by_type": [np.sum(np.where(ty == k, units, 0.0), axis=0) for k in range(K)],
        "microbatches_by_type": [np.where(u, m, 0.0) for u in used],
    }
    return dict(step=step, valid=valid, memk=memk, fitk=fitk, usable_tight=usable[gmem, rows],
                mem_tight=tot[gmem, rows], mem_parts={k: v[gmem, rows] for k, v in memparts.items()},
                brk=brk, busy_frac=busy / (P * step), dp=dp, m=m, outs=outs, parts=parts, by=by)


def _data(sh, hws, use, p: Profile):
    """Data-parallel replicas on different types: metrics of rows that use two or more types."""
    K, n = len(hws), len(sh["layers"])
    tp, pp, cp, mb, B = sh["tp"], sh["pp"], sh["cp"], sh["microbatch"], sh["global_batch"]
    dp_t = [u / (tp * pp * cp) for u in use]
    D = sum(dp_t)
    M = B / mb
    used = [q > 0 for q in dp_t]
    m_call = np.maximum(np.ceil(M / D), 1.0)
    gpus = tp * pp * cp * D
    res = [evaluate_parts({**sh, **hw, "dp": D, "gpus": gpus, "global_batch": D * mb * m_call}) for hw in hws]
    outs, parts = [r[0] for r in res], [r[1] for r in res]
    valid = np.all([o["valid"] | ~u for o, u in zip(outs, used)], axis=0) & (M == np.floor(M)) & (M >= D) & composable(sh)
    for q in dp_t:
        valid &= (q >= 0) & (q == np.floor(q))
    slot = np.array([np.broadcast_to(q["slot_s"], (n,)) for q in parts])
    b = bubble_slots(pp, sh["interleave"])
    t_max, n_k, units, ok = balanced_split(M, np.array(dp_t), slot, b * slot)
    valid &= ok
    n_k = np.maximum(n_k, 1.0)
    for k in range(K):  # memory depends on the micro-batch count through min(m, pp): re-run where it differs
        redo = used[k] & (np.minimum(n_k[k], pp) != np.minimum(m_call, pp))
        if np.any(redo):
            i = np.nonzero(redo)[0]
            sub = {key: np.broadcast_to(v, (n,))[i] for key, v in {**sh, **hws[k]}.items()}
            o2, q2 = evaluate_parts({**sub, "dp": D[i], "gpus": gpus[i], "global_batch": D[i] * mb[i] * n_k[k, i]})
            for key in o2:
                outs[k][key] = np.array(np.broadcast_to(outs[k][key], (n,)))
                outs[k][key][i] = o2[key]
            for key in ("hide_b_s", "optimizer_s"):
                parts[k][key] = np.array(np.broadcast_to(parts[k][key], (n,)))
                parts[k][key][i] = np.broadcast_to(q2[key], (len(i),))
    slow = _fabric_min([q["fabric"] for q in parts], used)
    rep = D * cp
    red = np.where(rep > 1, coll.collective_s("all_reduce", sh["dp_collective"], parts[0]["grad_bytes"], rep, tp, slow), 0.0)
    hide = np.min([np.where(u, q["hide_b_s"], np.inf) for q, u in zip(parts, used)], axis=0)
    dp_exp = np.maximum(red - hide, 0.0)
    opt = np.max([np.where(u, q["optimizer_s"], 0.0) for q, u in zip(parts, used)], axis=0)
    step = t_max + dp_exp + opt
    rows = np.arange(n)
    kb = np.argmax(np.where(np.array(used), (n_k + b) * slot, -np.inf), axis=0)
    nb = n_k[kb, rows]

    def per_mb(key):
        return np.array([np.broadcast_to(o[key], (n,)) for o in outs])[kb, rows] / m_call_k[kb, rows]
    m_call_k = np.array([np.broadcast_to(o["num_microbatches"], (n,)) for o in outs])
    brk = {k: nb * per_mb(f"time_{k}_s") for k in ("compute", "recompute", "tp_comm", "cp_comm", "pp_comm")}
    brk.update(bubble=b * slot[kb, rows], dp_comm=dp_exp, optimizer=opt, offload=np.zeros(n), ep_comm=np.zeros(n))
    comp = np.array([np.broadcast_to((o["time_compute_s"] + o["time_recompute_s"]) / o["num_microbatches"], (n,))
                     for o in outs])
    busy = np.sum(units * comp, axis=0)
    memk = [np.where(u, o["memory_gib"] * mem.GIB, 0.0) for o, u in zip(outs, used)]
    fitk = [o["fits"] | ~u for o, u in zip(outs, used)]
    ratio = np.array([np.where(u, o["memory_gib"] / o["usable_memory_gib"], -np.inf) for o, u in zip(outs, used)])
    kt = np.argmax(ratio, axis=0)
    pick = lambda key: np.array([np.broadcast_to(o[key], (n,)) for o in outs])[kt, rows]  # noqa: E731
    by = {"pp_by_type": [np.where(u, pp, 0.0) for u in used], "dp_by_type": dp_t,
          "layers_by_type": [np.where(u, sh["layers"], 0.0) for u in used],
          "microbatches_by_type": [np.where(u, n_k[k], 0.0) for k, u in enumerate(used)]}
    return dict(step=step, valid=valid, memk=memk, fitk=fitk, usable_tight=pick("usable_memory_gib") * mem.GIB,
                mem_tight=pick("memory_gib") * mem.GIB,
                mem_parts={k: pick(f"mem_{k}_gib") * mem.GIB for k in ("weights", "gradients", "optimizer", "activations")},
                brk=brk, busy_frac=busy / (D * step), dp=D, m=np.max(np.where(np.array(used), n_k, 0.0), axis=0),
                outs=outs, parts=parts, by=by)


def _metrics(sh, r, hws, use, red_total=None):
    """The homogeneous model's output columns from a composed step time (same names, same meaning)."""
    step, n = r["step"], len(r["step"])
    gpus = sum(use)
    B, s = sh["global_batch"], sh["seq_len"]
    tokens_step = B * s
    flops = fl.model_flops_per_token(sh["layers"], sh["hidden"], sh["heads"], sh["kv_heads"], sh["ffn_hidden"],
                                     sh["gated_mlp"], sh["vocab"], s) * tokens_step
    hw_ratio = r["parts"][0]["hardware_flops"] / r["parts"][0]["model_flops"]
    peak_sum = sum(u * hw["peak_tflops"] for u, hw in zip(use, hws)) * 1e12
    usd_h = sum(u * hw["price_usd_per_gpu_hour"] for u, hw in zip(use, hws))
    watts = sum(u * drawn_w(hw["power_w"], sh.get("power_limit_w")) for u, hw in zip(use, hws))
    run = training_metrics(step, tokens_step, usd_h, watts, sh["tokens"], sh["target_tokens"], sh["critical_batch_tokens"])
    fits = np.all(r["fitk"], axis=0)
    mt = flops / (step * gpus) / 1e12
    out = {
        "valid": r["valid"], "fits": fits, "feasible": r["valid"] & fits, "step_time_s": step,
        "tokens_per_s": run["tokens_per_s"], "model_tflops_per_gpu": mt, "hardware_tflops_per_gpu": mt * hw_ratio,
        "mfu": flops / (step * peak_sum), "memory_gib": r["mem_tight"] / mem.GIB,
        "usable_memory_gib": r["usable_tight"] / mem.GIB,
        **{k: run[k] for k in ("cost_usd_per_step", "time_to_train_days", "cost_to_train_usd", "energy_to_train_mwh",
                               "steps_to_target", "tokens_to_target", "statistical_efficiency",
                               "time_to_accuracy_days", "cost_to_accuracy_usd")},
        "gpus": gpus, "dp": r["dp"], "num_microbatches": r["m"],
        "params": fl.total_params(sh["layers"], sh["hidden"], sh["heads"], sh["kv_heads"], sh["ffn_hidden"],
                                  sh["gated_mlp"], sh["vocab"], sh["tied_embeddings"]),
        "total_param_tflops_per_gpu": mt,  # issue 13 outputs: dense rows only here, active = total
        "dp_comm_total_s": r["brk"]["dp_comm"], "expansion_used_gib": np.zeros(n), "expansion_fits": np.ones(n, bool),
        "dp_reduce_hidden_s": np.full(n, np.nan),  # not split out for mixed inventories (no hidden-reduction warning)
        "idle_share": 1.0 - r["busy_frac"],
        **{k: run[k] for k in ("step_time_low_s", "step_time_high_s", "time_to_train_low_days",
                               "time_to_train_high_days", "cost_to_train_low_usd", "cost_to_train_high_usd")},
    }
    out["active_params"] = out["params"]
    for k in BREAKDOWN_KEYS:
        out[f"time_{k}_s"] = r["brk"][k]
    for k, v in r["mem_parts"].items():
        out[f"mem_{k}_gib"] = v / mem.GIB
    return out


def common_columns(cols: Mapping[str, object]) -> dict[str, object]:
    """The columns every GPU type of a job shares: all but the per-type :data:`HARDWARE_COLUMNS` and ``gpus``."""
    return {k: v for k, v in cols.items() if k not in HARDWARE_COLUMNS and k != "gpus"}


def evaluate_hetero(common: Mapping[str, object], hardware: Sequence[Mapping[str, object]], use: Sequence[object],
                    mode: object, names: Sequence[str], inventory: Sequence[object] | None = None,
                    profile: Profile = DEFAULT_PROFILE) -> dict[str, np.ndarray]:
    """Metrics of jobs over several GPU types, one row per configuration (no Python loop per row).

    ``common``: the model/training/plan columns (:data:`~cosearch.model.columns.INPUT_COLUMNS` less the
    per-type :data:`HARDWARE_COLUMNS`; ``dp`` is the pipeline composition's replica count, ``pp`` the data
    composition's stage count); ``hardware[t]``: type t's hardware columns; ``use[t]``: its GPUs in use
    (0: unused); ``mode``: :data:`HETERO_CODES`; ``inventory[t]``: GPUs available (more used: invalid).
    Returns every column of :func:`cosearch.model.evaluate` plus ``<by-type key>.<name>`` per type.
    """
    cols = common_columns(common)
    cols.setdefault("dp", 1.0)
    K = len(hardware)
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in
                                   [*cols.values(), *[hw[k] for hw in hardware for k in HARDWARE_COLUMNS], *use, mode,
                                    *(inventory or [])]))
    n = arrays[0].size
    flat = [np.ascontiguousarray(a).reshape(n) for a in arrays]
    it = iter(flat)
    sh = {k: next(it) for k in cols}
    sh["dp"] = np.where(np.isnan(sh["dp"]), 1.0, sh["dp"])
    hws = [{k: next(it) for k in HARDWARE_COLUMNS} for _ in range(K)]
    use = [next(it) for _ in range(K)]
    mode = next(it)
    inv = [next(it) for _ in range(K)] if inventory else None
    for key, default in INPUT_COLUMNS.items():
        if key not in sh and key not in HARDWARE_COLUMNS and key not in ("gpus", "dp"):
            if default is None:
                raise KeyError(f"missing model input column: {key}")
            sh[key] = np.full(n, default)
    nused = np.sum([u > 0 for u in use], axis=0)
    out: dict[str, np.ndarray] = {}
    by: dict[str, list[np.ndarray]] = {key: [np.zeros(n) for _ in range(K)] for key in BY_TYPE}

    def put(idx, res, by_res):
        for key, v in res.items():
            if key not in out:
                out[key] = np.zeros(n, dtype=np.asarray(v).dtype)
            out[key][idx] = v
        for key, vals in by_res.items():
            for k in range(K):
                by[key][k][idx] = vals[k]

    single = nused == 1
    if np.any(single):  # one type: the homogeneous model as it is
        i = np.nonzero(single)[0]
        s = {k: v[i] for k, v in sh.items()}
        k1 = np.argmax(np.array([u[i] > 0 for u in use]), axis=0)
        g = np.choose(k1, [u[i] for u in use])
        hw = {key: np.choose(k1, [h[key][i] for h in hws]) for key in HARDWARE_COLUMNS}
        data = mode[i] == HETERO_CODES["data"]
        pp = np.where(data, s["pp"], g / (s["tp"] * s["cp"] * s["dp"]))
        dp = np.where(data, g / (s["tp"] * s["pp"] * s["cp"]), s["dp"])
        o = evaluate({**s, **hw, "pp": pp, "dp": dp, "gpus": g}, profile)
        o = {key: np.broadcast_to(v, (len(i),)) for key, v in o.items()}
        one = [k1 == k for k in range(K)]
        mask = lambda v: [np.where(x, v, 0.0) for x in one]  # noqa: E731
        put(i, o, {"gpus_by_type": mask(g), "memory_gib_by_type": mask(o["memory_gib"]), "pp_by_type": mask(pp),
                   "dp_by_type": mask(dp), "layers_by_type": mask(s["layers"]),
                   "microbatches_by_type": mask(o["num_microbatches"])})
    for code, fn in ((HETERO_CODES["pipeline"], _pipeline), (HETERO_CODES["data"], _data)):
        rows = (nused >= 2) & (mode == code)
        if not np.any(rows):
            continue
        i = np.nonzero(rows)[0]
        s = {k: v[i] for k, v in sh.items()}
        hw_i = [{k: v[i] for k, v in h.items()} for h in hws]
        u_i = [u[i] for u in use]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            r = fn(s, hw_i, u_i, profile)
            res = _metrics(s, r, hw_i, u_i)
        res["valid"] = res["valid"] & (s["zero"] < 3) & (s["offload"] == 0)
        res["feasible"] = res["valid"] & res["fits"]
        by_res = dict(r["by"], gpus_by_type=u_i, memory_gib_by_type=[x / mem.GIB for x in r["memk"]])
        put(i, res, by_res)
    none = nused == 0
    if np.any(none):
        if not out:  # no row uses a GPU: the keys and dtypes of one model row, every value then blanked
            s0 = {k: v[:1] for k, v in sh.items()}
            g0 = s0["tp"] * s0["pp"] * s0["cp"] * s0["dp"]
            with np.errstate(all="ignore"):
                o = evaluate({**s0, **{k: v[:1] for k, v in hws[0].items()}, "gpus": g0}, profile)
            for key, v in o.items():
                out[key] = np.zeros(n, dtype=np.asarray(v).dtype)
        for key in out:
            out[key][none] = False if out[key].dtype == bool else np.nan
    if inv is not None:
        within = np.all([u <= a for u, a in zip(use, inv)], axis=0)
        out["valid"] = out["valid"] & within
        out["feasible"] = out["feasible"] & within
    for key, vals in by.items():
        for name, v in zip(names, vals):
            out[f"{key}.{name}"] = v
    return out
