"""Pipeline schedule: micro-batch count and bubble (Narayanan et al. SC'21, sec. 2.2).

With m micro-batches per pipeline, p stages and v virtual stages per rank (interleaving), a step
takes (m + (p-1)/v) micro-batch slots, so the bubble is (p-1)/(v*m) of the ideal time. Zero-bubble and DualPipe schedules:
:mod:`cosearch.model.schedules`.
"""
from __future__ import annotations


def num_microbatches(global_batch, dp, microbatch):
    """Micro-batches each data-parallel replica runs per optimizer step."""
    return global_batch / (dp * microbatch)


def bubble_slots(pp, interleave):
    """Idle micro-batch slots per step under 1F1B (interleave = 1) or interleaved 1F1B."""
    return (pp - 1.0) / interleave
