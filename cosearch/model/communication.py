"""Collective communication times with the alpha-beta model (Thakur et al. 2005; NCCL).

A ring all-reduce of M bytes over N ranks moves 2(N-1)/N * M bytes per rank; all-gather and
reduce-scatter move (N-1)/N * M. Latency is alpha per step, with 2*ceil(log2 N) steps (NCCL switches
to trees / NVLS at scale) or 2(N-1) steps for a ring, whichever is fewer.

Link selection follows Megatron's rank order (tp fastest, then cp, dp, pp): a group whose span of
consecutive ranks fits inside one NVLink domain uses NVLink; otherwise the ring crosses the network,
where ``g`` members of the group share each node and NCCL spreads the ring over their g NICs.

Oversubscription: a leaf switch with ``L`` GPUs below it has ``L / s`` GPU-links of uplink to the
spine (``s`` = oversubscription, 1 = full bisection). A group whose span crosses a leaf sends part of
its traffic up. A ring (or tree, or the inter-domain rings of a 2-D algorithm), ordered by rank,
leaves each leaf once per parallel ring: the g rings of the group's members in that leaf need
``min(g, l) * r`` of uplink, ``l`` = the group's members under the leaf, so the per-NIC rate is
``net * min(1, l / (min(g, l) * s))``; with one NVLink domain per leaf (the default) that is
``net / s``. An all-to-all (direct) exchange sends the share ``1 - l/N`` of every rank's bytes up:
``net * min(1, 1 / (s * (1 - l/N)))``.
"""
from __future__ import annotations

from . import _ops as ops


def group_bandwidth_Bps(size, stride, nvlink_domain, nvlink_Bps, network_Bps):
    """Bus bandwidth per rank (bytes/s) of a ring over ``size`` ranks spaced ``stride`` apart."""
    inside = size * stride <= nvlink_domain
    return ops.where(inside, nvlink_Bps, _across_Bps(size, stride, nvlink_domain, nvlink_Bps, network_Bps))


def _across_Bps(size, stride, nvlink_domain, nvlink_Bps, network_Bps):
    """Bus bandwidth of a ring that crosses the network: g = members per node share its g NICs."""
    members_per_node = ops.clip(nvlink_domain / stride, 1.0, size)
    return ops.minimum(nvlink_Bps, members_per_node * network_Bps)


def group_latency_s(size, stride, nvlink_domain, nvlink_latency_s, network_latency_s):
    return ops.where(size * stride <= nvlink_domain, nvlink_latency_s, network_latency_s)


def group_link(size, stride, nvlink_domain, nvlink_Bps, network_Bps, nvlink_latency_s, network_latency_s):
    """(:func:`group_bandwidth_Bps`, :func:`group_latency_s`) with the span test done once (same values)."""
    inside = size * stride <= nvlink_domain
    across = _across_Bps(size, stride, nvlink_domain, nvlink_Bps, network_Bps)
    return ops.where(inside, nvlink_Bps, across), ops.where(inside, nvlink_latency_s, network_latency_s)


def collective_steps(size):
    """Latency steps of an all-reduce: min(ring 2(N-1), tree 2*ceil(log2 N)); 0 for one rank."""
    n = ops.maximum(size, 1.0)
    return ops.minimum(2.0 * (n - 1.0), 2.0 * ops.ceil(ops.log2(n)))


def all_reduce_s(message_bytes, size, bw_Bps, latency_s):
    """Ring all-reduce of ``message_bytes`` (the full buffer on each rank)."""
    frac = 2.0 * (size - 1.0) / ops.maximum(size, 1.0)
    return frac * message_bytes / bw_Bps + collective_steps(size) * latency_s


def all_gather_s(message_bytes, size, bw_Bps, latency_s):
    """All-gather (or reduce-scatter) whose full, gathered buffer is ``message_bytes``. NCCL runs these
    as rings only (its trees serve all-reduce), so the latency is N-1 steps (NCCL tuning.cc); a ring
    that crosses domains pays the network latency on n-1 of them (:func:`.collectives.legacy_time_s`)."""
    frac = (size - 1.0) / ops.maximum(size, 1.0)
    return frac * message_bytes / bw_Bps + ops.maximum(size - 1.0, 0.0) * latency_s


reduce_scatter_s = all_gather_s


def p2p_s(message_bytes, bw_Bps, latency_s):
    """Point-to-point send of ``message_bytes`` (pipeline stage boundary)."""
    return message_bytes / bw_Bps + latency_s


def spine_share(size, stride, nvlink_domain, leaf_gpus, oversubscription, all_to_all=False):
    """Fraction of a NIC's rate a group keeps when its traffic crosses an oversubscribed spine.

    ``leaf_gpus`` NaN means one NVLink domain per leaf (every byte between domains crosses the spine).
    Returns exactly 1.0 for a full-bisection fabric (``oversubscription == 1``).
    """
    if ops.all(oversubscription == 1.0) and ops.all(ops.isnan(leaf_gpus)):
        # what the expressions below give there, NaN inputs included (the share is then x/x >= 1 or
        # NaN, and NaN only where ``crosses`` is False), without evaluating them
        return 1.0
    leaf = ops.where(ops.isnan(leaf_gpus), nvlink_domain, leaf_gpus)
    n_ranks = ops.maximum(size, 1.0)
    crosses = n_ranks * stride > leaf
    in_leaf = ops.clip(leaf / stride, 1.0, n_ranks)          # the group's members under one leaf
    if all_to_all:
        outside = ops.maximum(1.0 - in_leaf / n_ranks, 1e-300)
        share = ops.minimum(1.0, 1.0 / (oversubscription * outside))
    else:
        per_domain = ops.clip(nvlink_domain / stride, 1.0, n_ranks)
        share = ops.minimum(1.0, in_leaf / (ops.minimum(per_domain, in_leaf) * oversubscription))
    return ops.where(crosses, share, 1.0)
