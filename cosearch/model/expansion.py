"""Memory expansion tier: host DRAM or CXL memory next to each GPU (or pooled per node).

COMET (Kadiyala et al. 2022, arXiv 2211.16648) studies clusters whose nodes add an expansion tier of
capacity ``expansion_gib`` and bandwidth ``expansion_gbps`` to the GPUs' HBM, and finds that
offloading model states to it lets a 1T-parameter model use faster parallel plans. What goes there
(``plan.offload``, a bit set with names) and what it costs follows the frameworks that do it:

optimizer (bit 1)  ZeRO-Offload (Ren et al., USENIX ATC 2021): fp32 master weights, Adam momentum
                   and variance (12 B per owned parameter) live in the tier and the Adam step runs
                   there (CPU-Adam next to the memory). Per step each GPU sends its gradient shard
                   down (2 B/param, overlapped with the last backward pass like the data-parallel
                   reduction) and receives the updated 16-bit weights (2 B/param, exposed). The
                   update reads and writes 28 B per owned parameter (the same traffic as on the GPU)
                   at the tier's bandwidth.
weights (bit 2)    ZeRO-Infinity (Rajbhandari et al., SC'21): the 16-bit weights and gradients live
                   in the tier too; each micro-batch fetches the stage's weights before its forward
                   and again before its backward, and reads and writes the accumulated gradients,
                   prefetched layer by layer behind compute; HBM keeps two layers as a buffer. The
                   optimizer step then writes the weights in place (no upload).
activations (bit 4) activation offloading (ZeRO-R "CPU checkpointing", Rajbhandari et al. 2020
                   sec. 6.1): each layer's stored activations (what the recompute mode keeps) go
                   to the tier during the forward pass and come back for the backward pass,
                   overlapped with compute; HBM keeps two layers' worth.

Transfers hidden behind a window of compute cost ``max(transfer - window, 0)``. The tier must hold
what is offloaded: per GPU, or with ``expansion_pooled`` the node's GPUs together against one pool of
``expansion_gib`` (a node's GPUs hold the same pipeline stage in Megatron's rank order, so the node's
demand is ``gpus_per_node`` times the GPU's).
"""
from __future__ import annotations

import numpy as np

from . import _ops as ops
from .memory import GIB

#: Scenario words of ``plan.offload`` and their bit sets.
OPTIMIZER, WEIGHTS, ACTIVATIONS = 1, 2, 4
OFFLOAD_CODES = {
    "none": 0, "optimizer": OPTIMIZER, "optimizer+weights": OPTIMIZER | WEIGHTS, "activations": ACTIVATIONS,
    "optimizer+activations": OPTIMIZER | ACTIVATIONS, "all": OPTIMIZER | WEIGHTS | ACTIVATIONS,
}
#: Layers of weights (and of activations) an offloading framework keeps in HBM as a prefetch buffer.
BUFFER_LAYERS = 2.0


def offloads(code, bit) -> np.ndarray:
    """True where the offload bit set ``code`` contains ``bit``."""
    return ops.floor(ops.asarray(code) / bit) % 2 >= 1


def expansion_Bps(expansion_gbps):
    """Tier bandwidth per GPU in bytes/s (GB/s in the scenario; reads and writes together)."""
    return ops.asarray(expansion_gbps) * 1e9


def transfer_s(nbytes, bandwidth_Bps):
    """Seconds to move ``nbytes`` over the tier link; 0 where nothing moves (even at 0 bandwidth)."""
    return ops.where(nbytes > 0, nbytes / ops.where(bandwidth_Bps > 0, bandwidth_Bps, np.nan), 0.0)


def exposed_s(transfer, window_s):
    """The part of a transfer that compute of ``window_s`` seconds cannot hide."""
    return ops.maximum(transfer - window_s, 0.0)


def tier_fits(used_bytes_per_gpu, expansion_gib, pooled, gpus_per_node):
    """True where the tier holds what is offloaded (per GPU, or per node when pooled)."""
    demand = used_bytes_per_gpu * ops.where(pooled > 0, gpus_per_node, 1.0)
    return demand <= expansion_gib * GIB
