"""Mixture-of-experts layers, MLA attention and expert parallelism (issue 13).

A row is *extended* when its model has routed experts (``experts > 0``), multi-head latent attention
(``mla``) or an explicit ``head_dim`` (Qwen3, GPT-OSS: heads x head_dim != hidden). Dense rows never
enter this module (:func:`active` is False when no row is extended, and the evaluator skips it).

Parameters, widths and FLOPs per token (dense, MLA, routed and shared experts): :mod:`.moe_params`.

Parallelism (Megatron-Core >= core_r0.10, "MoE parallel folding", Liu et al. 2025, arXiv
2504.14960): inside a pipeline stage the attention ranks are ordered tp-cp-dp and the expert ranks
etp-ep-edp, so the expert-parallel group has ``ep`` ranks at stride ``etp`` and the expert-data-
parallel group edp = tp*cp*dp / (ep*etp) ranks at stride ep*etp (``etp`` defaults to tp). Expert
weights are split over ep (whole experts) and etp (the FFN width); their gradients are reduced
and (distributed optimizer) their optimizer states sharded over edp; under FSDP (zero 3, torchtitan's
FSDP + EP) their weights too, gathered per layer over edp like the dense weights over the zero group.

Per micro-batch and MoE layer a GPU holding t tokens (t/tp under sequence parallelism) dispatches
t*top_k token copies of h values to the expert ranks and combines as many back (all-to-all, Lepikhin
et al. 2021 GShard); a fraction (ep-1)/ep leaves the GPU, split between NVLink peers (EP ranks in its
NVLink domain) and network peers. Backward repeats both; full recompute repeats the forward pair.
With ``plan.moe_dispatcher: deepep`` (DeepEP, the kernels of DeepSeek-V3 sec. 3.2.2) a token
crosses the network once per destination node, not once per expert copy, and is forwarded to its
experts' GPUs over NVLink there; a token reaches on average (n-1)*(1 - (1 - 1/n)^top_k) of the n-1
other nodes of its EP group (uniform routing), at most ``routed_nodes_limit`` (DeepSeek-V3's
node-limited routing, M = 4). Token copies travel in 16 bits, as in Megatron-Core whatever the GEMM
precision (its HybridEP buffer asserts ``not fp8_dispatch``, "HybridEP dispatcher does not support fp8
dispatch now"; DeepEP and the all-to-all dispatcher get the bf16 hidden states); with
``plan.moe_fp8_dispatch`` under fp8 the dispatch is sent in fp8 and the combine in bf16 (DeepSeek-V3's own
stack, arXiv 2412.19437 sec. 3.3.2). The busiest EP rank sets the pace: its expert GEMMs and its all-to-all scale by the load
imbalance (max / mean tokens per EP rank), capped by the capacity factor when tokens are dropped.
All-to-all overlap (``plan.moe_a2a_overlap``) pairs a forward chunk with another micro-batch's backward chunk
(:func:`paired_a2a_exposed_s`): each transfer hides under one compute phase of the partner, not the whole layer,
and while hidden its kernels hold :data:`A2A_SM_SHARE` of the SMs, slowing that compute.

Grouped GEMMs (``plan.moe_grouped_gemm``): ``grouped`` runs each GEMM of the local experts in one launch;
``per_expert`` (Megatron-Core with Transformer Engine) launches one GEMM per expert and pays
:data:`GROUPED_GEMM_LAUNCH_S` of host time per expert and GEMM: 6 per MoE layer and micro-batch (two forward,
four backward), 8 with full recompute.

Token copies are permuted into expert order before the dispatch and back after the combine (read + write
each copy both ways); Megatron-Core's all-to-all dispatcher also sorts the received copies by local expert
and back (``sort_chunks_by_idxs``, wherever a rank holds more than one expert), which DeepEP's does not.

Expert tensor parallelism (etp > 1) all-gathers the received token copies over the etp ranks and
reduce-scatters the expert outputs, a pair top_k x load times the dense MLP's; the excess over the dense
model's pair is charged as expert communication (not overlapped).

Approximations (stated): with etp < tp the dense MLP's TP pair stays charged though Megatron folds
those ranks into EP; the slowest pipeline stage is
taken to hold MoE layers only (leading dense layers count only without pipelining), and activations
per layer are those of the first stage's mix; alternating dense/MoE layers (Llama 4 Maverick) are
modelled as leading ones; attention is the fused (flash) kernel; offloading to an expansion tier
moves the dense states only.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import _ops as ops
from . import compute as kern
from . import communication as comm
from . import memory as mem
from . import schedules as sch
from .collectives import group_shape
from .moe_params import (attention_params, attention_params_local, flops_per_token, layer_parts,  # noqa: F401
                         mla_params, param_counts, widths)

#: Busiest EP rank's tokens over the mean when the plan does not state it (``training.moe_load_imbalance``).
#: Switch Transformer (Fedus et al. 2022, JMLR, sec. 2.2 and Table 1) trains with capacity factor 1.25:
#: the headroom over a perfectly balanced expert that lets all but a few tokens through, i.e. the
#: busiest expert carries about 1.25x the mean. A stated assumption, to be searched or measured.
DEFAULT_LOAD_IMBALANCE = 1.25
#: Rows of one tile of a grouped GEMM: each expert's token segment is padded to the GEMM's M block
#: (DeepGEMM contiguous layout, "each expert segment must be aligned to the GEMM M block size"; 128
#: on Hopper), so an expert with m tokens costs ceil(m/128)*128 rows.
GROUPED_GEMM_TILE_M = 128.0
#: Grouped-GEMM rate relative to one dense GEMM of the same total shape. DeepGEMM README (H800, fp8):
#: 8 groups x M 4096, N 4096, K 7168 ran at 1,288 TFLOPS where one 4096 x 4096 x 7168 GEMM ran at 1,304:
#: 0.988. Small per-expert M is charged separately (tile padding, per-expert weight reads).
GROUPED_GEMM_RELATIVE = 0.988

#: Host time each expert adds to a grouped GEMM that launches one GEMM per expert (``plan.moe_grouped_gemm:
#: per_expert``): Megatron-Core's TEGroupedMLP runs Transformer Engine's GroupedLinear, a loop of cuBLASLt calls
#: over several streams, and its legacy GroupedMLP the grouped_gemm package, whose default build "launches one
#: GEMM kernel per batch element" (tgale96/grouped_gemm README). TransformerEngine PR #3134 (SM100, 8 experts x
#: 128 tokens, N = K = 2048, kernels only): 0.267 ms through the multi-stream path against 0.069 ms in one CUTLASS
#: launch, (0.267 - 0.069) / 8 = 25 us per expert. Charged on top of the kernels: each MoE layer's forward waits
#: for its tokens-per-expert count on the host (dropless routing), so the host does not run ahead of these launches.
GROUPED_GEMM_LAUNCH_S = 25e-6
#: Grouped-GEMM kernels (``plan.moe_grouped_gemm``): one launch for all local experts (DeepGEMM, torch._grouped_mm,
#: CUTLASS grouped kernels), or one launch per expert (Megatron-Core + Transformer Engine).
GROUPED_GEMM_CODES = {"grouped": 0, "per_expert": 1}

#: Speed-up of the fp8 routed-expert path over 16-bit: pytorch/ao PR #3585 (MXFP8 expert-parallel MoE
#: training, forward + backward of dispatch, permute, MXFP8 grouped GEMM, unpermute and combine, DeepSeek-V3
#: shapes): "1.4x speedup over vanilla bf16"; NeMo Automodel PR #3606 measured 1.07x end to end (HybridEP
#: MXFP8 vs BF16). The model runs fp8 expert grouped GEMMs at FP8_EXPERT_SPEEDUP / 2 of the GPU's fp8 GEMM rate: 1.4x
#: the 16-bit rate where fp8 and 16-bit GEMMs reach the same share of their peaks (Blackwell's catalog rows: 1.39x),
#: less where fp8 reaches a smaller share (H100: 0.62 against 0.71 of peak, 1.23x). Capping at 1.4x the 16-bit rate
#: instead (no lower on H100) was tried at stop 50: the Grok-1 fp8 rows went from +1..+3 % to -4..-7 % (their bf16
#: twins stay 7-11 % too fast), MoE median 9.6 -> 9.7 % over 80 rows (10.3 -> 10.7 % over the 75 before).
FP8_EXPERT_SPEEDUP = 1.4

#: Share of the SMs an all-to-all's kernels hold while it runs beside compute (``moe_a2a_overlap``): DeepSeek-V3
#: (arXiv 2412.19437 sec. 3.2.2) dedicates 20 of H800's 132 SMs to its dispatch and combine kernels, "sufficient to
#: fully utilize the bandwidths of IB and NVLink"; DeepEP's ``Buffer.num_sms`` defaults to 20, Megatron-Core's
#: ``moe_deepep_num_sms`` to 20 and ``moe_hybridep_num_sms`` to 24 (of 148 SMs on B200, the same share). The compute
#: beside a hidden transfer runs on the other SMs, so it stretches by share / (1 - share) of the hidden time.
#: Applied to every GPU and dispatcher (NCCL's all-to-all also runs on SMs); a stated assumption, not fitted.
A2A_SM_SHARE = 20.0 / 132.0

#: Input columns this module adds (name -> default; the defaults describe a dense model).
MOE_MODEL_COLUMNS = (
    "experts", "top_k", "expert_ffn_hidden", "shared_experts", "shared_ffn_hidden", "dense_layers",
    "dense_ffn_hidden", "mla", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
    "v_head_dim", "head_dim", "routed_nodes_limit",
)
#: Token dispatchers (``plan.moe_dispatcher``): Megatron-Core's all-to-all, or DeepEP's node-deduplicated one.
DISPATCHER_CODES = {"alltoall": 0, "deepep": 1}
MOE_INPUT_COLUMNS: dict[str, float] = {
    "experts": 0.0,             # routed experts per MoE layer; 0 = dense model
    "top_k": 0.0,               # experts per token
    "expert_ffn_hidden": np.nan,  # routed expert FFN width; NaN = ffn_hidden
    "shared_experts": 0.0,      # always-active experts per MoE layer
    "shared_ffn_hidden": np.nan,  # width of one shared expert; NaN = expert_ffn_hidden
    "dense_layers": 0.0,        # leading layers with a dense MLP
    "dense_ffn_hidden": np.nan,  # their MLP width; NaN = ffn_hidden
    "mla": 0.0,                 # 1: multi-head latent attention (model.attention: mla)
    "q_lora_rank": 0.0, "kv_lora_rank": 0.0, "qk_rope_head_dim": 0.0, "qk_nope_head_dim": 0.0, "v_head_dim": 0.0,
    "head_dim": np.nan,         # attention head width; NaN = hidden / heads
    "routed_nodes_limit": 0.0,  # most nodes a token is routed to (DeepSeek-V3: 4); 0 = no limit
    "moe_dispatcher": 0.0,      # DISPATCHER_CODES
    "moe_fp8_dispatch": 0.0,    # 1: under fp8, token copies are dispatched in fp8 (DeepSeek-V3); 0: 16-bit (Megatron-Core)
    "ep": 1.0,                  # expert parallel size
    "etp": np.nan,              # expert tensor parallel size; NaN = tp (Megatron-Core's default)
    "capacity_factor": np.nan,  # expert capacity / mean load; NaN = dropless
    "moe_a2a_overlap": 0.0,     # share of each paired compute phase that hides an all-to-all (0..1; paired_a2a_exposed_s)
    "moe_load_imbalance": DEFAULT_LOAD_IMBALANCE,
    "moe_grouped_gemm": 1.0,    # GROUPED_GEMM_CODES; 1 = per_expert (Megatron-Core + TE), as plan.moe_grouped_gemm
}


def active(c) -> bool:
    """True when some row needs this module (experts, MLA, an explicit head_dim, or ep > 1)."""
    return (ops.any(c["experts"] > 0) or ops.any(c["mla"] > 0) or ops.any(c["ep"] > 1)
            or not ops.all(ops.isnan(c["head_dim"])))


def split_rows(c):
    """(dense row indices, extended row indices) of a 1-D batch that holds both, else None: the
    evaluator runs the two apart so that neither pays for the other's physics."""
    gpus = c["gpus"]
    if np.ndim(gpus) != 1 or gpus.size < 2 or not active(c):
        return None
    ext = np.broadcast_to(extended_rows(c), gpus.shape)
    n_ext = int(np.count_nonzero(ext))
    if n_ext == 0 or n_ext == ext.size:
        return None
    return np.flatnonzero(~ext), np.flatnonzero(ext)


def expert_tp(etp, tp):
    """The expert tensor-parallel size of a plan: ``etp`` as stated, ``tp`` where it is unset (NaN in the
    model columns, None in a Scenario; Megatron-Core's default). The one place this default lives."""
    if etp is None:
        return tp
    return ops.where(ops.isnan(etp), tp, etp)


def extended_rows(c):
    """True where a row is extended (experts, MLA or an explicit head_dim): :func:`terms` replaces its
    dense per-layer values."""
    return (c["experts"] > 0) | (c["mla"] > 0) | ops.logical_not(ops.isnan(c["head_dim"]))


def a2a_s(message_bytes, ep, etp, fabric, top_k=1.0, deepep=0.0, nodes_limit=0.0):
    """All-to-all over the EP group (``ep`` ranks at stride ``etp``) of ``message_bytes`` per GPU
    (all its token copies, ``top_k`` per token; 1/ep of them stay local). Peers inside the NVLink
    domain are reached over NVLink, the others through the GPU's NIC, both at once. ``deepep``: each
    token crosses the network once per destination node and is forwarded over NVLink there."""
    return a2a_times_s((message_bytes,), ep, etp, fabric, top_k, deepep, nodes_limit)[0]


def a2a_times_s(messages, ep, etp, fabric, top_k=1.0, deepep=0.0, nodes_limit=0.0):
    """:func:`a2a_s` of each of several messages over one EP group (its geometry worked out once)."""
    # EP group inside one NVLink domain, EP ranks in one domain, NVLink domains the group spans
    inside, g_in, n = group_shape(ep, etp, fabric.domain)
    peers_in, peers_out = g_in - 1.0, ep - g_in
    any_deepep = ops.any(deepep > 0)
    if any_deepep:
        nodes = (n - 1.0) * (1.0 - (1.0 - 1.0 / n) ** top_k)  # distinct other domains a token reaches
        nodes = ops.where(nodes_limit > 0, ops.minimum(nodes, nodes_limit), nodes)
        copies, deep = ops.maximum(top_k, 1.0), deepep > 0
    nic = fabric.net_Bps * comm.spine_share(ep, etp, fabric.domain, fabric.leaf_gpus, fabric.oversubscription,
                                            all_to_all=True)
    lat = ops.where(inside, fabric.nvl_lat_s, fabric.net_lat_s)
    several = ep > 1
    times = []
    for message_bytes in messages:
        intra = message_bytes * peers_in / ep
        inter = message_bytes * peers_out / ep
        if any_deepep:
            inter = ops.where(deep, message_bytes / copies * nodes, inter)
            intra = ops.where(deep, message_bytes * peers_in / g_in, intra)
        t = ops.maximum(intra / fabric.nvl_Bps, ops.where(inter > 0, inter / nic, 0.0)) + lat
        times.append(ops.where(several, t, 0.0))
    return times


def grouped_gemm_time_s(groups, rows_per_group, n, k, flops_per_s, hbm_bytes_per_s, overhead_s, input_bytes,
                        per_expert=0.0):
    """One grouped GEMM: ``groups`` experts of ``rows_per_group`` tokens each times a [k, n] weight
    each; rows padded to :data:`GROUPED_GEMM_TILE_M` per group, every weight read once. ``per_expert``
    (1: one launch per expert) adds :data:`GROUPED_GEMM_LAUNCH_S` per group."""
    rows = groups * ops.ceil(rows_per_group / GROUPED_GEMM_TILE_M) * GROUPED_GEMM_TILE_M
    flops = 2.0 * rows * n * k
    traffic = input_bytes * (rows * k + groups * k * n) + kern.BYTES_16BIT * rows * n
    return (overhead_s + ops.maximum(flops / (flops_per_s * GROUPED_GEMM_RELATIVE), traffic / hbm_bytes_per_s)
            + per_expert * groups * GROUPED_GEMM_LAUNCH_S)


class Terms(NamedTuple):
    """Per-layer averages over the fullest stage (seconds, bytes, parameters), to replace the dense ones."""

    rows: object          # True where the row is extended
    layer_f: object
    layer_b: object
    layer_r: object
    attn_f: object        # attention core forward (hides context-parallel traffic)
    attn_b: object
    kv_loc: object        # K width per TP rank (context-parallel ring blocks)
    ep_f: object          # exposed all-to-all per layer, forward / backward (with recompute)
    ep_b: object
    act_layer: object     # activations kept per layer (recompute mode), and with no recompute
    act_layer_none: object
    dispatch_buf: object  # all-to-all send/receive buffers of one layer
    params_first: object  # non-expert parameters on the first / last / a middle rank (TP-sharded)
    params_last: object
    params_mid: object
    experts_first: object  # routed-expert parameters on the first / last / a middle rank
    experts_last: object
    experts_mid: object
    experts_layer: object  # routed-expert parameters of one MoE layer on one GPU
    edp: object            # expert-data-parallel group size, and its rank stride (ep*etp)
    edp_stride: object
    layer_params: object   # the heaviest layer's parameters on one GPU, its local routed experts included
    gathered_layer: object  # the heaviest layer's parameters a ZeRO-3 gather brings to one GPU: its routed
                            # experts only where they are sharded (edp > 1); None when no row runs ZeRO-3
    largest_weight: object  # the largest single weight matrix of a layer on one GPU (DeepSpeed's gather floor;
                            # None when no row caps its live ZeRO-3 parameters)
    gemm_f: object         # forward GEMM seconds of a layer on the pacing stage (= its W pass, schedules.py;
                           # None when no row runs a split-backward schedule)
    wgrad_layer: object    # bytes a layer keeps for a deferred W pass (ZB-H1) on the ranks that hold W passes
                           # (None when no row runs a split-backward schedule)
    widths: tuple          # :func:`widths` of the rows
    mla_parts: tuple = None  # :func:`mla_params` of the rows
    up_rerun_params: object = None  # MLA up-projection parameters plan.recompute_mla_up_proj reruns in the backward
                                    # (0 in the other rows; None when no row reruns them)


def paired_a2a_exposed_s(a2a_f, a2a_b, compute_f, compute_b, overlap):
    """(forward, backward) all-to-all seconds left exposed when a micro-batch's forward chunk runs beside another
    micro-batch's backward chunk (DeepSeek-V3's overlap of a forward-backward chunk pair, arXiv 2412.19437 sec. 3.2.1
    and Fig. 4; Megatron-Core's EP all-to-all overlap, ``moe_a2a_overlap``). ``a2a_f``/``a2a_b``: (dispatch,
    combine) of each chunk; ``compute_f``/``compute_b``: (attention, MLP) of each chunk. Each transfer hides only
    under the phase the schedule pairs it with: the forward dispatch under the backward MLP, the forward combine
    under the backward attention, the backward combine under the forward attention, the backward dispatch under
    the forward MLP. ``overlap``: the share of each phase that can hide communication (0: none)."""
    (disp_f, comb_f), (disp_b, comb_b) = a2a_f, a2a_b
    (attn_f, mlp_f), (attn_b, mlp_b) = compute_f, compute_b
    exposed_f = ops.maximum(disp_f - overlap * mlp_b, 0.0) + ops.maximum(comb_f - overlap * attn_b, 0.0)
    exposed_b = ops.maximum(comb_b - overlap * attn_f, 0.0) + ops.maximum(disp_b - overlap * mlp_f, 0.0)
    return exposed_f, exposed_b


def terms(c, *, tok, s_loc, mb, m, tp, sp, pp, v, rc, fp8, in_B, gemm_Fps, attn_Fps, hbm_Bps, t0, fabric, stages, tp_ar_s,
          dense_layer_f, dense_layer_b, dense_layer_r, dense_attn_f, dense_attn_b, dense_kv_loc,
          dense_act, dense_act_none, dense_params_layer, emb_loc) -> Terms:
    """Everything the evaluator needs from extended rows; dense rows keep the ``dense_*`` values. ``m``: micro-batches
    a step.
    ``stages``: :func:`.memory.stage_layers`; ``tp_ar_s``: the legacy tensor-parallel all-reduce of tok*h 16-bit
    values (:func:`.collectives.legacy_time_s`), both as the evaluator has them."""
    h, a, E, k, g = c["hidden"], c["heads"], c["experts"], c["top_k"], c["gated_mlp"]
    L, s, dp, cp = c["layers"], c["seq_len"], c["dp"], c["cp"]
    moe = E > 0
    mla = c["mla"] > 0
    rows = moe | mla | ops.logical_not(ops.isnan(c["head_dim"]))
    w = widths(c)
    fe, fd, fs, d, d_qk, d_v = w
    ep = c["ep"]
    etp = expert_tp(c["etp"], tp)
    ql, kvl, rope, nope = c["q_lora_rank"], c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"]
    rep_div = ops.where(sp > 0, tp, 1.0)
    tok_r = tok / rep_div                                  # tokens a GPU holds outside attention
    kv_loc = d * ops.maximum(c["kv_heads"] / tp, 1.0)
    q_loc, qk_loc, v_loc = a * d / tp, a * d_qk / tp, a * d_v / tp   # head widths per TP rank
    fs_loc, fd_loc = fs / tp, fd / tp
    g1, g2 = 1.0 + g, 2.0 + g
    rc_full, rc_sel = rc >= 2, rc >= 1

    # --- attention: projections and the fused core ---------------------------------------------
    any_mla, all_mla = ops.any(mla), ops.all(mla)  # compute only the attention kinds present
    gqa_f = 0.0 if all_mla else (kern.gemm_time_s(tok, q_loc + 2.0 * kv_loc, h, gemm_Fps, hbm_Bps, t0, in_B)
                                 + kern.gemm_time_s(tok, h, q_loc, gemm_Fps, hbm_Bps, t0, in_B))
    # plan.recompute_mla_up_proj on an MLA layer (moot under full recompute): q, k, v are not kept (activations
    # below) and the up-projections rerun just before the attention backward, which needs them (Megatron-Core
    # recompute_modules "mla_up_proj", MLASelfAttention recompute_up_proj)
    up_rerun = ops.where(mla & ops.logical_not(rc_full), c["recompute_mla_up_proj"], 0.0)
    up_proj_r = 0.0
    if any_mla:
        q_up_f = ops.where(ql > 0, kern.gemm_time_s(tok, qk_loc, ql, gemm_Fps, hbm_Bps, t0, in_B),
                           kern.gemm_time_s(tok, qk_loc, h, gemm_Fps, hbm_Bps, t0, in_B))  # no q latent: from h
        q_f = ops.where(ql > 0, kern.gemm_time_s(tok, ql, h, gemm_Fps, hbm_Bps, t0, in_B), 0.0) + q_up_f
        kv_up_f = kern.gemm_time_s(tok, a * (nope + d_v) / tp, kvl, gemm_Fps, hbm_Bps, t0, in_B)
        mla_f = (q_f + kern.gemm_time_s(tok, kvl + rope, h, gemm_Fps, hbm_Bps, t0, in_B) + kv_up_f
                 + kern.gemm_time_s(tok, h, v_loc, gemm_Fps, hbm_Bps, t0, in_B))
        attn_gemm_f = mla_f if all_mla else ops.where(mla, mla_f, gqa_f)
        if ops.any(up_rerun > 0):  # q from the kept latent (from the kept norm output where q has none), k/v from theirs
            up_proj_r = ops.where(up_rerun > 0, q_up_f + kv_up_f, 0.0)
    else:
        attn_gemm_f = gqa_f
    attn_f = kern.flash_attention_time_s(mb, s_loc, s, (a / tp) * 0.5 * (d_qk + d_v), attn_Fps)
    attn_b = kern.FLASH_BACKWARD_RELATIVE * attn_f
    norms = tok * kern.BYTES_16BIT * 10.0 * h / rep_div / hbm_Bps   # norms, residual adds (compute.py)

    def fc2_f(width_loc):  # an MLP's down projection, forward: what a recompute stopped early skips
        return kern.gemm_time_s(tok, h, width_loc, gemm_Fps, hbm_Bps, t0, in_B)

    def mlp_f(width, fc2_s):  # a dense (gated) MLP split over tp, forward, given its fc2's time (fc2_f)
        return ops.where(width > 0, kern.gemm_time_s(tok, width * g1 / tp, h, gemm_Fps, hbm_Bps, t0, in_B)
                         + fc2_s, 0.0)

    def act_fn_s(n_tok, width):  # the activation function's HBM traffic (read 1-2 inputs, write 1)
        return n_tok * kern.BYTES_16BIT * g2 * width / hbm_Bps

    # --- routed experts on the busiest EP rank ----------------------------------------------------
    imb = ops.where(ep > 1, c["moe_load_imbalance"], 1.0)
    cf = c["capacity_factor"]
    load = ops.where(ops.isnan(cf), imb, ops.minimum(imb, cf))
    local = ops.where(moe, E / ep, 1.0)
    m_act = tok * k * etp / tp * load                      # token copies one expert rank computes
    m_exp = m_act / local
    fe_loc = fe / etp
    # fp8 routed experts: FP8_EXPERT_SPEEDUP / 2 of the fp8 GEMM rate (fp8 peaks are 2x the 16-bit ones)
    exp_Fps = gemm_Fps * ops.where(fp8 > 0, 0.5 * FP8_EXPERT_SPEEDUP, 1.0) if ops.any(fp8 > 0) else gemm_Fps
    # the backward (data + weight gradients, 2x the forward below) and full recompute repeat the launches
    per_expert = c["moe_grouped_gemm"]
    routed_f = (grouped_gemm_time_s(local, m_exp, fe_loc * g1, h, exp_Fps, hbm_Bps, t0, in_B, per_expert)
                + grouped_gemm_time_s(local, m_exp, h, fe_loc, exp_Fps, hbm_Bps, t0, in_B, per_expert))
    router_f = kern.gemm_time_s(tok_r, E, h, gemm_Fps, hbm_Bps, t0)
    # permute before dispatch and unpermute after combine: read + write every token copy, twice
    permute = 4.0 * tok_r * k * h * load * kern.BYTES_16BIT / hbm_Bps
    # Megatron-Core's all-to-all dispatcher regroups the received copies by local expert after the dispatch
    # and back before the combine wherever a rank holds more than one expert (MoEAlltoAllTokenDispatcher,
    # dispatch_postprocess / combine_preprocess: sort_chunks_by_idxs): read + write each received copy, twice.
    # DeepEP's dispatcher receives the copies unsorted and permutes them once (the charge above).
    sort_chunks = ops.where(moe & (c["moe_dispatcher"] == DISPATCHER_CODES["alltoall"]) & (local > 1), 1.0, 0.0)
    permute = permute + sort_chunks * 4.0 * m_act * h * kern.BYTES_16BIT / hbm_Bps
    moe_gemm_f = routed_f + router_f + (mlp_f(fs, fc2_f(fs_loc)) if ops.any(fs > 0) else 0.0)
    act_e, act_s, act_d = act_fn_s(m_act, fe_loc), act_fn_s(tok, fs_loc), act_fn_s(tok, fd_loc)
    eager = kern.fusion_factor(c["fusion"])  # PyTorch eager: one kernel per memory-bound op
    moe_elem = (norms + act_e + act_s) * eager + permute
    # dense-MLP layers exist where a MoE model has leading dense layers or the model has no experts
    any_dense = ops.any(c["dense_layers"] > 0) or not ops.all(moe)
    fc2_d = fc2_f(fd_loc) if any_dense else 0.0  # also what a recompute stopped early skips (below)
    dense_gemm_f = mlp_f(fd, fc2_d) if any_dense else 0.0
    dense_elem = (norms + act_d) * eager
    # fp8: Transformer Engine casts each GEMM input (read 2 B, write 1 + 1 B), forward and backward
    cast = fp8 * 4.0 * (tok * (2.0 * h + v_loc) + m_act * (h + fe_loc)) / hbm_Bps

    moe_f = attn_gemm_f + attn_f + moe_gemm_f + moe_elem + cast
    moe_b = 2.0 * (attn_gemm_f + moe_gemm_f + moe_elem) + attn_b + cast
    den_f = attn_gemm_f + attn_f + dense_gemm_f + dense_elem + cast
    den_b = 2.0 * (attn_gemm_f + dense_gemm_f + dense_elem) + attn_b + cast
    moe_r = ops.where(rc_full, moe_f, ops.where(rc_sel, act_e + act_s, 0.0)) + up_proj_r
    # a recompute stopped early skips the dense MLP's fc2 (layer.py); a MoE layer's combine weights the experts'
    # output by the router's probabilities and saves it, so its expert GEMMs rerun
    early = c["recompute_early_stop"]
    if any_dense and ops.any(early > 0):
        den_f_r = den_f - early * ops.where(fd > 0, fc2_d, 0.0)
    else:
        den_f_r = den_f
    den_r = ops.where(rc_full, den_f_r, ops.where(rc_sel, act_d, 0.0)) + up_proj_r

    # --- all-to-all dispatch and combine ---------------------------------------------------------
    copies = tok_r * k * h * load
    dispatch = (k, c["moe_dispatcher"], c["routed_nodes_limit"])
    disp_B = kern.BYTES_16BIT - fp8 * c["moe_fp8_dispatch"]  # bytes per dispatched value (the combine stays 16-bit)
    t_disp, t_comb = a2a_times_s((copies * disp_B, copies * kern.BYTES_16BIT), ep, etp, fabric, *dispatch)
    # expert tensor parallelism: the received token copies are all-gathered over the etp ranks before the
    # expert GEMMs and reduce-scattered after them (Megatron-Core MoEAlltoAllTokenDispatcher, ETP > 1); the
    # dense model already charges one all-gather/reduce-scatter pair of tok*h for the MLP, so only the
    # excess of the (top_k x load)-times larger expert pair is added (an etp < tp plan keeps the dense pair)
    etp_pair = 0.0
    if ops.any(etp > 1):
        etp_bw, etp_lat = fabric.link(etp, 1.0)
        expert_pair = 2.0 * comm.all_gather_s(m_act * h * kern.BYTES_16BIT, etp, etp_bw, etp_lat)
        mlp_pair = tp_ar_s
        etp_pair = ops.where(moe & (etp > 1), ops.maximum(expert_pair - ops.where(tp > 1, mlp_pair, 0.0), 0.0), 0.0)
    # the backward chunk carries the recompute: its forward GEMMs and, under full recompute, its dispatch and combine
    attn_F = attn_gemm_f + attn_f
    attn_B = 2.0 * attn_gemm_f + attn_b + ops.where(rc_full, attn_F, 0.0) + up_proj_r
    a2a_b = (t_comb + ops.where(rc_full, t_disp, 0.0), t_comb + ops.where(rc_full, t_comb, 0.0))
    exposed_f, exposed_b = paired_a2a_exposed_s((t_disp, t_comb), a2a_b, (attn_F, moe_f - attn_F),
                                                (attn_B, moe_b + moe_r - attn_B), c["moe_a2a_overlap"])
    # a chunk pairs with another micro-batch's: a step's first forward and last backward have none to pair with
    paired = ops.maximum(m - 1.0, 0.0) / ops.maximum(m, 1.0)
    exposed_f = paired * exposed_f + (1.0 - paired) * (t_disp + t_comb)
    exposed_b = paired * exposed_b + (1.0 - paired) * (a2a_b[0] + a2a_b[1])
    # a hidden transfer's kernels hold A2A_SM_SHARE of the SMs: the compute beside it runs on the rest
    stretch = A2A_SM_SHARE / (1.0 - A2A_SM_SHARE)
    ep_f1 = exposed_f + stretch * (t_disp + t_comb - exposed_f) + etp_pair
    ep_b1 = exposed_b + stretch * (a2a_b[0] + a2a_b[1] - exposed_b) + etp_pair * (1.0 + rc_full)

    # --- which layers the stages hold ------------------------------------------------------------
    n_stage, n_first, n_last = stages
    one_stage = pp * v <= 1
    nd = c["dense_layers"]
    n_dense_slot = ops.where(moe, ops.where(one_stage, nd, 0.0), n_stage)   # the slowest stage: MoE layers
    n_dense_first = ops.where(moe, ops.minimum(nd, n_first), n_first)
    n_dense_last = ops.where(moe, ops.where(one_stage, nd, 0.0), n_last)
    n_dense_mid = ops.where(moe, ops.clip(nd - n_first, 0.0, n_stage), n_stage)
    w_slot = n_dense_slot / ops.maximum(n_stage, 1.0)

    def avg(dense_v, moe_v, w):
        return w * dense_v + (1.0 - w) * moe_v

    layer_f = avg(den_f, moe_f, w_slot)
    layer_b = avg(den_b, moe_b, w_slot)
    layer_r = avg(den_r, moe_r, w_slot)
    ep_f = ops.where(moe, (1.0 - w_slot) * ep_f1, 0.0)
    ep_b = ops.where(moe, (1.0 - w_slot) * ep_b1, 0.0)
    split_bwd = sch.uses_split_backward(c["schedule"])  # zero-bubble / DualPipe rows: their W pass (below)
    gemm_f = attn_gemm_f + avg(dense_gemm_f, moe_gemm_f, w_slot) if split_bwd else None

    # --- activations (bytes per layer and micro-batch) ---------------------------------------------
    norm_out = 2.0 - fp8
    sbh = tok * h
    q_w, o_w = qk_loc, v_loc
    k_w, v_w = ops.where(mla, qk_loc, kv_loc), ops.where(mla, v_loc, kv_loc)
    latents = ops.where(mla, 2.0 * kern.BYTES_16BIT * tok * (ops.maximum(ql, 0.0) + kvl + rope), 0.0)
    qkv_kept = 1.0 - up_rerun  # q, k, v as the attention kernel reads them, unless rebuilt from the latents
    attn_act = ((4.0 + 2.0 * norm_out) * sbh / rep_div + kern.BYTES_16BIT * tok * (q_w + k_w + v_w) * qkv_kept
                + (2.0 + fp8) * tok * o_w + latents)

    mlp_act_B = (2.0 + 2.0 * g) + (2.0 - fp8)

    def mlp_act(n_tok, width):  # fc1 output(s) and the activation output (its fc2 input)
        return n_tok * width * mlp_act_B

    routed_act = m_act * ((2.0 - fp8) * h + kern.BYTES_16BIT * h) + mlp_act(m_act, fe_loc)  # fc1 input, expert output
    moe_none = attn_act + routed_act + mlp_act(tok, fs_loc)
    den_none = attn_act + mlp_act(tok, fd_loc)
    moe_sel = moe_none - (2.0 - fp8) * (m_act * fe_loc + tok * fs / tp)
    den_sel = den_none - (2.0 - fp8) * tok * fd / tp
    full = 2.0 * sbh / rep_div
    w_first = n_dense_first / ops.maximum(n_first, 1.0)
    none = avg(den_none, moe_none, w_first)
    act = ops.where(rc_full, full, ops.where(rc_sel, avg(den_sel, moe_sel, w_first), none))
    dispatch_buf = ops.where(moe, 2.0 * copies * kern.BYTES_16BIT * 2.0, 0.0)   # send + receive, dispatch + combine

    # ZB-H1's deferred W passes keep each linear layer's input and output gradient (schedules.linear_wgrad_bytes);
    # the ranks that hold them (rank 1 and the last) hold MoE layers where the model has experts
    wgrad_layer = None
    if split_bwd:
        def lw(n_tok, width_in, width_out):
            return sch.linear_wgrad_bytes(n_tok, width_in, width_out, fp8)
        h_r = h / rep_div
        attn_w = sch.attention_wgrad_bytes(tok, h_r, q_loc, kv_loc, fp8)
        if any_mla:  # down projections (replicated), up projections, output projection (moe_params.mla_params)
            mla_w = (ops.where(ql > 0, lw(tok_r, h, ql) + lw(tok, ql, qk_loc), lw(tok, h_r, qk_loc))
                     + lw(tok_r, h, kvl + rope) + lw(tok, kvl, a * (nope + d_v) / tp) + lw(tok, v_loc, h_r))
            attn_w = ops.where(mla, mla_w, attn_w)

        def mlp_w(n_tok, width_loc, width_in):  # an MLP the layer may lack (no shared experts: width 0)
            return ops.where(width_loc > 0, sch.mlp_wgrad_bytes(n_tok, width_in, width_loc, g, fp8), 0.0)
        wgrad_layer = attn_w + ops.where(moe, mlp_w(tok, fs_loc, h_r) + mlp_w(m_act, fe_loc, h), mlp_w(tok, fd_loc, h_r))

    # --- parameters on each rank -------------------------------------------------------------------
    mla_parts = mla_params(c, d_qk, d_v)
    attn_loc = attention_params_local(c, tp, w, kv_loc, mla_parts)
    # the MLA weights plan.recompute_mla_up_proj reruns (the TP-split ones less the output projection), where it does
    up_rerun_params = ops.where(up_rerun > 0, mla_parts[1] - a * d_v * h, 0.0) if ops.any(up_rerun > 0) else None
    mlp_w = g2 * h
    dense_loc = attn_loc + mlp_w * fd / tp
    moe_loc = attn_loc + h * E + mlp_w * fs / tp
    exp_loc = ops.where(moe, local * mlp_w * fe_loc, 0.0)
    untied_out = ops.where(pp > 1, 0.0, (1.0 - c["tied_embeddings"]) * emb_loc)
    params_first = n_dense_first * dense_loc + (n_first - n_dense_first) * moe_loc + emb_loc + untied_out
    params_last = n_dense_last * dense_loc + (n_last - n_dense_last) * moe_loc + emb_loc
    params_mid = n_dense_mid * dense_loc + (n_stage - n_dense_mid) * moe_loc
    edp = tp * cp * dp / (ep * etp)
    # the heaviest layer as ZeRO-3 gathers it and offload streams it: a dense layer of the model, or a MoE layer
    # with its local routed experts; the largest single matrix: a fused QKV, output or fc1 weight
    no_dense = moe & (nd <= 0)  # a MoE model without leading dense layers
    dense_layer = ops.where(no_dense, 0.0, dense_loc)
    layer_params = ops.maximum(dense_layer, ops.where(moe, moe_loc + exp_loc, 0.0))
    gathered_layer = None
    if ops.any(c["zero"] >= 3):  # experts not sharded (edp = 1) stay resident in full: nothing to gather
        gathered_layer = ops.maximum(dense_layer, ops.where(moe, moe_loc + ops.where(edp > 1, exp_loc, 0.0), 0.0))
    largest_weight = None
    if not ops.all(ops.isnan(c["zero3_live_params"])):  # DeepSpeed's cap on live gathered parameters is set
        fc1 = h * g1 * ops.maximum(ops.maximum(ops.where(no_dense, 0.0, fd_loc), ops.where(moe, fs_loc, 0.0)),
                                   ops.where(moe, fe_loc, 0.0))
        attn_mat = h * (q_loc + 2.0 * kv_loc)
        if any_mla:  # MLA's down projections (replicated), up projections and output projection (split)
            mla_mat = ops.maximum(ops.maximum(h * ops.maximum(ql, 0.0), h * (kvl + rope)),
                                  ops.maximum(ops.maximum(ops.where(ql > 0, ql, h) * qk_loc,
                                                          kvl * a * (nope + d_v) / tp), v_loc * h))
            attn_mat = ops.where(mla, mla_mat, attn_mat)
        largest_weight = ops.maximum(fc1, attn_mat)

    if ops.all(rows):  # every row extended: the dense values are not needed
        pick = _first
        dense_first = dense_last = dense_mid = None
    else:
        def pick(ext_v, dense_v):
            return ops.where(rows, ext_v, dense_v)
        dense_first = n_first * dense_params_layer + emb_loc + untied_out
        dense_last, dense_mid = n_last * dense_params_layer + emb_loc, n_stage * dense_params_layer

    return Terms(
        rows=rows, layer_f=pick(layer_f, dense_layer_f), layer_b=pick(layer_b, dense_layer_b),
        layer_r=pick(layer_r, dense_layer_r), attn_f=pick(attn_f, dense_attn_f), attn_b=pick(attn_b, dense_attn_b),
        kv_loc=pick(0.5 * (k_w + v_w), dense_kv_loc), ep_f=ep_f, ep_b=ep_b,
        act_layer=pick(act, dense_act), act_layer_none=pick(none, dense_act_none), dispatch_buf=dispatch_buf,
        params_first=pick(params_first, dense_first), params_last=pick(params_last, dense_last),
        params_mid=pick(params_mid, dense_mid),
        experts_first=(n_first - n_dense_first) * exp_loc, experts_last=(n_last - n_dense_last) * exp_loc,
        experts_mid=(n_stage - n_dense_mid) * exp_loc, experts_layer=exp_loc, edp=edp, edp_stride=ep * etp,
        layer_params=pick(layer_params, dense_params_layer), largest_weight=largest_weight, gemm_f=gemm_f,
        gathered_layer=None if gathered_layer is None else pick(gathered_layer, dense_params_layer),
        wgrad_layer=wgrad_layer, widths=w,
        mla_parts=mla_parts, up_rerun_params=up_rerun_params,
    )


def _first(ext_v, dense_v):
    return ext_v


def model_flops_params(c, ext: Terms, tokens_step, dense_flops_params, span=1.0):
    """(model FLOPs per step, the same over all parameters, parameters, active parameters). Extended rows
    count the active parameters (MFU, as MoE papers); the other rows take ``dense_flops_params()``
    (model FLOPs per step, parameters), called only where some row is not extended. ``span``: the
    attention count's share left by sliding windows (:func:`.window.counted_span_fraction`)."""
    parts = layer_parts(c, ext.widths, ext.mla_parts)
    pt, pa = param_counts(c, ext.widths, ext.mla_parts, parts)
    fa, ft = flops_per_token(c, (pt, pa), ext.widths, ext.mla_parts, parts, span)
    if ops.all(ext.rows):
        return fa * tokens_step, ft * tokens_step, pt, pa
    model_flops, params = dense_flops_params()
    model_flops = ops.where(ext.rows, fa * tokens_step, model_flops)
    total_flops = ops.where(ext.rows, ft * tokens_step, model_flops)
    return model_flops, total_flops, ops.where(ext.rows, pt, params), ops.where(ext.rows, pa, params)
