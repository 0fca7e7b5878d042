"""Parameters, resolved widths and training FLOPs per token of MoE / MLA models (issue 13).

Architecture (per layer, parameters; the training FLOPs of a weight are 6 per token):
* attention, GQA/MHA with head dim d: h*a*d (Q) + 2*h*kvh*d (K, V) + a*d*h (output).
* attention, MLA (DeepSeek-V2, Liu et al. 2024, arXiv 2405.04434 sec. 2.1, eqs. 9-19): down
  projections h*q_lora (Q; a direct h*a*d_qk projection when q_lora_rank is 0) and
  h*(kv_lora + d_rope) (compressed KV plus the shared RoPE key), up projections q_lora*a*d_qk and
  kv_lora*a*(d_nope + d_v), output a*d_v*h; d_qk = d_nope + d_rope. Training does not absorb the up
  projections. The down projections are replicated over TP ranks (Megatron-Core MLA), the rest split.
* MoE MLP (Fedus et al. 2022; DeepSeekMoE, Dai et al. 2024): router h*E, E routed experts of
  (2 + gated)*h*f_e each, of which top_k act per token, and shared experts (2 + gated)*h*f_s each;
  the first ``dense_layers`` layers keep a dense MLP of width ``dense_ffn_hidden`` (DeepSeek-V3:
  ``first_k_dense_replace = 3``).
Active parameters count top_k of the E routed experts (the convention of MoE papers: DeepSeek-V3
"671B total, 37B activated"); model FLOPs for MFU use the active parameters.
"""
from __future__ import annotations

from . import _ops as ops
from . import window as win
from .flops import mtp_head_flops_per_token


def widths(c):
    """Resolved widths: (f_expert, f_dense, f_shared_total, head_dim, d_qk, d_v)."""
    f = c["ffn_hidden"]
    fe = ops.where(ops.isnan(c["expert_ffn_hidden"]), f, c["expert_ffn_hidden"])
    fd = ops.where(ops.isnan(c["dense_ffn_hidden"]), f, c["dense_ffn_hidden"])
    fs = c["shared_experts"] * ops.where(ops.isnan(c["shared_ffn_hidden"]), fe, c["shared_ffn_hidden"])
    d = head_dim(c)
    return (fe, fd, fs, d) + head_widths(c, d)


def head_dim(c):
    """Attention head width: the stated ``head_dim``, else hidden / heads."""
    return ops.where(ops.isnan(c["head_dim"]), c["hidden"] / c["heads"], c["head_dim"])


def head_widths(c, d=None):
    """(query/key, value) head widths of the fused attention kernel: MLA's d_nope + d_rope and d_v, else the
    head width (``d``: :func:`head_dim` where already known)."""
    d = head_dim(c) if d is None else d
    if not ops.any(c["mla"] > 0):
        return d, d
    mla = c["mla"] > 0
    return ops.where(mla, c["qk_nope_head_dim"] + c["qk_rope_head_dim"], d), ops.where(mla, c["v_head_dim"], d)


def attention_params(c, tp=1.0, w=None):
    """(parameters of one attention block, of them on one TP rank); ``w``: :func:`widths` if known."""
    w = w or widths(c)
    return attention_params_total(c, w), attention_params_local(c, tp, w)


def mla_params(c, d_qk, d_v):
    """(replicated, TP-split) parameters of one MLA block."""
    h, a = c["hidden"], c["heads"]
    ql, kvl, rope, nope = c["q_lora_rank"], c["kv_lora_rank"], c["qk_rope_head_dim"], c["qk_nope_head_dim"]
    q_rep = ops.where(ql > 0, h * ql, 0.0)
    q_split = ops.where(ql > 0, ql, h) * a * d_qk
    return q_rep + h * (kvl + rope), q_split + kvl * a * (nope + d_v) + a * d_v * h


def attention_params_total(c, w, mla_parts=None):
    """Parameters of one attention block (GQA/MHA or MLA); ``w``: :func:`widths`, ``mla_parts``:
    :func:`mla_params` where already known."""
    h, a, kvh = c["hidden"], c["heads"], c["kv_heads"]
    _, _, _, d, d_qk, d_v = w
    gqa = 2.0 * h * a * d + 2.0 * h * kvh * d
    rep, split = mla_parts or mla_params(c, d_qk, d_v)
    return ops.where(c["mla"] > 0, rep + split, gqa)


def attention_params_local(c, tp, w, kv_loc=None, mla_parts=None):
    """Parameters of one attention block on one TP rank; ``kv_loc`` (the K width per rank) and
    ``mla_parts`` (:func:`mla_params`) where already known."""
    h, a = c["hidden"], c["heads"]
    _, _, _, d, d_qk, d_v = w
    if kv_loc is None:
        kv_loc = d * ops.maximum(c["kv_heads"] / tp, 1.0)
    gqa_loc = 2.0 * h * a * d / tp + 2.0 * h * kv_loc
    rep, split = mla_parts or mla_params(c, d_qk, d_v)
    return ops.where(c["mla"] > 0, rep + split / tp, gqa_loc)


def layer_parts(c, w, mla_parts=None):
    """(dense layers, one dense layer, a MoE layer's non-expert part, its routed experts, embeddings)."""
    h, L, E, g = c["hidden"], c["layers"], c["experts"], c["gated_mlp"]
    fe, fd, fs, *_ = w
    attn = attention_params_total(c, w, mla_parts)
    n_dense = ops.where(E > 0, c["dense_layers"], L)
    mlp_w = (2.0 + g) * h
    return (n_dense, attn + mlp_w * fd, attn + h * E + mlp_w * fs, E * mlp_w * fe,
            c["vocab"] * h * (2.0 - c["tied_embeddings"]))


def param_counts(c, w=None, mla_parts=None, parts=None):
    """(total, active) parameters of the model (biases and norms omitted, as :mod:`.flops`; multi-token
    prediction modules not counted, as DeepSeek-V3's "671B"); ``w``, ``mla_parts`` and ``parts``:
    :func:`widths`, :func:`mla_params` and :func:`layer_parts` where already known."""
    L, E = c["layers"], c["experts"]
    w = w or widths(c)
    n_dense, dense_layer, moe_common, experts, emb = parts or layer_parts(c, w, mla_parts)
    total = n_dense * dense_layer + (L - n_dense) * (moe_common + experts) + emb
    active_ = n_dense * dense_layer + (L - n_dense) * (moe_common + ops.where(E > 0, c["top_k"] / E, 0.0) * experts) + emb
    return total, active_


def flops_per_token(c, counts=None, w=None, mla_parts=None, parts=None, span=None):
    """(active-parameter, total-parameter) training FLOPs per token: 3 x forward, forward = 2 x
    weights + attention scores and values 2*s*a*(d_qk + d_v) per layer (4*s*h for MHA, :mod:`.flops`),
    scaled by sliding windows (``span``: :func:`.window.counted_span_fraction`); each multi-token-prediction
    module adds one layer of the model's last kind and :func:`.flops.mtp_head_flops_per_token`.
    ``counts``, ``w``, ``parts``: :func:`param_counts`, :func:`widths`, :func:`layer_parts` where already known."""
    w = w or widths(c)
    total, act = counts or param_counts(c, w, mla_parts, parts)
    h, V = c["hidden"], c["vocab"]
    emb_in = V * h  # the input embedding is a lookup, not a matmul
    _, _, _, _, d_qk, d_v = w
    core_layer = 2.0 * c["seq_len"] * c["heads"] * (d_qk + d_v)
    if span is None:
        span = win.counted_span_fraction(c) if win.active(c) else 1.0
    core = c["layers"] * core_layer * span
    tied_out = ops.where(c["tied_embeddings"] > 0, emb_in, 0.0)  # tied: the shared matrix is the output layer
    fa, ft = 2.0 * (act - emb_in + tied_out) + core, 2.0 * (total - emb_in + tied_out) + core
    mtp = c["mtp_layers"]
    if ops.any(mtp > 0):  # one more layer (a MoE layer where the model has experts) and the MTP head each
        E = c["experts"]
        _, dense_layer, moe_common, experts, _ = parts or layer_parts(c, w, mla_parts)
        moe = E > 0
        layer_a = ops.where(moe, moe_common + c["top_k"] / ops.maximum(E, 1.0) * experts, dense_layer)
        layer_t = ops.where(moe, moe_common + experts, dense_layer)
        head = mtp_head_flops_per_token(h, V) + core_layer
        has = mtp > 0
        fa = ops.where(has, fa + mtp * (2.0 * layer_a + head), fa)
        ft = ops.where(has, ft + mtp * (2.0 * layer_t + head), ft)
    return 3.0 * fa, 3.0 * ft
