"""One dense transformer layer, one micro-batch, on one GPU: kernel times and kept activations.

Split out of :mod:`.evaluate` so that the evaluator can skip it where :mod:`.moe` replaces every
per-layer value (a block of MoE/MLA rows) and compute only the attention kernel a block uses. The
terms: Megatron-LM's four GEMMs (QKV, projection, fc1, fc2; Narayanan et al. SC'21), the attention
core (fused or unfused, :mod:`.compute`), elementwise traffic and fp8 casts, recompute per mode, and
the activations of Korthikanti et al. 2022 (:func:`.memory.layer_activation_bytes`).
"""
from __future__ import annotations

from typing import NamedTuple

from . import _ops as ops
from . import compute as kern
from . import memory as mem


class DenseLayer(NamedTuple):
    """Seconds (forward, backward, recompute; attention core alone) and bytes kept per layer."""

    gemm_f: object
    layer_f: object
    layer_b: object
    layer_r: object
    attn_f: object
    attn_b: object
    act_layer: object       # kept under the row's recompute mode
    act_layer_none: object  # kept with no recompute


def gemm_forward_s(tok, h, f, gated, tp, kv_loc, gemm_Fps, hbm_Bps, t0, in_B, widths=None):
    """Forward time of the layer's four GEMMs (QKV, projection, fc1, fc2) on one TP rank; ``widths``:
    :func:`local_widths` where already known."""
    head, fc2 = _gemm_forward_parts_s(tok, h, f, gated, tp, kv_loc, gemm_Fps, hbm_Bps, t0, in_B, widths)
    return head + fc2


def _gemm_forward_parts_s(tok, h, f, gated, tp, kv_loc, gemm_Fps, hbm_Bps, t0, in_B, widths=None):
    """(QKV + projection + fc1, fc2) forward times: fc2 apart, the GEMM a stopped-early recompute skips."""
    h_loc, f_loc, qkv_loc, fc1_loc = widths or local_widths(h, f, gated, tp, kv_loc)
    g_qkv = kern.gemm_time_s(tok, qkv_loc, h, gemm_Fps, hbm_Bps, t0, in_B)
    g_proj = kern.gemm_time_s(tok, h, h_loc, gemm_Fps, hbm_Bps, t0, in_B)
    g_fc1 = kern.gemm_time_s(tok, fc1_loc, h, gemm_Fps, hbm_Bps, t0, in_B)
    g_fc2 = kern.gemm_time_s(tok, h, f_loc, gemm_Fps, hbm_Bps, t0, in_B)
    return g_qkv + g_proj + g_fc1, g_fc2


def op_sac_rerun_matmuls(h, h_loc, f_loc, kv_loc, gated):
    """(n, k) of each matmul torchtitan's per-op SAC reruns: every second ``aten.mm`` of a block in call order
    wq, wk, wv, wo, w1, w3, w2 -- wk, wo and w3 (a GeLU MLP: wk, wo, w2)
    (``parallelize_llama._apply_ac_to_transformer_block``, torchtitan 2024-25). Global widths give the model's
    FLOPs, a TP rank's widths its times."""
    return ((kv_loc, h), (h, h_loc), (ops.where(gated > 0, f_loc, h), ops.where(gated > 0, h, f_loc)))


def op_sac_recompute_s(tok, h, h_loc, f_loc, kv_loc, gated, gemm_Fps, hbm_Bps, t0, in_B):
    """Forward time of the matmuls per-op SAC reruns (:func:`op_sac_rerun_matmuls`); the elementwise ops are
    added by the caller."""
    wk, wo, third = (kern.gemm_time_s(tok, n, k, gemm_Fps, hbm_Bps, t0, in_B)
                     for n, k in op_sac_rerun_matmuls(h, h_loc, f_loc, kv_loc, gated))
    return wk + wo + third


def local_widths(h, f, gated, tp, kv_loc):
    """Widths on one TP rank: (hidden, MLP, QKV output, fc1 output)."""
    h_loc = h / tp
    return h_loc, f / tp, h_loc + 2.0 * kv_loc, f * (1.0 + gated) / tp


def dense_layer(c, *, tok, s_loc, mb, tp, sp, rc, fp8, in_B, kv_loc, h_rep, gemm_Fps, gemm16_Fps, attn_Fps, hbm_Bps,
                t0) -> DenseLayer:
    """The dense layer's terms; the unfused attention kernel is evaluated only where a row uses it."""
    h, a, f, gated, s, attn_kind = c["hidden"], c["heads"], c["ffn_hidden"], c["gated_mlp"], c["seq_len"], c["attention"]
    std_attn = attn_kind == 1
    widths = h_loc, f_loc, qkv_loc, fc1_loc = local_widths(h, f, gated, tp, kv_loc)
    gemm_head, gemm_fc2 = _gemm_forward_parts_s(tok, h, f, gated, tp, kv_loc, gemm_Fps, hbm_Bps, t0, in_B, widths)
    gemm_f = gemm_head + gemm_fc2
    attn_flash = kern.flash_attention_time_s(mb, s_loc, s, h_loc, attn_Fps)
    any_std = ops.any(std_attn)
    if any_std:
        attn_std = kern.standard_attention_time_s(mb, s_loc, s, h_loc, a / tp, gemm16_Fps, hbm_Bps)
        attn_f = ops.where(std_attn > 0, attn_std, attn_flash)
        attn_b = ops.where(std_attn > 0, 2.0 * attn_std, kern.FLASH_BACKWARD_RELATIVE * attn_flash)
    else:  # the values the selections above give when no row runs unfused attention
        attn_f, attn_b = attn_flash, kern.FLASH_BACKWARD_RELATIVE * attn_flash
    elem16 = tok * kern.elementwise_bytes_per_token(h_rep, f_loc, gated) / hbm_Bps * kern.fusion_factor(c["fusion"])
    cast_f = fp8 * tok * kern.fp8_cast_bytes_per_token(h, h_loc, f_loc) / hbm_Bps
    cast_b = fp8 * tok * kern.fp8_grad_cast_bytes_per_token(h, qkv_loc, fc1_loc) / hbm_Bps
    elem_f = elem16 + cast_f
    layer_f = gemm_f + attn_f + elem_f
    layer_b = 2.0 * gemm_f + attn_b + 2.0 * elem16 + cast_b
    act_fn_f = tok * kern.BYTES_16BIT * (2.0 + gated) * f / tp / hbm_Bps
    selective_r = ops.where(std_attn > 0, attn_f, act_fn_f) if any_std else act_fn_f
    # full recompute reruns the forward; stopped early (PyTorch's non-reentrant checkpoint, JAX remat) it ends
    # once fc2's input exists: no backward needs fc2's output (measured, experiments/gpu/compare_step.py)
    full_r = layer_f - c["recompute_early_stop"] * gemm_fc2
    part_r = selective_r
    if ops.any(rc == mem.OP_SAC):  # torchtitan's per-op SAC: every elementwise op and every second matmul rerun
        part_r = ops.where(rc > 1, op_sac_recompute_s(tok, h, h_loc, f_loc, kv_loc, gated, gemm_Fps, hbm_Bps, t0,
                                                      in_B) + elem16, selective_r)
    layer_r = ops.where(rc >= 2, full_r, ops.where(rc >= 1, part_r, 0.0))
    act_layer, act_layer_none = mem.layer_activation_bytes(
        s_loc, s, mb, h, a, kv_loc, f, gated, tp, sp, rc, attn_kind, c["dropout"], fp8
    )
    return DenseLayer(gemm_f, layer_f, layer_b, layer_r, attn_f, attn_b, act_layer, act_layer_none)
