"""The vectorized model: arrays of configurations in, arrays of metrics out.

One call evaluates any number of configurations with numpy, with no Python loop per
configuration. Step time of one optimizer step (Narayanan et al. SC'21 sec. 3):

  slot   = per-micro-batch work of the slowest pipeline stage (forward + backward + recompute +
           exposed tensor/context-parallel comm + pipeline sends + exposed FSDP gathers)
  step   = (m + (pp-1)/v) * slot  +  exposed data-parallel gradient reduction  +  optimizer step

and ``breakdown`` splits it exactly into compute, recompute, tp_comm, cp_comm, pp_comm, dp_comm,
bubble, optimizer and offload. Co-design knobs: collective algorithms per group and spine
oversubscription (:mod:`.collectives`), a memory expansion tier with offloading (:mod:`.expansion`:
exposed transfers join the slot, the tier's optimizer step replaces the GPU's), and time-to-accuracy
from the statistical efficiency of the batch (:mod:`.statistical`).
"""
from __future__ import annotations

from typing import Mapping, NamedTuple

import numpy as np

from . import _ops as ops
from . import blocks
from . import burst as dpool
from . import collectives as coll
from . import communication as comm
from . import compute as kern
from . import expansion as xp
from . import flops as fl
from . import moe
from . import power as pw
from . import memory as mem
from . import schedules as sch
from . import window as win
from .columns import broadcast_columns, scalar_columns
from .feasibility import physical_mask, valid_mask
from .pipeline import bubble_slots, num_microbatches
from .profile import DEFAULT_PROFILE, Profile
from .training import SECONDS_PER_DAY, training_metrics  # noqa: F401 - SECONDS_PER_DAY re-exported
from .layer import dense_layer, gemm_forward_s, op_sac_rerun_matmuls
from .moe_params import head_widths

#: Bytes per logit element held for the loss on the last stage: the 16-bit logits and the fp32
#: softmax kept for the backward, whose gradient is written in place (Megatron-Core
#: vocab_parallel_cross_entropy).
LOGIT_BYTES = 6.0
#: The same under ``training.cross_entropy: eager``: PyTorch's F.cross_entropy on fp32 logits (torchtitan 2024: the
#: model returns ``self.output(h).float()``, train.py calls the loss outside torch.compile and ``del pred`` before
#: the backward). At the loss backward the saved fp32 log-softmax, nll_loss's fp32 gradient and log_softmax's fp32
#: input gradient are live at once: 12 B per logit (the 16-bit logits and the fp32 copy are freed by then).
LOGIT_BYTES_EAGER = 12.0

BREAKDOWN_KEYS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "bubble", "optimizer",
                  "offload")
MEMORY_KEYS = ("weights", "gradients", "optimizer", "activations")
#: Rows per pass of the model over a large input: each temporary (512 KiB) stays in the 32 MiB L3 cache
#: instead of streaming 8 MB per million rows through memory; exact (the model is elementwise). Was 16k
#: (np.where on a random mask costs 1.7 ns/row at 16k rows, 3.3 at 32k), but with fewer np.where calls
#: 64k rows beat 16k by 15-19 % (dense mix) and 3-14 % (MoE mix), 2026-11-24, experiments/bench_model.py.
CHUNK_ROWS = 65536


def evaluate(columns: Mapping[str, object], profile: Profile = DEFAULT_PROFILE) -> dict[str, np.ndarray]:
    """Predict step time, memory, throughput and cost for every configuration in ``columns``.

    ``columns`` maps the names in :data:`cosearch.model.columns.INPUT_COLUMNS` to scalars or arrays
    (broadcast together). Rows that break a divisibility rule get ``valid = False`` (not an
    exception); ``feasible = valid & fits``.
    """
    c = broadcast_columns(columns, lean=True)  # single-valued columns stay 0-d
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        shape = c["gpus"].shape
        # a 1-D batch holding dense and MoE/MLA rows (issue 13) is evaluated in two parts, so that
        # neither pays for the other's physics (identical values)
        split = moe.split_rows(c) if len(shape) == 1 else None
        if split is None and (len(shape) != 1 or shape[0] <= 2 * CHUNK_ROWS):
            out = _evaluate(c, profile)
            out = {k: np.asarray(v) if np.shape(v) == shape else np.array(np.broadcast_to(v, shape)) for k, v in out.items()}
        else:
            deeppool = _deeppool_present(c)  # decided once, so that every block has the same output columns
            # a split batch leaves the training outputs to contiguous slices of the merged step times (fewer scatters)
            finish = None if deeppool or split is None else (lambda out: _deferred_training(c, shape[0], out))
            out = blocks.evaluate_blocks(c, shape[0], CHUNK_ROWS, split, lambda cols: _evaluate(
                cols, profile, deeppool=deeppool, training=finish is None), lazy=not deeppool, finish=finish)
        return _unphysical_invalid(c, out)


def _unphysical_invalid(c, out: dict) -> dict:
    """``out`` with ``valid`` and ``feasible`` False where the inputs are not physical (:func:`.feasibility.
    physical_mask`) or the step time is not a finite positive number (a plan that needs a network of 0 Gb/s).
    Both raw-column entry points apply it (:func:`evaluate`, :func:`evaluate_scalar`); ``estimate`` reads a
    range-checked Scenario and skips it."""
    ok = physical_mask(c) & np.isfinite(out["step_time_s"]) & (out["step_time_s"] > 0)
    if not np.all(ok):
        if not isinstance(out["valid"], np.ndarray):  # one configuration (evaluate_scalar): plain bools
            out["valid"] = out["feasible"] = False
        else:
            out["valid"], out["feasible"] = np.asarray(out["valid"] & ok), np.asarray(out["feasible"] & ok)
    return out


def _training(c, step):
    """:func:`.training.training_metrics` of the rows of ``c`` at ``step`` seconds per step."""
    watts = pw.drawn_w(c["power_w"], c["power_limit_w"])  # a power-limited GPU draws at most its limit
    return training_metrics(step, c["global_batch"] * c["seq_len"], c["gpus"] * c["price_usd_per_gpu_hour"],
                            c["gpus"] * watts, c["tokens"], c["target_tokens"], c["critical_batch_tokens"],
                            moe=c["experts"] > 0)


def _deferred_training(c, n: int, out: dict) -> None:
    """Fill the training outputs the blocks left as None, slice by slice of the merged ``step_time_s``."""
    for start in range(0, n, CHUNK_ROWS):
        rows = slice(start, min(start + CHUNK_ROWS, n))
        for k, v in _training(blocks.rows_of(c, rows), out["step_time_s"][rows]).items():
            if out[k] is None:
                out[k] = np.empty(n, dtype=np.asarray(v).dtype)
            out[k][rows] = v


def evaluate_scalar(columns: Mapping[str, object], profile: Profile = DEFAULT_PROFILE) -> dict[str, float | bool]:
    """:func:`evaluate` for ONE configuration, returning plain Python floats and bools.

    The same model code runs on Python floats (:mod:`._ops` dispatches each operation), about 20x
    faster than numpy on 0-d arrays. Python raises where numpy returns inf/NaN (a division by zero,
    in practice only in rows that break a rule or have a zero rate); such a configuration is evaluated
    again on 0-d arrays, so the values always equal the vectorized path's.
    """
    c = scalar_columns(columns)
    return _unphysical_invalid(c, evaluate_scalar_columns(c, profile))


def evaluate_scalar_columns(c: dict[str, float], profile: Profile = DEFAULT_PROFILE) -> dict[str, float | bool]:
    """:func:`evaluate_scalar` on the complete float columns of :func:`scalar_columns` (no copy, no checks)."""
    try:
        return _evaluate(c, profile)
    except (ArithmeticError, ValueError):
        return {k: v.item() for k, v in evaluate(c, profile).items()}


def evaluate_parts(columns: Mapping[str, object], profile: Profile = DEFAULT_PROFILE) -> tuple[dict, dict]:
    """:func:`evaluate` plus the per-layer and per-stage pieces behind it (``parts``), which the
    heterogeneous composition (:mod:`.hetero`) reuses instead of repeating the physics."""
    c = broadcast_columns(columns)
    parts: dict = {}
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _evaluate(c, profile, parts), parts


def burst_schedule(columns: Mapping[str, object], profile: Profile = DEFAULT_PROFILE) -> list[float]:
    """Data-parallel width of every burst stage (each block of ``burst_block_layers`` layers, then the
    logits head) of ONE configuration with ``burst: 1``; [] when no schedule exists."""
    c = broadcast_columns(columns)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        sched = _evaluate(c, profile, record=True).get("burst_schedule")
    if sched is None:
        return []
    widths, path = sched
    return [float(widths.reshape(-1)[i]) for i in np.asarray(path).reshape(-1)]


def _deeppool_present(c: Mapping[str, object]) -> bool:
    """True when burst or multiplex columns carry a value (absent: NaN): DeepPool metrics are computed."""
    return not (ops.all(ops.isnan(c["burst"])) and ops.all(ops.isnan(c["multiplex"])))


class KernelRates(NamedTuple):
    """A GPU's kernel rates as the model charges them (at the job's slowest GPU's pace), before the head-width,
    per-query-block fixed-cost and sliding-window factors of attention."""

    gemm_Fps: object    # GEMMs at the run's precision, FLOP/s
    gemm16_Fps: object  # 16-bit GEMMs (attention, logits and non-GEMM math stay 16-bit under fp8), FLOP/s
    attn_Fps: object    # the row's fused-attention kernel (``training.attention``), FLOP/s
    hbm_Bps: object     # memory-bound kernels, B/s


def kernel_rates(c: Mapping[str, object], p: Profile) -> KernelRates:
    """The rate chain from the catalog columns (peak, matmul efficiencies, attention speed-up and legacy cap,
    HBM bandwidth), ``precision`` and ``attention`` to :class:`KernelRates` (also used by the kernel
    comparisons in experiments/gpu)."""
    fp8, attn_kind = c["precision"], c["attention"]
    peak = c["peak_tflops"] * 1e12
    limit = c.get("power_limit_w")
    if pw.limited(limit):  # a power limit below the rated power lowers the clock
        peak = peak * pw.clock_factor(limit, c["power_w"])
    gpus = c.get("gpus")
    if gpus is not None:  # a synchronous job computes at its slowest GPU's pace (power.py)
        peak = peak * pw.slowest_pace_factor(gpus)
    eff8 = kern.fp8_matmul_eta(c["matmul_efficiency"], c["matmul_efficiency_fp8"], p.fp8_matmul_relative)
    gemm_Fps = peak * (ops.where(fp8 > 0, eff8, c["matmul_efficiency"]) * p.matmul_scale)
    peak16 = ops.where(fp8 > 0, 0.5 * peak, peak)  # attention, logits and non-GEMM math stay 16-bit
    gemm16_Fps = peak16 * c["matmul_efficiency"] * p.matmul_scale
    # the GPU's own fused kernel; a faster softmax unit (Blackwell Ultra) speeds it up to at most the GEMM rate
    attn_Fps = gemm16_Fps * ops.minimum(p.flash_attention_relative * c["attention_speedup"], 1.0)
    if ops.any(attn_kind >= 2):  # kernels written for an older architecture, capped at their measured rate (gpus.yaml)
        legacy = c["legacy_attention_efficiency"]
        legacy_Fps = ops.where(ops.isnan(legacy), attn_Fps, ops.minimum(attn_Fps, legacy * peak16))
        # FlashAttention-2 itself: its measured forward + backward rate where the cap applies (compute.py)
        flash2_Fps = ops.where(ops.isnan(legacy), attn_Fps,
                               ops.minimum(attn_Fps, legacy * kern.FLASH2_CAPPED_FWD_BWD_RELATIVE * peak16))
        attn_Fps = ops.where(attn_kind == 2, legacy_Fps * p.triton_attention_relative,
                             ops.where(attn_kind == 3, flash2_Fps, attn_Fps))
    return KernelRates(gemm_Fps, gemm16_Fps, attn_Fps, c["hbm_tbps"] * 1e12 * p.hbm_efficiency)


def _evaluate(c: dict[str, np.ndarray], p: Profile, parts: dict | None = None, record: bool = False,
              deeppool: bool | None = None, training: bool = True) -> dict[str, np.ndarray]:
    """The model on ``c``; ``training`` False leaves the training outputs None (:func:`_deferred_training`)."""
    L, h, a, kvh, f = c["layers"], c["hidden"], c["heads"], c["kv_heads"], c["ffn_hidden"]
    gated, V, s, tied = c["gated_mlp"], c["vocab"], c["seq_len"], c["tied_embeddings"]
    B, fp8, attn_kind = c["global_batch"], c["precision"], c["attention"]
    fp8p = fp8 * c["fp8_param_gather"]  # 1: weights held and all-gathered in fp8 (memory.weight_bytes)
    w_B = mem.weight_bytes(fp8, fp8p)
    gather_B = kern.BYTES_16BIT - fp8p  # bytes per gathered weight (FSDP / ZeRO all-gathers)
    std_attn = attn_kind == 1
    tp, pp, dp, cp = c["tp"], c["pp"], c["dp"], c["cp"]
    mb, v, rc, sp, zero = c["microbatch"], c["interleave"], c["recompute"], c["sequence_parallel"], c["zero"]
    gpus = c["gpus"]
    # ZeRO (Megatron's distributed optimizer, FSDP) shards over the data- and context-parallel ranks, which all
    # hold the same parameters (torchtitan's FSDP2 mesh dp_shard_cp; Megatron-Core's dp-with-cp group); a stated
    # zero_group (hybrid sharding) is a group of data-parallel ranks, replicated over the rest and over cp
    zg_dp = ops.isnan(c["zero_group"])
    zg = ops.where(zg_dp, dp * cp, c["zero_group"])
    zg_stride = ops.where(zg_dp, tp, tp * cp)  # dp x cp ranks sit at stride tp; a dp subgroup at stride tp * cp

    # --- rates -------------------------------------------------------------------------------
    gemm_Fps, gemm16_Fps, attn_Fps, hbm_Bps = kernel_rates(c, p)
    attn_Fps = attn_Fps * kern.attention_head_width_factor(*head_widths(c))  # narrow heads: softmax-bound
    # each fused kernel's fixed cost per query block (compute.py; none for the 2023 Triton kernel) and, with sliding
    # windows, the key blocks outside the band skipped (window.py)
    fixed_keys = ops.where(attn_kind == 2, 0.0, kern.ATTENTION_FIXED_KEYS)
    attn_Fps = attn_Fps / win.attention_time_factor(c, s / cp, fixed_keys)
    span = win.counted_span_fraction(c) if win.active(c) else 1.0  # the attention term's share in the model-FLOPs count
    nvl_Bps = c["nvlink_gbps"] * 1e9 * p.nvlink_efficiency
    net_Bps = c["network_gbps"] * (1e9 / 8.0) * p.network_efficiency
    dom = c["nvlink_domain"]
    fabric = coll.Fabric(nvl_Bps, net_Bps, p.nvlink_latency_s, p.network_latency_s, dom,
                         c["oversubscription"], c["leaf_gpus"])
    t0 = p.gemm_overhead_s

    # --- shapes ------------------------------------------------------------------------------
    m = num_microbatches(B, dp, mb)
    s_loc = s / cp
    tok = mb * s_loc                                  # tokens per micro-batch per rank
    head_dim = h / a
    kv_loc = dense_kv = head_dim * ops.maximum(kvh / tp, 1.0)  # K (or V) width per TP rank; replicated past kvh
    h_rep = ops.where(sp > 0, h / tp, h)               # width of replicated (norm/dropout) tensors

    # --- one layer, one micro-batch (.layer); skipped where every row is MoE/MLA (.moe replaces it) ---
    in_B = kern.BYTES_16BIT - fp8                      # GEMM input bytes: fp8 operands are 1 B
    moe_on = moe.active(c)
    ext_only = moe_on and ops.all(moe.extended_rows(c))
    if ext_only:
        gemm_f = layer_f = layer_b = layer_r = attn_f = attn_b = act_layer = act_layer_none = None
    else:
        gemm_f, layer_f, layer_b, layer_r, attn_f, attn_b, act_layer, act_layer_none = dense_layer(
            c, tok=tok, s_loc=s_loc, mb=mb, tp=tp, sp=sp, rc=rc, fp8=fp8, in_B=in_B, kv_loc=kv_loc, h_rep=h_rep,
            gemm_Fps=gemm_Fps, gemm16_Fps=gemm16_Fps, attn_Fps=attn_Fps, hbm_Bps=hbm_Bps, t0=t0)
    layer_params_loc = (2.0 * h * h / tp) + 2.0 * h * kv_loc + (2.0 + gated) * h * f / tp
    emb_loc = V * h / tp

    # layers on the fullest, first and last rank (uneven splits allowed: first and last hold a layer fewer)
    mtp = c["mtp_layers"]
    any_mtp = ops.any(mtp > 0)  # multi-token prediction: each module is one layer more in the split
    n_stage, n_first, n_last = mem.stage_layers(L + mtp if any_mtp else L, pp, v)
    act_bytes = tok * h * kern.BYTES_16BIT
    tp_ar_legacy = coll.legacy_time_s("all_reduce", act_bytes, tp, 1.0, fabric)

    # --- issue 13 hook: MoE / MLA / explicit head_dim rows replace the per-layer values (.moe) ----
    ext = None
    if moe_on:
        ext = moe.terms(c, tok=tok, s_loc=s_loc, mb=mb, m=m, tp=tp, sp=sp, pp=pp, v=v, rc=rc, fp8=fp8, in_B=in_B,
                        gemm_Fps=gemm_Fps, attn_Fps=attn_Fps, hbm_Bps=hbm_Bps, t0=t0, fabric=fabric,
                        stages=(n_stage, n_first, n_last), tp_ar_s=tp_ar_legacy,
                        dense_layer_f=layer_f, dense_layer_b=layer_b, dense_layer_r=layer_r, dense_attn_f=attn_f,
                        dense_attn_b=attn_b, dense_kv_loc=kv_loc, dense_act=act_layer, dense_act_none=act_layer_none,
                        dense_params_layer=layer_params_loc, emb_loc=emb_loc)
        layer_f, layer_b, layer_r, attn_f, attn_b, kv_loc = ext.layer_f, ext.layer_b, ext.layer_r, ext.attn_f, ext.attn_b, ext.kv_loc
        act_layer, act_layer_none = ext.act_layer, ext.act_layer_none

    # logits on the last stage: forward GEMM, two backward GEMMs, and the fp32 cross-entropy passes
    logit_gemm = kern.gemm_time_s(tok, V / tp, h, gemm16_Fps, hbm_Bps, t0)
    logit_elem = tok * (V / tp) * 3.0 * 4.0 / hbm_Bps
    logits_f = logit_gemm + logit_elem
    logits_b = 2.0 * logit_gemm + logit_elem

    # --- communication inside a micro-batch ---------------------------------------------------
    # Megatron: 2 all-reduces (or with SP 2 all-gathers + 2 reduce-scatters) per layer in forward,
    # 2 in backward, 2 more when the forward is recomputed.
    tp_ar = ops.where(tp > 1, coll.collective_s("all_reduce", c["tp_collective"], act_bytes, tp, 1.0, fabric,
                                                            legacy=tp_ar_legacy), 0.0)
    # Transformer Engine's overlapped fp8 path all-gathers the fp8 copy of the norm output (1 byte), so of
    # the all-gather + reduce-scatter pair that replaces each all-reduce under SP, 3/4 of the bytes remain.
    tp_ar = tp_ar * ops.where((fp8 > 0) & (sp > 0) & (c["tp_comm_overlap"] > 0), 0.75, 1.0)
    tp_exposed = 1.0 - p.tp_overlap * c["tp_comm_overlap"]
    tp_layer_f = 2.0 * tp_ar * tp_exposed
    # a recompute stopped early (layer.py) skips each dense layer's fc2 and the reduction after it: the all-reduce,
    # or under SP the reduce-scatter (half of the pair); dense models only (a MoE layer reruns its experts)
    early_dense = c["recompute_early_stop"] * (c["experts"] == 0)
    rerun_ar = 2.0 - early_dense * ops.where(sp > 0, 0.5, 1.0)
    # PyTorch's async TP hides the forward's collectives only: "up to ~29 % forward pass speedup and ~8 % E2E"
    # (Llama 3 7B and 70B, PyTorch dev-discuss 2024), the forward's share of a step; the rerun forward of a
    # recompute runs inside the backward graph and is left exposed with it
    tp_exposed_b = ops.where(c["tp_overlap_passes"] > 0, 1.0, tp_exposed)
    tp_layer_b = tp_ar * (2.0 + rerun_ar * (rc >= 2)) * tp_exposed_b
    # Context parallel (ring attention): K and V blocks circulate over cp-1 steps in forward, and K, V
    # plus their gradients in backward, overlapped with the attention computation.
    cp_bw, cp_lat = fabric.link(cp, tp)
    kv_block = 2.0 * mb * s_loc * kv_loc * kern.BYTES_16BIT
    cp_f = (cp - 1.0) * (kv_block / cp_bw + cp_lat)
    cp_exp_f = ops.maximum(cp_f - attn_f, 0.0)
    cp_layer_f = ops.where(cp > 1, cp_exp_f, 0.0)
    cp_layer_b = ops.where(cp > 1, cp_exp_f * (rc >= 2) + ops.maximum(2.0 * cp_f - attn_b, 0.0), 0.0)
    # Pipeline sends: forward activations and backward gradients at each of v stage boundaries. Each TP
    # rank sends its 1/tp slice (Megatron's scatter/gather optimization, Narayanan et al. SC'21 sec. 4.1;
    # under SP the tensor is already split).
    pp_bw, pp_lat = fabric.link(2.0, tp * cp * dp)
    p2p_bytes = act_bytes / tp
    pp_mb = ops.where(pp > 1, 2.0 * v * comm.p2p_s(p2p_bytes, pp_bw, pp_lat), 0.0)

    # --- parameters per GPU --------------------------------------------------------------------
    params_first = n_first * layer_params_loc + emb_loc + ops.where(pp > 1, 0.0, (1.0 - tied) * emb_loc)
    params_last = n_last * layer_params_loc + emb_loc
    params_mid = n_stage * layer_params_loc  # a full rank between them
    if ext is not None:
        params_first, params_last, params_mid = ext.params_first, ext.params_last, ext.params_mid
        layer_params_loc = ext.layer_params  # MoE/MLA/head_dim rows: their own layer, local experts included
    # pipeline schedule (cosearch.model.schedules): NaN/1f1b/interleaved rows keep the 1F1B code path
    sched = c["schedule"]
    split_bwd = sch.uses_split_backward(sched)
    if split_bwd:  # ZB-V's V-shape and DualPipe's two copies change what each rank holds
        params_first, params_last, params_mid = sch.rank_params(sched, pp, tied, params_first, params_last, params_mid,
                                                                emb_loc)
        if ext is not None:  # the routed experts follow the same layout (no embedding among them)
            ef, el, em = sch.rank_params(sched, pp, 1.0, ext.experts_first, ext.experts_last, ext.experts_mid, 0.0)
            ext = ext._replace(experts_first=ef, experts_last=el, experts_mid=em)
    params_stage = ops.maximum(ops.maximum(params_first, params_last), ops.where(pp > 2, params_mid, 0.0))

    # FSDP / ZeRO-3: gather the stage's weights in forward and again in backward, reduce-scatter
    # gradients in backward, every micro-batch; prefetch hides them behind compute. ``gather``: the weights'
    # all-gather (fp8 under plan.fp8_param_gather); ``scatter``: the 16-bit gradients' reduce-scatter.
    def stage_collective_s(value_B):
        t = coll.collective_s("all_gather", c["dp_collective"], params_stage * value_B, zg, zg_stride, fabric,
                              calls=n_stage)
        if ext is not None:  # FSDP + EP: routed-expert weights are gathered over the expert-data-parallel group
            t = t + ops.where((zero >= 3) & (ext.edp > 1) & (experts_stage > 0), coll.collective_s(
                "all_gather", c["dp_collective"], experts_stage * value_B, ext.edp, ext.edp_stride, fabric,
                calls=n_stage), 0.0)
        return t

    z3 = (zero >= 3) & (zg > 1)
    if ext is not None:
        experts_stage = ops.maximum(ops.maximum(ext.experts_first, ext.experts_last), ops.where(pp > 2, ext.experts_mid, 0.0))
        z3 = (zero >= 3) & ((zg > 1) | ((ext.edp > 1) & (experts_stage > 0)))
    scatter = stage_collective_s(kern.BYTES_16BIT)
    gather = stage_collective_s(gather_B) if ops.any(fp8p > 0) else scatter
    c_f = n_stage * layer_f + logits_f
    c_b = n_stage * layer_b + logits_b
    heads_f, heads_b = logits_f, logits_b  # what the last stage runs beyond its layers
    if any_mtp:  # the last stage also runs each MTP module's [h; h] -> h projection and output head: the
        # slowest stage is the fullest one (charged the logits as always) or the last with all its heads
        mtp_proj = kern.gemm_time_s(tok, h, 2.0 * h, gemm16_Fps, hbm_Bps, t0)
        has = mtp > 0  # (selected, not multiplied by 0: a row without MTP keeps its value even where it is inf)
        heads_f = ops.where(has, (1.0 + mtp) * logits_f + mtp * mtp_proj, logits_f)
        heads_b = ops.where(has, (1.0 + mtp) * logits_b + 2.0 * mtp * mtp_proj, logits_b)
        c_f = ops.where(has, ops.maximum(c_f, n_last * layer_f + heads_f), c_f)
        c_b = ops.where(has, ops.maximum(c_b, n_last * layer_b + heads_b), c_b)
    if split_bwd:  # DualPipe and ZB-V pair each end stage with another on one rank (schedules.py)
        c_f = sch.paced_stage_s(sched, pp, n_stage, n_first, n_last, layer_f, heads_f, c_f)
        c_b = sch.paced_stage_s(sched, pp, n_stage, n_first, n_last, layer_b, heads_b, c_b)
    c_r = n_stage * layer_r
    tp_mb = n_stage * (tp_layer_f + tp_layer_b)
    cp_mb = n_stage * (cp_layer_f + cp_layer_b)
    ep_mb = 0.0 if ext is None else n_stage * (ext.ep_f + ext.ep_b)  # exposed expert all-to-all
    work_f = c_f + n_stage * (tp_layer_f + cp_layer_f)          # forward of one micro-batch
    work_b = c_b + c_r + n_stage * (tp_layer_b + cp_layer_b)    # its backward (with recompute)
    if ext is not None:
        work_f, work_b = work_f + n_stage * ext.ep_f, work_b + n_stage * ext.ep_b
    first_layer = gather / ops.maximum(n_stage, 1.0)              # nothing to hide the first gather
    fsdp_ov = ops.where(ops.isnan(c["fsdp_overlap"]), p.fsdp_overlap, c["fsdp_overlap"])  # the plan's, else the profile's
    fsdp_hidden_f = ops.where(z3, ops.minimum(gather, fsdp_ov * work_f), 0.0)
    fsdp_f = first_layer + gather - fsdp_hidden_f  # the forward's exposed FSDP traffic (ZeRO-3 rows)

    def fsdp_hidden_in(work):  # the backward's gathers and reduce-scatters that ``work`` seconds of compute hide
        return ops.where(z3, ops.minimum(gather + scatter, fsdp_ov * work), 0.0)
    fsdp_hidden_b = fsdp_hidden_in(work_b)
    fsdp_mb = ops.where(z3, fsdp_f + gather + scatter - fsdp_hidden_b, 0.0)
    # tier transfers hide in the compute window FSDP traffic leaves (one window, not one each: a
    # faster compute or collective can never make the step slower)
    window_f, window_b = work_f - fsdp_hidden_f, work_b - fsdp_hidden_b

    # memory expansion tier: per-micro-batch weight/gradient streaming and activation offload
    off = c["offload"]
    any_offload = bool(ops.any(off > 0))
    exp_Bps = xp.expansion_Bps(c["expansion_gbps"])
    if any_offload:
        off_opt, off_w, off_act = xp.offloads(off, xp.OPTIMIZER), xp.offloads(off, xp.WEIGHTS), xp.offloads(off, xp.ACTIVATIONS)
        w_stage, g_stage, _ = mem.model_state_bytes(params_stage, zero, zg, fp8, fp8_params=fp8p)
        act_mb = n_stage * act_layer
        io_f = ops.where(off_w, w_stage, 0.0) + ops.where(off_act, act_mb, 0.0)
        io_b = ops.where(off_w, w_stage + 2.0 * g_stage, 0.0) + ops.where(off_act, act_mb, 0.0)
        first_fetch = xp.transfer_s(ops.where(off_w, w_stage / ops.maximum(n_stage, 1.0), 0.0), exp_Bps)
        tier_b = xp.transfer_s(io_b, exp_Bps)
        offload_b = xp.exposed_s(tier_b, window_b)
        offload_f = first_fetch + xp.exposed_s(xp.transfer_s(io_f, exp_Bps), window_f)
        offload_mb = offload_f + offload_b
    else:
        offload_mb = offload_f = offload_b = 0.0
    slot = work_f + work_b + pp_mb + fsdp_mb + offload_mb
    if split_bwd:
        if ext is not None and ops.all(ext.rows):  # W is the forward GEMMs' time (schedules.py)
            gemm_f = ext.gemm_f
        else:
            if gemm_f is None:
                gemm_f = gemm_forward_s(tok, h, f, gated, tp, dense_kv, gemm_Fps, hbm_Bps, t0, in_B)
            if ext is not None:
                gemm_f = ops.where(ext.rows, ext.gemm_f, gemm_f)
        w_s = sch.paced_wgrad_s(sched, pp, n_stage, n_first, n_last, gemm_f, logit_gemm, layer_f + layer_b,
                                heads_f + heads_b)
        # W fills bubbles by leaving the steady-state slot: it gains what the slot loses without it, less than W
        # where FSDP traffic or tier transfers already bound the backward (else a slower GEMM shortened the step)
        bound = (sched >= sch.ZB_H1) & (z3 | (off > 0) if any_offload else z3)
        if ops.any(bound):
            # the backward's exposed FSDP traffic and tier transfers without W, against those with it (the slot's)
            rest = work_b - w_s
            hidden = fsdp_hidden_in(rest)
            tier = xp.exposed_s(tier_b, rest - hidden) if any_offload else 0.0
            more = ops.where(z3, fsdp_hidden_b - hidden, 0.0) + tier - offload_b
            w_s = w_s - ops.where(bound, ops.clip(more, 0.0, w_s), 0.0)
        # F as the slot holds it: DualPipe's B_full is the rest of the slot (the pipeline sends kept there)
        slot_f = work_f + ops.where(z3, fsdp_f, 0.0) + offload_f
        bubble = sch.bubble_time_s(sched, pp, v, slot, slot_f, w_s, m)
    else:
        bubble = bubble_slots(pp, v) * slot

    # --- data-parallel gradient reduction (once per step) ----------------------------------------
    grad_bytes = params_stage * mem.GRAD_BYTES
    rep = ops.where(z3, dp * cp / zg, dp * cp)  # replicas that must agree on each gradient shard
    # Its rank extent over its size: dp*cp ranks at stride tp; under hybrid FSDP the cp ranks (stride tp) times
    # the dp/zg replicas (stride tp*cp*zg) span tp*cp*dp ranks, an effective stride of tp*zg.
    rep_stride = ops.where(z3 & (dp > zg), tp * zg, tp)
    dp_bytes = ops.where(z3, grad_bytes / zg, grad_bytes)
    def reduction_s(params, size, stride, grads=None):
        """All-reduce of the gradients; with fp8 parameters under the distributed optimizer (ZeRO 1-2) its two
        halves apart: the gradients reduce-scattered, the updated weights all-gathered in fp8 (1 B each)."""
        g_bytes = params * mem.GRAD_BYTES if grads is None else grads
        t = coll.collective_s("all_reduce", c["dp_collective"], g_bytes, size, stride, fabric)
        if not ops.any(fp8p > 0):
            return t
        split = (coll.collective_s("reduce_scatter", c["dp_collective"], g_bytes, size, stride, fabric)
                 + coll.collective_s("all_gather", c["dp_collective"], params * gather_B, size, stride, fabric))
        return ops.where((fp8p > 0) & (zero >= 1) & ops.logical_not(z3), split, t)

    dp_total = ops.where(rep > 1, reduction_s(params_stage, rep, rep_stride, dp_bytes), 0.0)
    if ext is not None:  # routed-expert gradients: reduced over the expert-data-parallel group (FSDP: reduce-scattered per micro-batch)
        dp_total = dp_total + ops.where((ext.edp > 1) & (zero < 3) & (experts_stage > 0), reduction_s(
            experts_stage, ext.edp, ext.edp_stride), 0.0)
    # hidden behind the last micro-batch's backward (as long as its tier transfers make it), in the
    # time FSDP traffic leaves free
    # (the backward slot less the network time its FSDP traffic takes: the window FSDP leaves, plus the
    # exposed tier transfers)
    free_b = ops.maximum(window_b + offload_b, 0.0)
    hide_b = p.dp_overlap * c["overlap_grad_reduce"] * free_b
    dp_exposed = ops.maximum(dp_total - hide_b, 0.0)

    owned = params_stage / ops.where(zero >= 1, zg, 1.0)
    if ext is not None:
        owned = owned + experts_stage / ops.where(zero >= 1, ext.edp, 1.0)
    opt_code = c["optimizer_states"]
    opt_B, opt_traffic = mem.optimizer_bytes(opt_code)
    optimizer = owned * opt_traffic / hbm_Bps
    if any_offload:
        # ZeRO-Offload: gradient shards go down while the reduction runs (other link, same window),
        # the tier runs Adam, updated 16-bit weights come back (not when weights live in the tier).
        down_only = off_opt & ops.logical_not(off_w)
        grad_down = xp.transfer_s(ops.where(down_only, owned * mem.GRAD_BYTES, 0.0), exp_Bps)
        chain_exposed = ops.maximum(ops.maximum(dp_total, grad_down) - hide_b, 0.0)
        upload = xp.transfer_s(ops.where(down_only, owned * w_B, 0.0), exp_Bps)
        offload_end = chain_exposed - dp_exposed + upload
        optimizer = ops.where(off_opt, xp.transfer_s(owned * opt_traffic, exp_Bps), optimizer)
    else:
        offload_end = 0.0

    pipeline = (m + bubble_slots(pp, v)) * slot  # 1F1B / interleaved; zero-bubble and DualPipe rows: m slots + bubble
    if split_bwd:  # per row, so a row's step never depends on what else is in its batch
        pipeline = ops.where(sched >= sch.ZB_H1, m * slot + bubble, pipeline)
    step = pipeline + dp_exposed + optimizer + offload_end

    # --- memory -----------------------------------------------------------------------------------
    working = ops.where(rc > 1, act_layer_none, 0.0)         # one layer being recomputed (full or op)
    if ext is not None:
        working = working + ext.dispatch_buf                  # one layer's all-to-all buffers

    div_dense = mem.state_divisors(zero, zg)  # the same for every rank's states
    div_experts = None if ext is None else mem.state_divisors(zero, ext.edp)

    def states(params, experts_key):
        w_, g_, o_ = mem.model_state_bytes(params, zero, zg, fp8, div_dense, opt_B, fp8p)
        if ext is None:
            return w_, g_, o_
        we, ge, oe = mem.model_state_bytes(getattr(ext, experts_key), zero, ext.edp, fp8, div_experts, opt_B, fp8p)
        return w_ + we, g_ + ge, o_ + oe
    ce = c["cross_entropy"]
    logits_buf = tok * (V / tp) * (ops.where(ce > 0, LOGIT_BYTES_EAGER, LOGIT_BYTES) if ops.any(ce > 0) else LOGIT_BYTES)
    # gathered ZeRO-3 parameters: PyTorch FSDP holds the current and the prefetched wrapped layer (one, where the
    # stage has one); DeepSpeed caps live gathered parameters (stage3_max_live_parameters), gathering
    # sub-modules, so the floor is its largest one (the fc1 weight)
    live = c["zero3_live_params"]
    largest_sub = h * f * (1.0 + gated) / tp
    gathered_layer = layer_params_loc
    if ext is not None:
        if ext.largest_weight is not None:
            largest_sub = ops.where(ext.rows, ext.largest_weight, largest_sub)
        if ext.gathered_layer is not None:
            gathered_layer = ext.gathered_layer
    held = ops.minimum(2.0, ops.maximum(n_stage, 1.0)) * gathered_layer
    gathered = ops.where(ops.isnan(live), held, ops.minimum(held, ops.maximum(live, largest_sub)))
    z3_buffers = ops.where(z3, gathered * gather_B, 0.0)
    # the peak is on the first rank, or with an uneven split possibly on the second (a layer more,
    # one micro-batch fewer in flight); the last rank holds one micro-batch and the logits. Each rank's
    # total is taken after the schedule and offload have moved its bytes, so the peak is the true one.
    w0, g0, o0 = states(params_first, "experts_first")
    wm, gm, om = states(params_mid, "experts_mid")
    w2, g2, o2 = states(params_last, "experts_last")
    stored0 = mem.inflight_layers(n_first, pp, v, m) * act_layer
    stored_mid = mem.inflight_layers(n_stage, pp, v, m, rank=1) * act_layer
    stored_last = n_last * act_layer
    has_mid = (pp > 2) & (n_first < n_stage)
    logits0, logits_last = ops.where(pp > 1, 0.0, logits_buf), logits_buf
    logits_mid = 0.0  # a middle rank (pp > 2) holds no output layer under any schedule
    if split_bwd:  # in-flight micro-batches, ZB-H1's deferred W passes, where the loss sits (schedules.py)
        m_w = sch.wgrad_activation_bytes(s_loc, mb, h_rep, h / tp, kv_loc, f / tp, gated, fp8)
        if ext is not None:
            m_w = ops.where(ext.rows, ext.wgrad_layer, m_w)
        stored0, stored_mid, stored_last, logits0, logits_last = sch.rank_activation_bytes(
            sched, pp, m, n_stage, n_last, act_layer, m_w, stored0, stored_mid, logits0, logits_last)
    ranks = [[w0, g0, o0, stored0], [wm, gm, om, stored_mid], [w2, g2, o2, stored_last]]
    if any_offload:
        # offloaded states and activations leave HBM for the tier; HBM keeps prefetch buffers
        shard3 = ops.where(zero >= 3, ops.maximum(zg, 1.0), 1.0)
        stream_buf = (xp.BUFFER_LAYERS * ops.maximum(layer_params_loc, emb_loc) / shard3
                      * (w_B + mem.GRAD_BYTES))
        act_buf = xp.BUFFER_LAYERS * act_layer
        tiers = []
        for r in ranks:
            w_, g_, o_, st_ = r
            tiers.append(ops.where(off_opt, o_, 0.0) + ops.where(off_w, w_ + g_, 0.0) + ops.where(off_act, st_, 0.0))
            r[:] = [ops.where(off_w, stream_buf, w_), ops.where(off_w, 0.0, g_), ops.where(off_opt, 0.0, o_),
                    ops.where(off_act, ops.minimum(st_, act_buf), st_)]
        expansion_used = ops.maximum(ops.maximum(tiers[0], tiers[2]), ops.where(has_mid, tiers[1], 0.0))
    else:
        expansion_used = ops.zeros_like(B)
    (w0, g0, o0, stored0), (wm, gm, om, stored_mid), (w2, g2, o2, stored_last) = ranks
    act0 = stored0 + working + logits0
    act_mid = stored_mid + working + logits_mid
    act_last = stored_last + working + logits_last
    tot0 = w0 + g0 + o0 + act0 + z3_buffers
    tot_mid = ops.where(has_mid, wm + gm + om + act_mid + z3_buffers, 0.0)
    tot_last = w2 + g2 + o2 + act_last + z3_buffers
    # the peak rank (0, a middle one, the last), whose parts the breakdown reports
    peak_mid = tot_mid > ops.maximum(tot0, tot_last)
    peak_last = ops.logical_not(peak_mid) & (tot_last > tot0)

    def at_peak(first, mid, last):
        return ops.where(peak_mid, mid, ops.where(peak_last, last, first))
    memory_bytes = at_peak(tot0, tot_mid, tot_last)
    usable = mem.usable_hbm_bytes(c["hbm_gib"], p.hbm_reserved_gib, p.hbm_fragmentation)
    expansion_ok = xp.tier_fits(expansion_used, c["expansion_gib"], c["expansion_pooled"], c["gpus_per_node"])
    fits = (memory_bytes <= usable) & expansion_ok

    # --- hook: DeepPool burst parallelism and multiplexing (cosearch.model.burst); columns absent: no work
    deeppool = _deeppool_present(c) if deeppool is None else deeppool
    if deeppool:
        busy_gpu_s = m * (c_f + c_b + c_r) * gpus
        uniform_step, min_dp = step, dp
        if ops.any(c["burst"] == 1.0):
            step, memory_bytes, fits, burst_busy, min_dp, schedule = dpool.burst_step(
                c, fabric, step, memory_bytes, fits, m * (logits_f + logits_b), layer_params_loc, params_stage,
                lambda cols: _evaluate(cols, p), record=record)
            busy_gpu_s = ops.where(ops.isnan(burst_busy), busy_gpu_s, burst_busy)

    # --- throughput, utilization, cost ----------------------------------------------------------
    tokens_step = B * s
    def dense_flops_params():
        return (fl.model_flops_per_token(L, h, a, kvh, f, gated, V, s, mtp, span) * tokens_step,
                fl.total_params(L, h, a, kvh, f, gated, V, tied))
    if ext is None:
        (model_flops, params), active_params = dense_flops_params(), None
        total_flops = model_flops
    else:  # MoE: model FLOPs of the active parameters, and of all of them
        model_flops, total_flops, params, active_params = moe.model_flops_params(c, ext, tokens_step, dense_flops_params,
                                                                                 span)
    # hardware FLOPs add what is recomputed: the whole forward of each layer (full), or the attention
    # core Q.K^T and A.V (selective with unfused attention; Korthikanti et al. 2022 count it in HFU)
    attn_core = L * span * fl.attention_flops_per_token(h, s) * tokens_step
    # (stopped early, a dense model's fc2 is not rerun; a MoE model's few leading dense layers are not subtracted)
    fc2_skipped = early_dense * L * 2.0 * h * f * tokens_step if ops.any(early_dense > 0) else 0.0
    # (op: torchtitan's per-op SAC reruns wk, wo and w3 -- w2 in a GeLU MLP -- of every layer)
    op_sac = (L * sum(2.0 * n * k for n, k in op_sac_rerun_matmuls(h, h, f, kvh * h / a, gated)) * tokens_step
              if ops.any(rc == mem.OP_SAC) else 0.0)
    recompute_fwd_flops = ops.where(rc >= 2, model_flops / 3.0 - (1.0 + mtp) * 2.0 * h * V * tokens_step - fc2_skipped,
                                   ops.where(rc > 1, op_sac, ops.where((rc >= 1) & std_attn, attn_core, 0.0)))
    if ext is not None and ext.up_rerun_params is not None:
        # plan.recompute_mla_up_proj (moot under full recompute): MLA's q and k/v up-projections rerun in the backward
        recompute_fwd_flops = recompute_fwd_flops + L * 2.0 * ext.up_rerun_params * tokens_step
    model_tflops_per_gpu = model_flops / (step * gpus) / 1e12
    hw_tflops_per_gpu = (model_flops + recompute_fwd_flops) / (step * gpus) / 1e12
    run = _training(c, step) if training else blocks.DEFERRED
    tokens_per_s = run["tokens_per_s"]
    valid = valid_mask(c)

    out = {
        "valid": valid,
        "fits": fits,
        "feasible": valid & fits,
        "step_time_s": step,
        "tokens_per_s": tokens_per_s,
        "model_tflops_per_gpu": model_tflops_per_gpu,
        "hardware_tflops_per_gpu": hw_tflops_per_gpu,
        # against the dense peak of the plan's precision (fp8 peak for fp8 plans, as NVIDIA's recipes
        # report it), so it never exceeds 1
        "mfu": model_tflops_per_gpu / c["peak_tflops"],  # the rated peak, also under a power limit
        "memory_gib": memory_bytes / mem.GIB,
        "usable_memory_gib": usable / mem.GIB,
        "cost_usd_per_step": run["cost_usd_per_step"],
        "time_to_train_days": run["time_to_train_days"],
        "cost_to_train_usd": run["cost_to_train_usd"],
        "energy_to_train_mwh": run["energy_to_train_mwh"],
        "steps_to_target": run["steps_to_target"],
        "tokens_to_target": run["tokens_to_target"],
        "statistical_efficiency": run["statistical_efficiency"],
        "time_to_accuracy_days": run["time_to_accuracy_days"],
        "cost_to_accuracy_usd": run["cost_to_accuracy_usd"],
        "gpus": gpus,
        "dp": dp,
        "num_microbatches": m,
        "params": params,
        "active_params": params if active_params is None else active_params,
        "total_param_tflops_per_gpu": total_flops / (step * gpus) / 1e12,
        "time_compute_s": m * (c_f + c_b),
        "time_recompute_s": m * c_r,
        "time_tp_comm_s": m * tp_mb,
        "time_cp_comm_s": m * cp_mb,
        "time_ep_comm_s": m * ep_mb + ops.zeros_like(step),
        "time_pp_comm_s": m * pp_mb,
        "time_dp_comm_s": m * fsdp_mb + dp_exposed,
        "time_bubble_s": bubble,
        "time_optimizer_s": optimizer,
        "time_offload_s": m * offload_mb + offload_end + ops.zeros_like(step),
        "mem_weights_gib": at_peak(w0, wm, w2) / mem.GIB,
        "mem_gradients_gib": at_peak(g0, gm, g2) / mem.GIB,
        "mem_optimizer_gib": at_peak(o0, om, o2) / mem.GIB,
        "mem_activations_gib": (at_peak(act0, act_mid, act_last) + z3_buffers) / mem.GIB,
        "dp_comm_total_s": dp_total,
        "dp_reduce_hidden_s": dp_total - dp_exposed,  # the gradient reduction hidden under the backward (overlap_grad_reduce)
        "expansion_used_gib": expansion_used / mem.GIB,
        "expansion_fits": expansion_ok,
        "idle_share": 1.0 - (m * (c_f + c_b + c_r)) / step,
        # 80 % prediction interval of the step time (cosearch.model.interval), and training at its ends
        "step_time_low_s": run["step_time_low_s"],
        "step_time_high_s": run["step_time_high_s"],
        "time_to_train_low_days": run["time_to_train_low_days"],
        "time_to_train_high_days": run["time_to_train_high_days"],
        "cost_to_train_low_usd": run["cost_to_train_low_usd"],
        "cost_to_train_high_usd": run["cost_to_train_high_usd"],
    }
    if parts is not None:  # hook for cosearch.model.hetero: one layer's and one stage's pieces, per micro-batch
        parts.update(
            layer_compute_s=layer_f + layer_b, layer_recompute_s=layer_r, layer_tp_s=tp_layer_f + tp_layer_b,
            layer_cp_s=cp_layer_f + cp_layer_b, layer_back_s=layer_b + layer_r + tp_layer_b + cp_layer_b,
            logits_s=logits_f + logits_b, logits_back_s=logits_b, slot_s=slot, p2p_bytes=p2p_bytes, fabric=fabric,
            layer_params=layer_params_loc, emb_params=emb_loc, act_layer_bytes=act_layer, working_bytes=working,
            logits_bytes=logits_buf, opt_group=zg, hbm_Bps=hbm_Bps, grad_bytes=grad_bytes, hide_b_s=hide_b,
            optimizer_s=optimizer, usable_bytes=usable, model_flops=model_flops,
            hardware_flops=model_flops + recompute_fwd_flops)
    if deeppool:
        idle_gpu_s = gpus * step - busy_gpu_s
        # default background job: this model's own work at its compute rate on one GPU (DeepPool's
        # background jobs are single-GPU runs of the same networks)
        rate = ops.where(ops.isnan(c["background_tokens_per_gpu_s"]), tokens_step / (m * (c_f + c_b + c_r) * gpus),
                         c["background_tokens_per_gpu_s"])
        bg = ops.where(c["multiplex"] == 1.0,
                       dpool.background_tokens_per_s(idle_gpu_s, step, rate, c["multiplex_interference"]), 0.0)
        out.update(uniform_step_time_s=uniform_step, burst_min_dp=min_dp, idle_share=idle_gpu_s / (gpus * step),
                   idle_gpu_s=idle_gpu_s, background_tokens_per_s=bg, total_tokens_per_s=tokens_per_s + bg)
        if record and ops.any(c["burst"] == 1.0):
            out["burst_schedule"] = schedule
    return out
