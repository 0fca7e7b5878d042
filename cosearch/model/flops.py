"""Parameter counts and floating-point operations of a decoder-only transformer.

Matmul FLOPs are 2*m*n*k. Per token and layer, forward (Narayanan et al. SC'21, eq. 3, generalized
to grouped-query attention and gated MLPs):
  QKV 2*h*(h + 2*kv_dim), output projection 2*h^2, MLP 2*h*f*(3 if gated else 2),
  attention scores and values 4*s*h (2*s*h each; the causal mask lets flash attention skip half).
The logits add 2*h*V per token. Backward is twice the forward; full recomputation adds one forward.
Multi-token prediction (DeepSeek-V3, arXiv 2412.19437 sec. 2.2): each MTP module adds one transformer
layer, a projection of the concatenated [h; h] to h (2*2h*h) and one more pass through the shared
output head (2*h*V) per token.
"""
from __future__ import annotations

import numpy as np


def kv_dim(hidden, heads, kv_heads):
    """Width of the key (or value) projection: kv_heads * head_dim."""
    return kv_heads * (hidden / heads)


def layer_params(hidden, heads, kv_heads, ffn_hidden, gated_mlp):
    """Weights of one transformer layer (attention + MLP; norms and biases are <0.1 % and omitted)."""
    attn = hidden * (hidden + 2 * kv_dim(hidden, heads, kv_heads)) + hidden * hidden
    mlp = hidden * ffn_hidden * (2 + gated_mlp)
    return attn + mlp


def embedding_params(hidden, vocab, tied_embeddings):
    """Input embedding plus output projection (shared when tied)."""
    return vocab * hidden * (2 - tied_embeddings)


def total_params(layers, hidden, heads, kv_heads, ffn_hidden, gated_mlp, vocab, tied_embeddings):
    return layers * layer_params(hidden, heads, kv_heads, ffn_hidden, gated_mlp) + embedding_params(
        hidden, vocab, tied_embeddings
    )


def layer_matmul_flops_per_token(hidden, heads, kv_heads, ffn_hidden, gated_mlp):
    """Forward FLOPs of one layer's weight matmuls per token (= 2 * layer_params)."""
    return 2.0 * layer_params(hidden, heads, kv_heads, ffn_hidden, gated_mlp)


def attention_flops_per_token(hidden, seq_len):
    """Forward FLOPs of Q.K^T and A.V per token per layer, counted without causal savings (4*s*h),
    the convention of Megatron-LM and PaLM MFU."""
    return 4.0 * seq_len * hidden


def mtp_head_flops_per_token(hidden, vocab):
    """Forward FLOPs of one multi-token-prediction module besides its transformer layer: the
    [h; h] -> h projection and the shared output head."""
    return 4.0 * hidden * hidden + 2.0 * hidden * vocab


def model_flops_per_token(layers, hidden, heads, kv_heads, ffn_hidden, gated_mlp, vocab, seq_len,
                          mtp_layers=0.0, attention_span=1.0):
    """Training FLOPs per token (forward + backward = 3x forward), no recomputation: the numerator
    of model FLOPs utilization (MFU). ``mtp_layers``: multi-token-prediction modules (each one layer
    more, :func:`mtp_head_flops_per_token`); ``attention_span``: the attention term's share left by
    sliding windows (:func:`cosearch.model.window.counted_span_fraction`)."""
    fwd = (layers + mtp_layers) * layer_matmul_flops_per_token(hidden, heads, kv_heads, ffn_hidden, gated_mlp) + (
        layers * attention_span + mtp_layers) * attention_flops_per_token(hidden, seq_len) + 2.0 * hidden * vocab
    return 3.0 * (fwd + mtp_layers * mtp_head_flops_per_token(hidden, vocab))


def megatron_flops_per_iteration(batch, seq_len, layers, hidden, vocab):
    """Narayanan et al. SC'21 eq. 3: 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)); counts full recompute."""
    return 96.0 * batch * seq_len * layers * hidden**2 * (1 + seq_len / (6 * hidden) + vocab / (16 * layers * hidden))


__all__ = [
    "kv_dim", "layer_params", "embedding_params", "total_params", "layer_matmul_flops_per_token",
    "attention_flops_per_token", "mtp_head_flops_per_token", "model_flops_per_token", "megatron_flops_per_iteration",
]
_ = np  # numpy semantics: every function works elementwise on arrays
