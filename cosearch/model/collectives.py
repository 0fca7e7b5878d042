"""Collective algorithms with the alpha-beta (latency-bandwidth) model, one formula per algorithm.

A collective over ``N`` ranks spaced ``stride`` ranks apart (Megatron rank order) has ``g`` members
in each NVLink domain and spans ``n = N / g`` domains; inside one domain ``g = N`` and ``n = 1``.
``M`` is the full buffer (the reduced vector of an all-reduce, the gathered vector of an
all-gather); ``calls`` splits it into that many separate collectives (one latency each).
Rates are achieved bus bandwidths in bytes/s: ``nvl`` per GPU over NVLink, ``nic`` per GPU NIC after
the spine share (:func:`cosearch.model.communication.spine_share`), ``flat = min(nvl, g * nic)``
for a single-level ring that NCCL spreads over the g NICs of a domain.

All-reduce (AR) and all-gather / reduce-scatter (AG) times, per algorithm:

ring (Thakur et al. 2005 sec. 4; NCCL tuning.cc latency: 2(N-1) steps, 2(n-1) of them inter-node)
  AR  2(N-1)/N * M/flat + 2[(N-n) a_nvl + (n-1) a_net]
  AG   (N-1)/N * M/flat +  [(N-n) a_nvl + (n-1) a_net]
tree (NCCL double binary tree across domains, chain inside: Sanders et al. 2009; NCCL 2.4 notes;
      tuning.cc: tree bus bandwidth 0.9 x ring's, algorithm bandwidth half the bus bandwidth)
  AR  2 M / (0.9 flat) + 2[(g-1) a_nvl + ceil(log2 n) a_net]
  AG  recursive doubling (Thakur et al. 2005 sec. 4.1): (N-1)/N * M/flat + ceil(log2 g) a_nvl + ceil(log2 n) a_net
hierarchical 2-D (reduce-scatter in the domain, g parallel rings across domains on M/g, all-gather
      in the domain; Jia et al. 2018, Mikami et al. 2018 "2D-torus"). The in-domain phases are direct
      exchanges over the NVSwitch crossbar (one latency each, as NCCL's NVLS algorithms), so
  AR  2(g-1)/g * M/nvl + 2(n-1)/n * (M/g)/nic + 2[a_nvl + (n-1) a_net]      (no a_nvl when g = 1)
  AG   (g-1)/g * M/nvl +  (n-1)/n * (M/g)/nic +  [a_nvl + (n-1) a_net]
direct (two-shot: reduce-scatter then all-gather, every rank exchanging with all peers at once;
      one-shot NVSwitch kernels as in TensorRT-LLM inside a domain). A rank's bytes to peers outside
      its domain leave through its own NIC (no aggregation) at DIRECT_NETWORK_EFFICIENCY of the ring's
      rate (many-to-many flows collide in a fabric that routes by flow hash), its bytes to domain
      peers use NVLink; every network peer costs a work-request post of DIRECT_PEER_POST_S.
  AR  2 max((N-g)/N * M/nic_a2a, (g-1)/N * M/nvl) + 2[a + (N-g) post]
  AG    max((N-g)/N * M/nic_a2a, (g-1)/N * M/nvl) +  [a + (N-g) post]      a = a_nvl inside, a_net across
auto: the fastest of the four for each configuration.
nccl (code 0, the default): the model's original envelope, ring bandwidth with
      min(ring, tree) latency steps for an all-reduce (:mod:`cosearch.model.communication`) and the
      ring's (N-n) a_nvl + (n-1) a_net for an all-gather / reduce-scatter.
"""
from __future__ import annotations

import numpy as np

from . import _ops as ops
from . import communication as comm

#: Scenario words of the collective algorithm knobs (``plan.tp_collective``, ``plan.dp_collective``).
COLLECTIVE_CODES = {"nccl": 0, "ring": 1, "tree": 2, "hierarchical": 3, "direct": 4, "auto": 5}
ALGORITHMS = ("ring", "tree", "direct", "hierarchical")  # ties (inside one domain) read "direct"
#: NCCL models the tree's bus bandwidth as 0.9 x the ring's (src/graph/tuning.cc, ncclTopoTuneModel).
TREE_BANDWIDTH_FACTOR = 0.9
#: Cost of posting one RDMA work request per network peer in a direct exchange, seconds. ASSUMPTION
#: (order of one doorbell + completion in the NCCL proxy thread), not calibrated.
DIRECT_PEER_POST_S = 1e-6
#: Share of the NIC rate an all-to-all pattern sustains across the network relative to a ring's
#: fixed neighbour pattern. ASSUMPTION: flows of a many-to-many exchange collide on static ECMP
#: hash paths (the "elephant flow" problem of Al-Fares et al., Hedera, NSDI 2010); adaptive routing
#: recovers part of it. Not calibrated; inside an NVLink domain (a crossbar) direct runs at full rate.
DIRECT_NETWORK_EFFICIENCY = 0.7


class Fabric:
    """The links a collective can use: achieved rates (bytes/s), latencies (s) and topology."""

    __slots__ = ("nvl_Bps", "net_Bps", "nvl_lat_s", "net_lat_s", "domain", "oversubscription", "leaf_gpus")

    def __init__(self, nvl_Bps, net_Bps, nvl_lat_s, net_lat_s, domain, oversubscription=1.0, leaf_gpus=np.nan):
        self.nvl_Bps, self.net_Bps = nvl_Bps, net_Bps
        self.nvl_lat_s, self.net_lat_s = nvl_lat_s, net_lat_s
        self.domain, self.oversubscription, self.leaf_gpus = domain, oversubscription, leaf_gpus

    # the legacy (single-level, NCCL-envelope) link model, with the spine share applied
    def ring_nic_Bps(self, size, stride):
        return self.net_Bps * comm.spine_share(size, stride, self.domain, self.leaf_gpus, self.oversubscription)

    def bandwidth_Bps(self, size, stride):
        return comm.group_bandwidth_Bps(size, stride, self.domain, self.nvl_Bps, self.ring_nic_Bps(size, stride))

    def latency_s(self, size, stride):
        return comm.group_latency_s(size, stride, self.domain, self.nvl_lat_s, self.net_lat_s)

    def link(self, size, stride):
        """(bandwidth_Bps, latency_s) of the group, in one pass."""
        return comm.group_link(size, stride, self.domain, self.nvl_Bps, self.ring_nic_Bps(size, stride),
                               self.nvl_lat_s, self.net_lat_s)


def group_shape(size, stride, domain):
    """(inside one domain, members per domain g, domains spanned n) of ``size`` ranks ``stride`` apart in
    NVLink domains of ``domain`` GPUs (the ``g`` and ``n`` of this module's docstring)."""
    n_ranks = ops.maximum(size, 1.0)
    inside = n_ranks * stride <= domain
    g = ops.where(inside, n_ranks, ops.clip(domain / stride, 1.0, n_ranks))
    return inside, g, n_ranks / g


def _log2_steps(x):
    return ops.ceil(ops.log2(ops.maximum(x, 1.0)))


def algorithm_times_s(op, message_bytes, size, stride, fabric: Fabric, calls=1.0):
    """Time of each algorithm in :data:`ALGORITHMS` (a dict), for ``op`` 'all_reduce', 'all_gather' or
    'reduce_scatter' (the all-gather's steps and bytes in reverse: the same time, Thakur et al. 2005)."""
    if op == "reduce_scatter":
        op = "all_gather"
    if op not in ("all_reduce", "all_gather"):
        raise ValueError(f"unknown collective {op!r}")
    twice = 2.0 if op == "all_reduce" else 1.0
    M, N = message_bytes, ops.maximum(size, 1.0)
    inside, g, n = group_shape(size, stride, fabric.domain)
    nvl, a_nvl, a_net = fabric.nvl_Bps, fabric.nvl_lat_s, fabric.net_lat_s
    nic = fabric.ring_nic_Bps(size, stride)
    nic_a2a = DIRECT_NETWORK_EFFICIENCY * fabric.net_Bps * comm.spine_share(size, stride, fabric.domain, fabric.leaf_gpus,
                                                 fabric.oversubscription, all_to_all=True)
    flat = ops.where(inside, nvl, ops.minimum(nvl, g * nic))
    frac = (N - 1.0) / N
    out = {}
    out["ring"] = twice * frac * M / flat + calls * twice * ((N - n) * a_nvl + (n - 1.0) * a_net)
    if op == "all_reduce":
        out["tree"] = 2.0 * M / (TREE_BANDWIDTH_FACTOR * flat) + calls * 2.0 * ((g - 1.0) * a_nvl + _log2_steps(n) * a_net)
    else:
        out["tree"] = frac * M / flat + calls * (_log2_steps(g) * a_nvl + _log2_steps(n) * a_net)
    out["hierarchical"] = twice * (
        (g - 1.0) / g * M / nvl + (n - 1.0) / n * (M / g) / nic
    ) + calls * twice * (ops.where(g > 1.0, a_nvl, 0.0) + (n - 1.0) * a_net)
    peers_out = N - g
    direct_bw = ops.maximum(peers_out / N * M / nic_a2a, (g - 1.0) / N * M / nvl)
    direct_lat = ops.where(inside, a_nvl, a_net + peers_out * DIRECT_PEER_POST_S)
    out["direct"] = twice * (direct_bw + calls * direct_lat)
    single = size <= 1.0
    return {k: ops.where(single, 0.0, v) for k, v in out.items()}


def legacy_time_s(op, message_bytes, size, stride, fabric: Fabric, calls=1.0):
    """The original model (code ``nccl``): ring bandwidth; an all-reduce takes min(ring, tree) latency
    steps, an all-gather / reduce-scatter (ring only in NCCL) N-1 steps of which only the n-1 between
    domains pay the network latency, the N-n others NVLink's (NCCL tuning.cc, ``nInterSteps``)."""
    bw, lat = fabric.link(size, stride)
    if op == "all_reduce":
        return comm.all_reduce_s(message_bytes, size, bw, lat * calls)
    n = group_shape(size, stride, fabric.domain)[2]
    steps_s = ops.maximum((size - n) * fabric.nvl_lat_s + (n - 1.0) * fabric.net_lat_s, 0.0)
    return comm.all_gather_s(message_bytes, size, bw, 0.0) + calls * steps_s


def collective_s(op, algorithm, message_bytes, size, stride, fabric: Fabric, calls=1.0, legacy=None):
    """Time of ``op`` under the algorithm code ``algorithm`` (see :data:`COLLECTIVE_CODES`).

    Only the legacy formula is evaluated when every configuration uses code 0, so the default
    path costs what it always did; ``legacy``: :func:`legacy_time_s` of the same call where known.
    """
    if legacy is None:
        legacy = legacy_time_s(op, message_bytes, size, stride, fabric, calls)
    algorithm = ops.asarray(algorithm)
    if not ops.any(algorithm != 0):
        return legacy
    times = algorithm_times_s(op, message_bytes, size, stride, fabric, calls)
    best = ops.minimum(ops.minimum(times["ring"], times["tree"]), ops.minimum(times["hierarchical"], times["direct"]))
    return ops.select(
        [algorithm == 1, algorithm == 2, algorithm == 3, algorithm == 4, algorithm == 5],
        [times["ring"], times["tree"], times["hierarchical"], times["direct"], best],
        default=legacy,
    )


def fastest_algorithm(op, message_bytes, size, stride, fabric: Fabric, calls=1.0):
    """Name of the fastest algorithm per configuration (an object array), for reports."""
    times = algorithm_times_s(op, message_bytes, size, stride, fabric, calls)
    stack = np.stack(np.broadcast_arrays(*(times[a] for a in ALGORITHMS)))
    return np.asarray(ALGORITHMS, dtype=object)[np.argmin(stack, axis=0)]
