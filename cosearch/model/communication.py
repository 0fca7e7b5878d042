"""Collective communication times with the alpha-beta model (Thakur et al. 2005; NCCL).

A ring all-reduce of M bytes over N ranks moves 2(N-1)/N * M bytes per rank; all-gather and
reduce-scatter move (N-1)/N * M. Latency is alpha per step, with 2*ceil(log2 N) steps (NCCL switches
to trees / NVLS at scale) or 2(N-1) steps for a ring, whichever is fewer.

Link selection follows Megatron's rank order (tp fastest, then cp, dp, pp): a group whose span of
consecutive ranks fits inside one NVLink domain uses NVLink; otherwise the ring crosses the network,
where ``g`` members of the group share each node and NCCL spreads the ring over their g NICs.
"""
from __future__ import annotations

import numpy as np


def group_bandwidth_Bps(size, stride, nvlink_domain, nvlink_Bps, network_Bps):
    """Bus bandwidth per rank (bytes/s) of a ring over ``size`` ranks spaced ``stride`` apart."""
    span = size * stride
    inside = span <= nvlink_domain
    members_per_node = np.clip(nvlink_domain / stride, 1.0, size)
    across = np.minimum(nvlink_Bps, members_per_node * network_Bps)
    return np.where(inside, nvlink_Bps, across)


def group_latency_s(size, stride, nvlink_domain, nvlink_latency_s, network_latency_s):
    return np.where(size * stride <= nvlink_domain, nvlink_latency_s, network_latency_s)


def collective_steps(size):
    """Latency steps of an all-reduce: min(ring 2(N-1), tree 2*ceil(log2 N)); 0 for one rank."""
    n = np.maximum(size, 1.0)
    return np.minimum(2.0 * (n - 1.0), 2.0 * np.ceil(np.log2(n)))


def all_reduce_s(message_bytes, size, bw_Bps, latency_s):
    """Ring all-reduce of ``message_bytes`` (the full buffer on each rank)."""
    frac = 2.0 * (size - 1.0) / np.maximum(size, 1.0)
    return frac * message_bytes / bw_Bps + collective_steps(size) * latency_s


def all_gather_s(message_bytes, size, bw_Bps, latency_s):
    """All-gather (or reduce-scatter) whose full, gathered buffer is ``message_bytes``."""
    frac = (size - 1.0) / np.maximum(size, 1.0)
    return frac * message_bytes / bw_Bps + 0.5 * collective_steps(size) * latency_s


reduce_scatter_s = all_gather_s


def p2p_s(message_bytes, bw_Bps, latency_s):
    """Point-to-point send of ``message_bytes`` (pipeline stage boundary)."""
    return message_bytes / bw_Bps + latency_s
