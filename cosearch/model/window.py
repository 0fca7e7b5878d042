"""Sliding-window attention: how much of the attention work a windowed model does.

A windowed layer lets each query attend to itself and the ``window - 1`` tokens before it (Beltagy et
al. 2020, Longformer; Mistral 7B, Jiang et al. 2023; GPT-OSS, OpenAI 2025: window 128 in every other
layer; Gemma 3: five windowed layers to one global). Megatron-Core's ``window_size = (window - 1, 0)``
with ``window_attn_skip_freq = N`` keeps full attention in layers N, 2N, ... (1-based), so a model of
L layers has floor(L / N) global layers; ``global_attention_every`` is that N (0: every layer windowed).

Two fractions, both 1 for a model without a window:

* time: the causal work of a windowed layer over that of a full causal layer, counted in the kernel's
  128 x 128 tiles: a flash kernel skips the key blocks outside the band as it skips those above the
  diagonal (FlashAttention-2's ``window_size``), but computes every block the band touches
  (:func:`causal_work_fraction`). Unfused attention computes every score and saves nothing. Each query
  block also pays the kernel's fixed cost (:data:`cosearch.model.compute.ATTENTION_FIXED_KEYS`), which a
  narrow window's few key blocks amortise poorly: :func:`attention_time_factor` charges both, for every
  fused-attention row, windowed or not.
* count (model FLOPs): the convention of :mod:`.flops` counts 4*s*h per token for a full layer, each
  query against all s keys; a windowed layer counts min(s, w) keys (Megatron-Bridge's FLOP counter
  uses ``min(window, seq_len)`` for its windowed layers the same way).

Approximation (stated): context-parallel ring traffic is charged as for full attention.
"""
from __future__ import annotations

from . import _ops as ops
from . import compute as kern

#: Input columns (name -> default): no window.
WINDOW_INPUT_COLUMNS: dict[str, float] = {
    "sliding_window": 0.0,          # keys a query attends to in a windowed layer (itself included); 0 = none
    "global_attention_every": 0.0,  # every N-th layer keeps full attention; 0 = every layer windowed
}


def active(c) -> bool:
    """True when some row has a sliding window."""
    return ops.any(c["sliding_window"] > 0)


def windowed_layer_share(layers, window, every):
    """Share of the layers that are windowed (floor(L/N) of L keep full attention; none without a window)."""
    global_layers = ops.where(every >= 1, ops.floor(layers / ops.maximum(every, 1.0)), 0.0)
    return ops.where(window > 0, (layers - global_layers) / layers, 0.0)


def global_every(layers: int, full_layers: int) -> int | None:
    """``global_attention_every`` of a model whose ``full_layers`` of ``layers`` keep full attention, at
    whatever positions: every round(L / full)-th, the same share of windowed layers (the model keeps no
    per-layer list); None when no layer is full (every layer windowed)."""
    return max(1, round(layers / full_layers)) if full_layers else None


#: Rows of one attention tile (compute.py): a windowed query block still computes every key block the band touches.
ATTENTION_BLOCK = kern.ATTENTION_BLOCK


def causal_work_fraction(seq_len, window, block=ATTENTION_BLOCK):
    """A windowed causal layer's work over a full causal layer's, counted in ``block`` x ``block`` tiles.

    With n = ceil(s / B) query blocks, query block i needs the keys back to i*B - w + 1, i.e.
    m = 1 + ceil((w - 1) / B) key blocks (at most i + 1): sum_i min(i + 1, m) over sum_i (i + 1).
    ``block`` 1 gives the exact pair count, sum_i min(i, w) over sum_i i. On one H100
    (experiments/results/gpu/moe_attention_h100.csv, FlexAttention, forward + backward over the same
    kernel without a window) window 4096 of 8192 took 0.75 (this: 0.76, exact pairs 0.75), 1024 of 4096
    0.58-0.59 (0.48; exact 0.44), 128 of 4096 0.25-0.40 (0.12; exact 0.06: the rest is fixed cost).
    """
    n = ops.ceil(seq_len / block)
    w = ops.where(window > 0, window, seq_len)
    m = ops.minimum(1.0 + ops.ceil((w - 1.0) / block), n)
    return (m * (m + 1.0) / 2.0 + (n - m) * m) / (n * (n + 1.0) / 2.0)


def attention_time_factor(c, s_loc, fixed_keys=kern.ATTENTION_FIXED_KEYS):
    """Fused attention's time over its FLOPs at the reference rate, per row: each kernel's fixed cost per query
    block at the keys a query visits (:func:`cosearch.model.compute.attention_span_factor`), in a causal pass over
    the rank's ``s_loc`` tokens (under context parallelism the slowest rank's ring steps average s_loc / 2 keys per
    query, as one causal pass over s_loc), and in a windowed layer the tile share of that work
    (:func:`causal_work_fraction`) at that share of the keys."""
    keys = kern.causal_keys_per_query(s_loc)
    full = kern.attention_span_factor(keys, fixed_keys)
    if not active(c):
        return full
    s, w = c["seq_len"], c["sliding_window"]
    share = windowed_layer_share(c["layers"], w, c["global_attention_every"])
    work = causal_work_fraction(s, w)
    return ops.where(share > 0, share * work * kern.attention_span_factor(work * keys, fixed_keys) + (1.0 - share) * full, full)


def counted_span_fraction(c):
    """The model-FLOPs count's attention term over the same count without windows (min(s, w) keys)."""
    s, w = c["seq_len"], c["sliding_window"]
    share = windowed_layer_share(c["layers"], w, c["global_attention_every"])
    span = ops.minimum(ops.where(w > 0, w, s), s) / s
    return ops.where(share > 0, 1.0 - share * (1.0 - span), 1.0)  # rows without windowed layers keep exactly 1
