"""Mixture-of-experts and MLA flags of a Megatron-LM command line in (issue 15; used by
:func:`cosearch.frameworks.megatron.parse_args`), the inverse of ``megatron._moe_flags``.

Argument names and defaults of **Megatron-LM core_r0.14.0** (``megatron/training/arguments.py``):

=====================================================  =========================================
Megatron-LM flag (default)                             cosearch field
=====================================================  =========================================
``--num-experts``                                      model.experts
``--moe-router-topk`` (2)                              model.top_k
``--moe-ffn-hidden-size`` (``--ffn-hidden-size``)      model.ffn_hidden (the routed expert's width,
                                                       as the MoE presets); ``--ffn-hidden-size``
                                                       becomes dense_ffn_hidden where layers are dense
``--moe-shared-expert-intermediate-size``              model.shared_experts (size / expert width when
                                                       a multiple, else 1 of shared_ffn_hidden = size)
``--moe-layer-freq`` (1)                               model.dense_layers: the layers marked 0 (an
                                                       integer k: MoE where i % k == 0; a list such as
                                                       ``([0]*3+[1]*58)``); interleaved dense layers are
                                                       modelled as leading ones, as the presets do
``--moe-router-num-groups`` / ``--moe-router-group-topk`` model.routed_nodes_limit = group top-k
                                                       (DeepSeek-V3 node-limited routing: 8 groups, 4)
``--moe-token-dispatcher-type`` (allgather)            plan.moe_dispatcher: ``alltoall``; ``flex`` with
                                                       ``--moe-enable-deepep``: deepep
``--moe-grouped-gemm`` (or none)                       plan.moe_grouped_gemm: per_expert (TE GroupedLinear,
                                                       the legacy grouped_gemm build and the sequential
                                                       MLP all launch one GEMM per local expert)
``--expert-model-parallel-size`` (1)                   plan.ep
``--expert-tensor-parallel-size`` (tp)                 plan.etp (left at its default when it equals tp)
``--moe-expert-capacity-factor`` (none: dropless)      plan.capacity_factor
``--moe-router-force-load-balancing``                  training.moe_load_imbalance 1.0 (routing forced uniform)
``--overlap-moe-expert-parallel-comm``                 plan.moe_a2a_overlap 1.0 (Megatron-Core's 1F1B
                                                       all-to-all overlap)
``--multi-latent-attention`` ``--q-lora-rank``         model.attention mla, q_lora_rank (none: 0),
``--kv-lora-rank`` ``--qk-head-dim``                   kv_lora_rank, qk_nope_head_dim,
``--qk-pos-emb-head-dim`` ``--v-head-dim``             qk_rope_head_dim, v_head_dim
``--kv-channels`` (hidden / heads)                     model.head_dim (where it differs from that;
                                                       ignored with MLA)
``--mtp-num-layers`` (none)                            model.mtp_layers
``--window-size`` "left,right" (none)                  model.sliding_window = left + right + 1 (right 0:
                                                       causal; a non-zero right is refused)
``--window-attn-skip-freq`` (none: every layer)        model.global_attention_every (an integer N; a 0/1
                                                       list: every round(L / full layers)-th)
=====================================================  =========================================

Refused with the reason: the ``allgather`` dispatcher (Megatron's default when no
``--moe-token-dispatcher-type`` is given; cosearch models the all-to-all), ``flex`` without DeepEP,
``--moe-enable-deepep`` with ``alltoall`` (DeepEP runs in the flex dispatcher only),
``--moe-pad-expert-input-to-capacity`` (padding to capacity is not modelled), a ``--moe-layer-freq``
that is neither an integer nor a 0/1 list of ``--num-layers`` entries. Other ``--moe-*`` / ``--expert-*``
flags are not read (:func:`unread_flags`; the parser logs them).
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from .._files import MAX_INT_DIGITS
from ..errors import CosearchError
from ..model.window import global_every

#: Switches (store_true) of Megatron-LM's MoE arguments, so that a token after one is not taken for its value.
SWITCHES = {"--moe-grouped-gemm", "--moe-enable-deepep", "--moe-permute-fusion", "--multi-latent-attention",
            "--moe-router-force-load-balancing", "--overlap-moe-expert-parallel-comm",
            "--moe-pad-expert-input-to-capacity", "--moe-use-legacy-grouped-gemm", "--moe-shared-expert-overlap",
            "--moe-router-fusion", "--moe-router-pre-softmax", "--moe-router-enable-expert-bias",
            "--moe-router-padding-for-fp8", "--moe-per-layer-logging", "--moe-apply-probs-on-input",
            "--moe-layer-recompute", "--delay-wgrad-compute"}
#: The ``--moe-*`` / ``--expert-*`` flags :func:`parse_moe` reads (or refuses); the grouped-GEMM switches are read
#: as one GEMM launch per local expert either way.
READ = {"--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size", "--moe-layer-freq",
        "--moe-router-num-groups", "--moe-router-group-topk", "--moe-token-dispatcher-type", "--moe-enable-deepep",
        "--moe-grouped-gemm", "--moe-use-legacy-grouped-gemm", "--expert-model-parallel-size",
        "--expert-tensor-parallel-size", "--moe-expert-capacity-factor", "--moe-router-force-load-balancing",
        "--moe-pad-expert-input-to-capacity"}
#: Megatron-LM's default ``--moe-router-topk``.
DEFAULT_TOPK = 2
_TERM = re.compile(r"^\[\s*([01](?:\s*,\s*[01])*)\s*\](?:\s*\*\s*(\d{1,%d}))?$" % MAX_INT_DIGITS)
_COUNT = re.compile(r"\d{1,%d}" % MAX_INT_DIGITS)

Int = Callable[..., Any]


def layer_pattern(value: Any, layers: int, flag: str = "--moe-layer-freq") -> list[int]:
    """Megatron's ``--moe-layer-freq`` (or ``flag``, of the same form): 1 for an MoE layer, 0 for a
    dense one, per layer. ``layers`` is within the model's bound (``hf_moe.check_layers``), and a
    list's length is counted before it is built, so ``[1]*9999999999`` is refused, not allocated."""
    text = str(value).strip().strip("'\"").strip()
    if _COUNT.fullmatch(text):
        k = int(text)
        if k <= 0:
            raise CosearchError(flag, f"expects a positive integer or a 0/1 list (got {value!r})")
        return [1 if i % k == 0 else 0 for i in range(layers)]
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    terms = []
    for term in text.split("+"):
        m = _TERM.match(term.strip())
        if m is None:
            raise CosearchError(flag, f"expects an integer or a list such as ([0]*3+[1]*58) (got {value!r})")
        terms.append(([int(x) for x in m.group(1).split(",")], int(m.group(2) or 1)))
    listed = sum(len(items) * times for items, times in terms)
    if listed != layers:
        raise CosearchError(flag, f"lists {listed:_} layers, --num-layers is {layers}")
    return [x for items, times in terms for x in items * times]


def _parse_window(seen: Mapping[str, Any], model: dict[str, Any], to_int: Int, layers: int) -> None:
    """``--mtp-num-layers``, ``--window-size`` and ``--window-attn-skip-freq`` into ``model`` (in place)."""
    mtp = to_int(seen, "--mtp-num-layers", None)
    if mtp:
        model["mtp_layers"] = mtp
    if "--window-size" not in seen:
        return
    text = str(seen["--window-size"]).strip().strip("'\"()[] ")
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2 or not all(re.fullmatch(r"-?\d{1,%d}" % MAX_INT_DIGITS, p) for p in parts) or int(parts[0]) < 0:
        raise CosearchError("--window-size", f"expects 'left,right' token counts such as 127,0 (got {seen['--window-size']!r})")
    left, right = int(parts[0]), int(parts[1])
    if right != 0:
        raise CosearchError("--window-size", f"right = {right}: only causal windows (right 0) are modelled")
    model["sliding_window"] = left + right + 1
    freq = seen.get("--window-attn-skip-freq")
    if freq is not None and _COUNT.fullmatch(str(freq).strip().strip("'\"")):
        model["global_attention_every"] = to_int(seen, "--window-attn-skip-freq", None)
    elif freq is not None:
        # 1 marks a full-attention layer, as Megatron's skip pattern
        every = global_every(layers, layer_pattern(freq, layers, "--window-attn-skip-freq").count(1))
        if every is not None:
            model["global_attention_every"] = every


def unread_flags(seen: Mapping[str, Any]) -> list[str]:
    """The ``--moe-*`` / ``--expert-*`` flags of ``seen`` that :func:`parse_moe` does not read (router numerics,
    fusions, logging...): skipped, so the caller tells the user rather than dropping them silently."""
    return sorted(f for f in seen if f.startswith(("--moe-", "--expert-")) and f not in READ)


def parse_moe(seen: Mapping[str, Any], model: dict[str, Any], plan: dict[str, Any], to_int: Int,
              to_float: Callable[..., float], training: dict[str, Any]) -> None:
    """Add the MoE / MLA / head_dim fields of the flags ``seen`` to ``model``, ``plan`` and ``training``
    (in place; training: the routing forced uniform)."""
    hidden, heads, layers = model["hidden"], model["heads"], model["layers"]
    kv_channels = to_int(seen, "--kv-channels", None)  # MLA sets its own head dims: ignored there
    if kv_channels is not None and kv_channels * heads != hidden and "--multi-latent-attention" not in seen:
        model["head_dim"] = kv_channels
    _parse_window(seen, model, to_int, layers)
    if "--multi-latent-attention" in seen:
        model.update(attention="mla", q_lora_rank=to_int(seen, "--q-lora-rank", 0),
                     kv_lora_rank=to_int(seen, "--kv-lora-rank", 32), qk_nope_head_dim=to_int(seen, "--qk-head-dim", 128),
                     qk_rope_head_dim=to_int(seen, "--qk-pos-emb-head-dim", 64), v_head_dim=to_int(seen, "--v-head-dim", 128))
    experts = to_int(seen, "--num-experts", 0)
    if not experts:
        ep = to_int(seen, "--expert-model-parallel-size", 1, least=1)
        if ep != 1:
            raise CosearchError("--expert-model-parallel-size", f"{ep} without --num-experts (a dense model has no experts)")
        if "--overlap-moe-expert-parallel-comm" in seen:
            raise CosearchError("--overlap-moe-expert-parallel-comm", "without --num-experts (a dense model has no "
                                "expert all-to-all to overlap)")
        return
    if "--moe-pad-expert-input-to-capacity" in seen:
        raise CosearchError("--moe-pad-expert-input-to-capacity", "padding each expert's input to its capacity is not "
                            "modelled (cosearch computes the routed tokens, capped at the capacity); drop the flag")
    dispatcher = str(seen.get("--moe-token-dispatcher-type", "allgather"))
    if dispatcher == "alltoall" and "--moe-enable-deepep" in seen:
        raise CosearchError("--moe-enable-deepep", "DeepEP needs --moe-token-dispatcher-type flex (got alltoall); use "
                            "flex with DeepEP, or drop --moe-enable-deepep")
    if dispatcher == "alltoall":
        plan["moe_dispatcher"] = "alltoall"
    elif dispatcher == "flex" and "--moe-enable-deepep" in seen:
        plan["moe_dispatcher"] = "deepep"
    else:
        raise CosearchError("--moe-token-dispatcher-type", f"{dispatcher!r}"
                            f"{' without --moe-enable-deepep' if dispatcher == 'flex' else ''} is not modelled "
                            "(cosearch models alltoall, and flex with --moe-enable-deepep; allgather is Megatron's "
                            "default when the flag is absent)")
    # TEGroupedMLP, the legacy GroupedMLP (grouped_gemm's default cuBLAS build) and SequentialMLP all launch
    # one GEMM per local expert
    plan["moe_grouped_gemm"] = "per_expert"
    dense_width = model["ffn_hidden"]
    expert_width = to_int(seen, "--moe-ffn-hidden-size", dense_width)
    pattern = layer_pattern(seen.get("--moe-layer-freq", 1), layers)
    dense = pattern.count(0)
    if dense == layers:
        raise CosearchError("--moe-layer-freq", "marks no layer as MoE")
    model.update(experts=experts, top_k=to_int(seen, "--moe-router-topk", DEFAULT_TOPK), ffn_hidden=expert_width)
    if dense:
        model.update(dense_layers=dense, dense_ffn_hidden=dense_width)
    shared = to_int(seen, "--moe-shared-expert-intermediate-size", None)
    if shared:
        if shared % expert_width == 0:
            model["shared_experts"] = shared // expert_width
        else:
            model.update(shared_experts=1, shared_ffn_hidden=shared)
    groups, group_topk = to_int(seen, "--moe-router-num-groups", None), to_int(seen, "--moe-router-group-topk", None)
    if groups and groups > 1 and group_topk:
        model["routed_nodes_limit"] = group_topk
    plan["ep"] = to_int(seen, "--expert-model-parallel-size", 1, least=1)
    etp = to_int(seen, "--expert-tensor-parallel-size", None, least=1)
    if etp is not None and etp != plan["tp"]:
        plan["etp"] = etp
    if "--moe-expert-capacity-factor" in seen:
        plan["capacity_factor"] = to_float(seen, "--moe-expert-capacity-factor", 0.0)
    if "--overlap-moe-expert-parallel-comm" in seen:  # 1F1B all-to-all overlap: the model's full overlap
        plan["moe_a2a_overlap"] = 1.0
    if "--moe-router-force-load-balancing" in seen:  # routing forced uniform
        training["moe_load_imbalance"] = 1.0
