"""Statistical efficiency of the global batch: steps and tokens to reach a target loss.

McCandlish et al. 2018 ("An Empirical Model of Large-Batch Training", eqs. 2.11-2.12 and 2.7): with
batch B and gradient noise scale B_noise (about the critical batch B_crit), reaching a given loss takes

  steps  S = S_min * (1 + B_noise / B)
  data   E = E_min * (1 + B / B_noise)          with E_min = S_min * B_noise, so E = S * B.

S_min is the fewest steps (infinite batch), E_min the fewest tokens (tiny batch). Batches well below
B_noise are data-efficient but need many serial steps; batches well above it waste tokens. Here every
quantity is in tokens: ``target_tokens`` = E_min, ``critical_batch_tokens`` = B_noise, B = global
batch x sequence length. A NaN critical batch means B_noise -> infinity (perfect scaling: S = E_min/B).
"""
from __future__ import annotations

from . import _ops as ops


def steps_to_target(target_tokens, critical_batch_tokens, batch_tokens):
    """S = S_min (1 + B_noise/B) = E_min/B_noise + E_min/B."""
    noise = ops.where(ops.isnan(critical_batch_tokens), 0.0, target_tokens / critical_batch_tokens)
    return noise + target_tokens / batch_tokens


def tokens_to_target(target_tokens, critical_batch_tokens, batch_tokens):
    """E = E_min (1 + B/B_noise)."""
    return target_tokens * (1.0 + ops.where(ops.isnan(critical_batch_tokens), 0.0, batch_tokens / critical_batch_tokens))


def statistical_efficiency(critical_batch_tokens, batch_tokens):
    """E_min / E = 1 / (1 + B/B_noise): the share of tokens that a tiny batch would also have needed."""
    return 1.0 / (1.0 + ops.where(ops.isnan(critical_batch_tokens), 0.0, batch_tokens / critical_batch_tokens))
