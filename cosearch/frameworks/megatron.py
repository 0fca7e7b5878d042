"""Megatron-LM launch flags out (:func:`export`) and in (:func:`parse_args`).

Follows the argument names of **Megatron-LM core_r0.14.0** (``megatron/training/arguments.py``,
NVIDIA/Megatron-LM), as used by ``pretrain_gpt.py``:

=============================  ===========================================================
cosearch field                 Megatron-LM flag
=============================  ===========================================================
model.layers / hidden / heads  ``--num-layers`` ``--hidden-size`` ``--num-attention-heads``
model.kv_heads (< heads)       ``--group-query-attention --num-query-groups``
model.ffn_hidden               ``--ffn-hidden-size``
model.gated_mlp                ``--swiglu``
model.vocab                    ``--vocab-size`` (Megatron otherwise takes it from the tokenizer)
model.seq_len                  ``--seq-length`` ``--max-position-embeddings``
model.tied_embeddings = false  ``--untie-embeddings-and-output-weights``
training.global_batch          ``--global-batch-size``
training.tokens                ``--train-samples`` (tokens / seq_len, rounded up)
training.precision             ``--bf16`` / ``--fp16`` / ``--bf16 --fp8-format hybrid``
training.attention             ``--attention-backend flash`` / ``unfused`` (flash / standard; flash2 and
                               triton refused: no FlashAttention-2/SDPA or Triton path)
training.fusion                fused only (Megatron-Core's fused kernels): eager refused
training.cross_entropy         fused only (its vocab-parallel loss on 16-bit logits): eager refused
training.dropout               ``--attention-dropout`` ``--hidden-dropout`` (0.1 / 0.0)
plan.tp / pp / cp              ``--tensor-model-parallel-size`` ``--pipeline-model-parallel-size``
                               ``--context-parallel-size``
plan.pp not dividing layers    ``--decoder-first-pipeline-num-layers`` ``--decoder-last-pipeline-num-layers``
                               (:func:`uneven_stages`: middle ranks at the model's fullest count, the first
                               stage the smaller share, neither end above the model's count for it: the
                               first rank, pp micro-batches in flight, is evaluated a layer short);
                               read back when the middle ranks hold the fullest count and neither end more
                               than the model's (refused otherwise; refused without the flags, as
                               Megatron-LM refuses it)
plan.interleave                ``--num-layers-per-virtual-pipeline-stage`` (layers / (pp*v)); with an uneven
                               split ``--num-virtual-stages-per-pipeline-rank`` (read either way)
plan.microbatch                ``--micro-batch-size``
plan.sequence_parallel         ``--sequence-parallel``
plan.recompute                 ``--recompute-granularity selective`` or ``full`` with
                               ``--recompute-method uniform --recompute-num-layers 1``
plan.recompute_mla_up_proj     ``--recompute-granularity selective --recompute-modules [core_attn]
                               mla_up_proj`` (core_attn with recompute selective)
plan.zero 1                    ``--use-distributed-optimizer``
plan.zero 2 / 3                ``--use-megatron-fsdp --data-parallel-sharding-strategy
                               optim_grads`` / ``optim_grads_params`` (no pipeline)
plan.zero_group (hybrid)       ``--num-distributed-optimizer-instances dp/zero_group``
                               (with FSDP also ``--outer-dp-sharding-strategy no_shard``); refused
                               with cp > 1 (Megatron-Core's instances slice the dp-with-cp group)
plan.fsdp_overlap              1 with zero 3 (Megatron-FSDP prefetches); read back as 1
plan.fp8_param_gather          ``--fp8-param-gather`` (fp8 with zero >= 1: weights held in fp8, gathered in fp8 by
                               the distributed optimizer or Megatron-FSDP); with zero 2/3 the export adds
                               ``--use-distributed-optimizer`` beside ``--use-megatron-fsdp`` (Megatron-LM's
                               validate_args asserts the flag with the distributed optimizer or torch FSDP2;
                               later trees accept Megatron-FSDP as well). Read back as true; refused without
                               ``--fp8-format`` (Megatron-Core: "fp8_param must be used together with fp8 mode")
                               or without a sharded optimizer (``--use-distributed-optimizer`` or Megatron-FSDP
                               sharding at least the optimizer)
plan.overlap_grad_reduce       ``--overlap-grad-reduce``
plan.tp_comm_overlap           ``--tp-comm-overlap``
model.experts / top_k          ``--num-experts`` ``--moe-router-topk`` ``--moe-grouped-gemm``
                               (plan.moe_grouped_gemm must be ``per_expert``: TE GroupedLinear)
                               ``--moe-token-dispatcher-type alltoall`` (plan.moe_dispatcher
                               deepep: ``flex --moe-enable-deepep``)
model.expert_ffn_hidden        ``--moe-ffn-hidden-size`` (``--ffn-hidden-size`` = dense_ffn_hidden)
model.shared_experts           ``--moe-shared-expert-intermediate-size`` (shared_experts x width)
model.dense_layers             ``--moe-layer-freq "([0]*d+[1]*(layers-d))"``
model.attention mla            ``--multi-latent-attention --q-lora-rank --kv-lora-rank
                               --qk-head-dim --qk-pos-emb-head-dim --v-head-dim``
model.head_dim                 ``--kv-channels``
model.mtp_layers               ``--mtp-num-layers``
model.sliding_window           ``--window-size "w-1,0"`` (``--window-attn-skip-freq``
                               = model.global_attention_every)
plan.ep / etp                  ``--expert-model-parallel-size`` ``--expert-tensor-parallel-size``
plan.capacity_factor           ``--moe-expert-capacity-factor`` (none: dropless, no flag)
model.routed_nodes_limit       ``--moe-router-num-groups n --moe-router-group-topk limit``, n the NVLink domains
                               the EP group spans (as the model applies the limit); none within one domain
plan.moe_a2a_overlap 1         ``--overlap-moe-expert-parallel-comm`` (Megatron-Core's 1F1B all-to-all overlap)
=============================  ===========================================================

Refused: ``plan.moe_a2a_overlap`` between 0 and 1 (the switch is on or off) or where Megatron-Core rejects the
switch, ``plan.moe_fp8_dispatch`` under fp8 (Megatron-Core sends the dispatch in 16 bits),
Refused: pipeline schedules zb-h1, zb-v and dualpipe (Megatron-Core runs 1F1B and interleaved 1F1B),
offload of any kind (Megatron's CPU offloading is not the expansion-tier model here),
the Triton and FlashAttention-2 attention kernels, eager fusion or loss, zero 2/3 with pipeline parallelism
(Megatron FSDP has no pipeline), hybrid sharding under context parallelism (both ways).
The MoE, MLA and ``--kv-channels`` flags parse back (:mod:`.megatron_moe`, issue 15).
The world size is torchrun's, not Megatron's: :func:`parse_args` takes the cluster separately
(or reads ``--nproc-per-node`` / ``--nnodes`` of a ``torchrun`` prefix).
"""
from __future__ import annotations

import logging
import math
import shlex
from typing import Any, Mapping

from .._files import MAX_INT_DIGITS
from ..errors import CosearchError
from ..hf_moe import check_layers
from ..model.collectives import group_shape
from ..model.moe import expert_tp
from ..scenario import Scenario, hardware_values, parse_scenario
from ._common import fsdp_overlap, layout, megatron_core_schedule, model_stages, refuse, shard_group, zero3_overlap
from .megatron_moe import SWITCHES as _MOE_SWITCHES, parse_moe, unread_flags
from .planin import cluster_gpus, whole

VERSION = "Megatron-LM core_r0.14.0"

_SHARDING = {2: "optim_grads", 3: "optim_grads_params"}
FIRST, LAST = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
_log = logging.getLogger(__name__)


def _layers(n: int) -> str:
    return f"{n} layer{'' if n == 1 else 's'}"


def _ends(rest: int, interleave: int, first_max: int, last_max: int) -> tuple[int, int] | None:
    """``rest`` decoder layers shared by the first and the last stage, each a positive multiple of ``interleave``
    (Megatron-Core's rule), the first at most ``first_max`` and the last at most ``last_max`` decoder layers (the
    model's counts, :func:`model_stages`, the last's less its MTP modules); None where no split fits.

    The first stage gets the smaller share (rest/2 rounded down to a multiple of ``interleave``, raised where the
    last's bound needs it): the model's ``stage_layers`` takes the uneven split's missing layer off the first rank
    first, because under 1F1B that rank keeps pp micro-batches of activations in flight and is the memory-critical
    one, so the model evaluates its memory with the smaller count and the split must not put more there."""
    v = interleave
    if rest % v:
        return None
    low = max(v, rest - last_max // v * v)
    high = min(first_max // v * v, rest - v)
    if low > high:
        return None
    first = min(max(rest // (2 * v) * v, low), high)
    return first, rest - first


def stage_split(layers: int, pp: int, interleave: int, mtp: int, first: int | None,
                last: int | None) -> tuple[int, int, int]:
    """(first, each middle, last) decoder layers of a ``--decoder-first/last-pipeline-num-layers`` split (None: the
    flag is absent, that stage holds the middle count).

    Checked as Megatron-Core 0.14's TransformerConfig checks it (at least one layer per stage, the rest a whole
    number per middle stage, each count a multiple of the virtual stages), and against the model
    (:func:`model_stages`): the middle ranks must hold the fullest count (its first value), the first stage
    at most the model's first-rank count and the last, with its MTP modules, at most the model's last-rank count.
    A split the model cannot represent is refused, not read with a warning: an end holding more layers than the
    model evaluates there (e.g. 31 layers on pp 4 with 8 on the first stage, which the model evaluates at 7) would
    have that stage's memory (the first's, with pp micro-batches in flight) and time under-estimated, as a middle
    count other than the fullest would. A one-line error names the flag and the count it needs."""
    flag = FIRST if first is not None else LAST
    each = "a positive count" if interleave == 1 else f"a positive multiple of {interleave}, the virtual stages"
    if pp < 2:
        raise CosearchError(flag, f"an uneven pipeline split needs --pipeline-model-parallel-size > 1 (got {pp})")
    for name, n in ((FIRST, first), (LAST, last)):
        if n is not None and (n < 1 or n % interleave):
            raise CosearchError(name, f"{n}: a pipeline stage holds {each} of layers")
    middles = pp - (first is not None) - (last is not None)
    rest = layers - (first or 0) - (last or 0)
    if middles == 0 and rest:
        raise CosearchError(flag, f"the first and last stage hold {layers - rest} layers, --num-layers is {layers} "
                            "(pp 2 has no middle stage)")
    if middles and (rest < 1 or rest % (middles * interleave)):
        raise CosearchError(flag, f"leaves {rest} layers for {middles} middle stages: Megatron-Core needs the same "
                            f"count on each, {each}")
    middle = rest // middles if middles else 0
    stages = full, first_max, last_max = model_stages(layers, pp, interleave, mtp)
    first_n, last_n = (middle if first is None else first), (middle if last is None else last)

    def example() -> str:  # the split the export writes, for the messages below (worked out only for one)
        split = _model_split(layers, pp, interleave, mtp, stages)
        return f", e.g. {FIRST} {split[0]} {LAST} {split[2]}" if split else ""

    if pp > 2 and middle != full:
        raise CosearchError(flag, f"puts {middle} layers on each middle stage; cosearch evaluates the fullest rank at "
                            f"{full} layers, so the middle stages need {full} each{example()}")
    mtp_note = f" + {mtp} MTP" if mtp else ""
    if first_n > first_max:
        raise CosearchError(FIRST, f"{first_n}{'' if first is not None else ' (absent: the middle count)'}: cosearch "
                            f"evaluates the first stage (pp micro-batches of activations in flight) at {first_max} "
                            f"layers and would under-estimate its memory by {_layers(first_n - first_max)}; at most "
                            f"{first_max}{example()}")
    if last_n + mtp > last_max:
        raise CosearchError(LAST, f"{last_n}{mtp_note}{'' if last is not None else ' (absent: the middle count)'}: "
                            f"cosearch evaluates the last stage at {last_max} layers and would under-estimate that "
                            f"stage by {_layers(last_n + mtp - last_max)}; at most {last_max - mtp}{example()}")
    if pp == 2 and max(first_n, last_n + mtp) < full:
        raise CosearchError(FIRST, f"{first_n}: cosearch evaluates the fullest rank at {full} layers; with pp 2 the "
                            f"first or the last stage{mtp_note} needs {full}")
    return first_n, middle, last_n


def _model_split(layers: int, pp: int, v: int, mtp: int,
                 stages: tuple[int, int, int] | None = None) -> tuple[int, int, int] | None:
    """(first, each middle, last) that :func:`uneven_stages` writes for these counts (each middle 0 at pp 2, which
    has none); None where no split fits the model's (:func:`_ends`), or where pp is 2 and neither the first stage
    nor the last with its MTP modules reaches the fullest count (:func:`stage_split`'s rule). ``stages``: the
    model's counts, :func:`model_stages` of the same arguments, where the caller has them already."""
    full, first_max, last_max = stages or model_stages(layers, pp, v, mtp)
    ends = _ends(layers - (pp - 2) * full, v, first_max, last_max - mtp)
    if ends is None or (pp == 2 and max(ends[0], ends[1] + mtp) < full):
        return None
    return ends[0], (full if pp > 2 else 0), ends[1]


def uneven_stages(sc: Scenario) -> tuple[int, int, int] | None:
    """(first, each middle, last) decoder layers per pipeline rank where pp * interleave does not divide
    model.layers (None where it does): the middle ranks hold the model's fullest count (:func:`model_stages`),
    the first and last stage the rest, neither more than the model evaluates on that rank (:func:`model_stages`,
    the last with its MTP modules) and the first the smaller share (:func:`_ends`). Refused where no such split
    exists: too few layers left for the ends (plan.pp), or their counts not multiples of the interleave that fit
    the model's, or at pp 2 neither end (the last with its MTP modules) at the fullest count (plan.interleave, with
    a smaller interleave that exports where one does); a split the model did not evaluate is never written."""
    m, pl = sc.model, sc.plan
    layers, pp, v, mtp = m.layers, pl.pp, pl.interleave, m.mtp_layers or 0
    if pp == 1 or layers % (pp * v) == 0:
        return None
    stages = full, first_max, last_max = model_stages(layers, pp, v, mtp)
    rest = layers - (pp - 2) * full
    ends = f"{layers} layers on pp = {pp} leave {rest} for the first and last stage" + (
        f" beside {full} on each middle one" if pp > 2 else "")
    if rest % v:
        raise refuse("plan.interleave", f"interleave = {v}: {ends}, not a multiple of {v} (Megatron-Core splits each "
                     "stage's layers evenly over its virtual stages)")
    split = _model_split(layers, pp, v, mtp, stages)
    if split is None:
        bounds = (f"the model evaluates the first stage at {_layers(first_max)} and the last at {last_max}"
                  f"{f' with {mtp} MTP' if mtp else ''}")
        if rest < 2 * v or last_max - mtp < v or first_max < v:
            raise refuse("plan.pp", f"pp = {pp}: {ends}, and Megatron-LM needs at least {v} on each ({bounds}); "
                         "use a smaller pp")
        alt = next((w for w in range(v - 1, 0, -1)
                    if layers % (pp * w) == 0 or _model_split(layers, pp, w, mtp) is not None), None)
        reach = first_max // v * v + (last_max - mtp) // v * v
        why = (f"multiples of {v} within those sum to at most {reach}, not {rest}" if reach < rest else
               f"cosearch evaluates the fullest rank at {full} layers, which with pp 2 the first or the last stage"
               f"{f' + {mtp} MTP' if mtp else ''} must hold; no split in multiples of {v} within those does")
        raise refuse("plan.interleave", f"interleave = {v}: {ends}; {bounds}, and {why}; use "
                     + (f"interleave = {alt}" if alt else "interleave = 1 or a smaller pp"))
    return split


def flags(sc: Scenario) -> list[str]:
    """The Megatron-LM arguments of ``sc`` as a token list."""
    lay = layout(sc, "Megatron-LM")  # its refusals come before uneven_stages's
    return _flags(sc, lay, uneven_stages(sc))


def _flags(sc: Scenario, lay: dict[str, int], split: tuple[int, int, int] | None) -> list[str]:
    """:func:`flags` with :func:`layout` and :func:`uneven_stages` already worked out (:func:`export` shares them
    with its launcher line and :func:`_split_comment`)."""
    m, t, pl = sc.model, sc.training, sc.plan
    megatron_core_schedule(sc, "Megatron-LM")
    if pl.offload != "none":
        raise refuse("plan.offload", f"{pl.offload!r}: this export maps no Megatron-LM offload flag; use 'none'")
    if pl.zero >= 2 and pl.pp > 1:
        raise refuse("plan.zero", f"zero {pl.zero} maps to Megatron FSDP, which does not run with pipeline "
                     f"parallelism (pp = {pl.pp}); use zero 1 (--use-distributed-optimizer)")
    zero3_overlap(sc, "Megatron-LM")
    out = ["--num-layers", m.layers, "--hidden-size", m.hidden, "--num-attention-heads", m.heads]
    if m.kv_heads != m.heads:
        out += ["--group-query-attention", "--num-query-groups", m.kv_heads]
    out += ["--ffn-hidden-size", m.ffn_hidden if m.dense_ffn_hidden is None else m.dense_ffn_hidden]
    if m.gated_mlp:
        out += ["--swiglu"]
    out += ["--vocab-size", m.vocab, "--seq-length", m.seq_len, "--max-position-embeddings", m.seq_len]
    if not m.tied_embeddings:
        out += ["--untie-embeddings-and-output-weights"]
    drop = "0.1" if t.dropout else "0.0"
    out += ["--attention-dropout", drop, "--hidden-dropout", drop]
    out += ["--attention-backend", "flash" if t.attention == "flash" else "unfused"]  # layout: flash or standard
    out += ["--micro-batch-size", pl.microbatch, "--global-batch-size", t.global_batch]
    if t.tokens is not None:
        out += ["--train-samples", int(-(-t.tokens // m.seq_len))]
    out += {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp8": ["--bf16", "--fp8-format", "hybrid"]}[t.precision]
    out += ["--tensor-model-parallel-size", pl.tp, "--pipeline-model-parallel-size", pl.pp]
    if split is not None:
        out += [FIRST, split[0], LAST, split[2]]
        if pl.interleave > 1:  # a per-stage layer count does not fit an uneven split: the stage count
            out += ["--num-virtual-stages-per-pipeline-rank", pl.interleave]
    elif pl.interleave > 1:
        out += ["--num-layers-per-virtual-pipeline-stage", m.layers // (pl.pp * pl.interleave)]
    out += ["--context-parallel-size", pl.cp]
    if pl.sequence_parallel:
        out += ["--sequence-parallel"]
    if pl.recompute == "full":
        out += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", 1]
    elif pl.recompute == "selective" or pl.recompute_mla_up_proj:
        out += ["--recompute-granularity", "selective"]
        if pl.recompute_mla_up_proj:  # Megatron-Core's module list; selective alone is its default ["core_attn"]
            out += ["--recompute-modules", *(["core_attn"] if pl.recompute == "selective" else []), "mla_up_proj"]
    if t.optimizer_states == "bf16_moments":  # Megatron-Core's precision-aware optimizer, fp32 main params
        out += ["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16"]
    if pl.zero == 1:
        out += ["--use-distributed-optimizer"]
    elif pl.zero >= 2:
        out += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", _SHARDING[pl.zero]]
    if pl.fp8_param_gather:  # fp8 with zero >= 1 (parse_scenario): weights held and gathered in fp8
        # validate_args asserts --fp8-param-gather with the distributed optimizer (or torch FSDP2); Megatron-FSDP
        # runs with it too
        out += (["--use-distributed-optimizer"] if pl.zero >= 2 else []) + ["--fp8-param-gather"]
    group = shard_group(sc, lay["dp"], "Megatron-LM")
    if group is not None:
        out += ["--num-distributed-optimizer-instances", lay["dp"] // group]
        if pl.zero >= 2:
            out += ["--outer-dp-sharding-strategy", "no_shard"]
    if pl.overlap_grad_reduce:
        out += ["--overlap-grad-reduce"]
    if pl.tp_comm_overlap:
        out += ["--tp-comm-overlap"]
    out += _moe_flags(sc)
    return [str(x) for x in out]


def _moe_flags(sc: Scenario) -> list[Any]:
    """MoE / MLA / MTP / sliding-window flags (issue 13); empty for a dense model with full attention."""
    m, pl = sc.model, sc.plan
    out: list[Any] = []
    if m.head_dim is not None:
        out += ["--kv-channels", m.head_dim]
    if m.mtp_layers:
        out += ["--mtp-num-layers", m.mtp_layers]
    if m.sliding_window is not None:  # Megatron's window counts the keys before the query: w - 1
        out += ["--window-size", f"{m.sliding_window - 1},0"]
        if m.global_attention_every is not None:
            out += ["--window-attn-skip-freq", m.global_attention_every]
    if m.attention == "mla":
        out += ["--multi-latent-attention", "--q-lora-rank", m.q_lora_rank or 0, "--kv-lora-rank", m.kv_lora_rank,
                "--qk-head-dim", m.qk_nope_head_dim, "--qk-pos-emb-head-dim", m.qk_rope_head_dim,
                "--v-head-dim", m.v_head_dim]
    if m.experts == 0:
        return out
    if pl.moe_fp8_dispatch and sc.training.precision == "fp8":
        raise refuse("plan.moe_fp8_dispatch", "Megatron-Core dispatches token copies in 16 bits (HybridEP asserts "
                     "fp8_dispatch off); use false to export")
    if pl.moe_grouped_gemm != "per_expert":
        raise refuse("plan.moe_grouped_gemm", "Megatron-Core launches one GEMM per local expert (Transformer Engine's "
                     "GroupedLinear); use per_expert to export")
    out += ["--num-experts", m.experts, "--moe-router-topk", m.top_k, "--moe-grouped-gemm"]
    out += (["--moe-token-dispatcher-type", "alltoall"] if pl.moe_dispatcher == "alltoall"
            else ["--moe-token-dispatcher-type", "flex", "--moe-enable-deepep"])
    out += _router_groups(sc)
    out += ["--moe-ffn-hidden-size", m.expert_ffn_hidden or m.ffn_hidden]
    if m.shared_experts:
        out += ["--moe-shared-expert-intermediate-size",
                m.shared_experts * (m.shared_ffn_hidden or m.expert_ffn_hidden or m.ffn_hidden)]
    if m.dense_layers:
        out += ["--moe-layer-freq", f"([0]*{m.dense_layers}+[1]*{m.layers - m.dense_layers})"]
    out += ["--expert-model-parallel-size", pl.ep, "--expert-tensor-parallel-size", expert_tp(pl.etp, pl.tp)]
    if pl.capacity_factor is not None:
        out += ["--moe-expert-capacity-factor", pl.capacity_factor]
    return out + _a2a_overlap(sc)


def _router_groups(sc: Scenario) -> list[Any]:
    """Node-limited routing (model.routed_nodes_limit) as Megatron's group-limited routing: one expert group per
    NVLink domain the EP group spans, n = ep / clip(nvlink_domain / etp, 1, ep)
    (:func:`cosearch.model.collectives.group_shape`), as the model applies the limit
    (:func:`cosearch.model.moe.a2a_times_s`). None where the limit is moot: one domain, or a limit of n or more."""
    m, pl = sc.model, sc.plan
    limit = m.routed_nodes_limit
    if not limit:
        return []
    domain = hardware_values(sc.cluster, sc.training.precision)["nvlink_domain"]  # as scenario_columns has it
    groups = float(group_shape(pl.ep, expert_tp(pl.etp, pl.tp), domain)[2])
    if groups <= 1 or limit >= groups:
        return []
    if groups != int(groups) or m.experts % int(groups):
        raise refuse("model.routed_nodes_limit", f"{limit}: the EP group (ep = {pl.ep}) spans {groups:g} NVLink domains, "
                     f"which --moe-router-num-groups cannot express (a whole number dividing model.experts = "
                     f"{m.experts}); use an ep that spans whole domains, or leave the limit unset")
    groups = int(groups)
    if limit * (m.experts // groups) < m.top_k:
        raise refuse("model.routed_nodes_limit", f"{limit}: {limit} of {groups} expert groups hold "
                     f"{limit * (m.experts // groups)} experts, fewer than model.top_k = {m.top_k}")
    return ["--moe-router-num-groups", groups, "--moe-router-group-topk", limit]


def _a2a_overlap(sc: Scenario) -> list[Any]:
    """``--overlap-moe-expert-parallel-comm`` for plan.moe_a2a_overlap 1 (Megatron-Core 0.14's 1F1B all-to-all
    overlap; the switch reads back as 1), refused where its TransformerConfig rejects the switch."""
    m, pl = sc.model, sc.plan
    if pl.moe_a2a_overlap == 0:
        return []
    field, got = "plan.moe_a2a_overlap", f"{pl.moe_a2a_overlap:g}"
    if pl.moe_a2a_overlap < 1:
        raise refuse(field, f"{got}: Megatron-LM's --overlap-moe-expert-parallel-comm is on or off (read back as 1); "
                     "use 0 or 1")
    why = ("needs expert parallelism (ep > 1)" if pl.ep == 1 else
           f"needs virtual pipeline stages under pipelining (pp = {pl.pp}, interleave 1)" if pl.pp > 1 and pl.interleave == 1
           else "refuses full recompute" if pl.recompute == "full" else
           f"takes at most one MTP layer (model.mtp_layers = {m.mtp_layers})" if (m.mtp_layers or 0) > 1 else None)
    if why:
        raise refuse(field, f"{got}: Megatron-Core's --overlap-moe-expert-parallel-comm {why}; change the plan or use 0")
    return ["--overlap-moe-expert-parallel-comm"]


def _split_comment(sc: Scenario, split: tuple[int, int, int] | None) -> str:
    """A comment line with the decoder layers of each pipeline stage of an uneven split (:func:`uneven_stages`;
    "" for an even one)."""
    pl, mtp = sc.plan, sc.model.mtp_layers or 0
    if split is None:
        return ""
    middle = "" if pl.pp == 2 else f"{split[1]} x {pl.pp - 2} (middle), "
    virtual = f"; each over {pl.interleave} virtual stages" if pl.interleave > 1 else ""
    return (f"# decoder layers per pipeline stage: {split[0]} (first), {middle}{split[2]} "
            f"(last{f', + {mtp} MTP' if mtp else ''}){virtual}\n")


def export(sc: Scenario) -> str:
    """``torchrun ... pretrain_gpt.py`` with the flags, one per line (shell continuation)."""
    lay = layout(sc, "Megatron-LM")
    split = uneven_stages(sc)  # once, for the flags and the comment line
    toks = _flags(sc, lay, split)
    lines, i = [], 0
    while i < len(toks):
        if i + 1 < len(toks) and not toks[i + 1].startswith("--"):
            lines.append(f"{toks[i]} {shlex.quote(toks[i + 1])}")
            i += 2
        else:
            lines.append(toks[i])
            i += 1
    head = (f"# {VERSION}: cosearch export of {sc.cluster.gpus} x {sc.cluster.gpu}; add data, tokenizer and "
            f"optimizer flags\n{_split_comment(sc, split)}"
            f"torchrun --nnodes {lay['nodes']} --nproc-per-node {lay['gpus_per_node']} pretrain_gpt.py")
    return " \\\n    ".join([head] + lines) + "\n"


# ----------------------------------------------------------------------------------- plan in
#: Flags taking a value that this parser reads (all other value flags are skipped with their value).
_VALUE = {
    "--num-layers", "--hidden-size", "--num-attention-heads", "--num-query-groups", "--ffn-hidden-size",
    "--vocab-size", "--seq-length", "--max-position-embeddings", "--attention-dropout", "--hidden-dropout",
    "--attention-backend", "--micro-batch-size", "--global-batch-size", "--train-samples", "--train-iters",
    "--fp8-format", "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
    "--num-layers-per-virtual-pipeline-stage", "--num-virtual-stages-per-pipeline-rank", "--recompute-granularity",
    "--recompute-method", "--recompute-num-layers", "--data-parallel-sharding-strategy",
    "--num-distributed-optimizer-instances", "--outer-dp-sharding-strategy", "--expert-model-parallel-size",
    "--num-experts", "--nproc-per-node", "--nproc_per_node", "--nnodes", "--transformer-impl",
    "--normalization", "--position-embedding-type", "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers", "--pipeline-model-parallel-layout",
}
#: Flags taking one or more values (argparse nargs='+').
_LISTS = {"--recompute-modules"}
#: Megatron-Core recompute modules cosearch maps: core_attn (and the activation functions, moe_act and
#: mlp, which plan.recompute selective also reruns) -> selective; mla_up_proj -> plan.recompute_mla_up_proj.
_RECOMPUTE_MODULES = ("core_attn", "moe_act", "mlp", "mla_up_proj")
#: Flags that change the model or plan in ways cosearch does not model -> refused.
_UNSUPPORTED = {
    "--pipeline-model-parallel-layout": "custom pipeline layouts are not modelled (use --decoder-first-pipeline-"
                                        "num-layers / --decoder-last-pipeline-num-layers for an uneven split)",
    "--cpu-offloading": "activation CPU offloading is not mapped",
    "--optimizer-cpu-offload": "optimizer CPU offloading is not mapped",
    "--use-torch-fsdp2": "torch FSDP2 inside Megatron is not mapped; use --use-megatron-fsdp",
}


def _split(args: str | list[str]) -> list[str]:
    """The words of a command line as the shell splits them (an unbalanced quote is a one-line error)."""
    if not isinstance(args, str):
        return [str(a) for a in args]
    try:
        return shlex.split(args.replace("\\\n", " "))
    except ValueError as err:  # shlex: "No closing quotation", "No escaped character"
        raise CosearchError("--megatron-args", f"cannot split the command line as a shell would ({err})") from None


def _tokens(args: str | list[str]) -> dict[str, Any]:
    toks = _split(args)
    seen: dict[str, Any] = {}
    i = 0
    while i < len(toks):
        tok = toks[i]
        i += 1
        if not tok.startswith("--"):
            continue  # launcher, script name, values of skipped flags
        name, eq, val = tok.partition("=")
        if name in _LISTS:  # nargs='+': every following word up to the next flag
            words = [val] if eq else []
            while i < len(toks) and not toks[i].startswith("-"):
                words.append(toks[i])
                i += 1
            if not words:
                raise CosearchError(name, "expects one or more values")
            seen[name] = words
        elif eq:
            seen[name] = val
        elif name in _VALUE or (i < len(toks) and not toks[i].startswith("-") and name not in _SWITCHES):
            if i >= len(toks):
                raise CosearchError(name, "expects a value")
            seen[name] = toks[i]
            i += 1
        else:
            seen[name] = True
    return seen


#: Switches (store_true) read here, so an argument after one is not taken for its value.
_SWITCHES = {
    "--group-query-attention", "--swiglu", "--untie-embeddings-and-output-weights", "--bf16", "--fp16",
    "--sequence-parallel", "--use-distributed-optimizer", "--use-megatron-fsdp", "--use-custom-fsdp",
    "--overlap-grad-reduce", "--tp-comm-overlap", "--recompute-activations", "--use-flash-attn",
    "--multi-latent-attention", "--cpu-offloading", "--optimizer-cpu-offload", "--use-torch-fsdp2",
    "--no-overlap-grad-reduce", "--use-mcore-models", "--disable-bias-linear", "--overlap-param-gather",
    "--use-precision-aware-optimizer", "--fp8-param-gather",
} | _MOE_SWITCHES


def _int(seen: Mapping[str, Any], flag: str, default: int | None = None, least: int | None = None) -> int | None:
    """The integer value of ``flag`` (``default`` when absent), at least ``least`` where given (parallel
    degrees: 1, as Megatron-LM divides by them); a word, a switch without value or a number of more
    than :data:`~cosearch._files.MAX_INT_DIGITS` digits is a one-line error naming the flag."""
    v = seen.get(flag)
    if v is None:
        return default
    try:
        if not isinstance(v, str) or len(v.strip()) > MAX_INT_DIGITS + 1:
            raise ValueError(v)
        n = int(v)
    except ValueError:
        raise CosearchError(flag, f"expects an integer of at most {MAX_INT_DIGITS} digits (got {v!r})") from None
    return n if least is None else whole(n, flag, least)


def _float(seen: Mapping[str, Any], flag: str, default: float, least: float = -math.inf,
           most: float = math.inf) -> float:
    """The number value of ``flag`` (``default`` when absent), finite and in ``least..most``: nan, inf,
    a word or an out-of-range value (a dropout of 2) is a one-line error naming the flag."""
    v = seen.get(flag)
    if v is None:
        return default
    try:
        if not isinstance(v, str):
            raise ValueError(v)
        x = float(v)
    except ValueError:
        raise CosearchError(flag, f"expects a number (got {v!r})") from None
    if not (math.isfinite(x) and least <= x <= most):
        where = "" if math.isinf(least) and math.isinf(most) else f" in {least:g}..{most:g}"
        raise CosearchError(flag, f"expects a finite number{where} (got {v!r})")
    return x


def _instances_group(seen: Mapping[str, Any], dp: int, cp: int) -> int | None:
    """``plan.zero_group`` of ``--num-distributed-optimizer-instances`` (None for one instance). Megatron-Core's
    instances slice its dp-with-cp group, so under context parallelism a group holds context-parallel ranks, which
    the model's zero_group (data-parallel ranks, replicated over cp) cannot: refused there."""
    flag = "--num-distributed-optimizer-instances"
    instances = _int(seen, flag, 1, least=1)
    if instances == 1:
        return None
    if cp > 1:
        raise CosearchError(flag, f"{instances} with --context-parallel-size {cp}: each instance shards over "
                            "data- and context-parallel ranks together; cosearch models hybrid sharding over "
                            "data-parallel ranks only (use one instance, or cp 1)")
    if dp % instances:
        raise CosearchError(flag, f"{instances} does not divide dp = {dp}")
    return dp // instances


def parse_args(args: str | list[str], cluster: Mapping[str, Any] | None = None) -> Scenario:
    """A :class:`Scenario` from a Megatron-LM command line (the inverse of :func:`flags`).

    Required: ``--num-layers --hidden-size --num-attention-heads --seq-length --micro-batch-size
    --vocab-size`` and a precision (``--bf16``/``--fp16``; ``--fp8-format`` makes it fp8). The
    cluster (``gpu`` and ``gpus``, optionally the hardware overrides) comes from ``cluster``;
    ``gpus`` may instead come from a ``torchrun --nproc-per-node P --nnodes N`` prefix. Megatron
    defaults apply to the rest (``--ffn-hidden-size`` 4h, or int(8h/3 / 64) * 64 with ``--swiglu``;
    dropout 0.1; global batch = micro batch x dp). Flags that do not change the performance
    model (data, tokenizer, optimizer, logging) are skipped; MoE, MLA and ``--kv-channels`` flags are
    read by :func:`.megatron_moe.parse_moe` (issue 15), and the ``--moe-*`` / ``--expert-*`` flags it does not
    read are logged as a warning. An uneven split (``--decoder-first/last-pipeline-num-layers``) is read where
    :func:`stage_split` accepts it; ``--num-layers`` that pp * interleave does not divide without those flags is
    refused, as Megatron-LM refuses it (:func:`_even_split`); custom pipeline layouts and CPU offloading are refused.
    ``--fp8-param-gather`` is ``plan.fp8_param_gather`` (:func:`_fp8_param_gather`: refused without fp8 or without
    a sharded optimizer, as Megatron-LM refuses it).
    """
    seen = _tokens(args)
    for flag, why in _UNSUPPORTED.items():
        v = seen.get(flag)
        if v is None:
            continue
        raise CosearchError(flag, why)
    for flag in ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--micro-batch-size"):
        if flag not in seen:
            raise CosearchError(flag, "required to describe the job (Megatron-LM has no default for it)")
    if "--vocab-size" not in seen:
        raise CosearchError("--vocab-size", "required: Megatron-LM reads the vocabulary from the tokenizer, which "
                            "cosearch does not load; add --vocab-size N")
    layers = check_layers(_int(seen, "--num-layers", least=1), "--num-layers")  # before per-layer lists
    hidden, heads = _int(seen, "--hidden-size"), _int(seen, "--num-attention-heads")
    seq = _int(seen, "--seq-length")
    gated = "--swiglu" in seen
    ffn = _int(seen, "--ffn-hidden-size", int(4 * hidden * 2 / 3 / 64) * 64 if gated else 4 * hidden)
    kv = _int(seen, "--num-query-groups", 1) if "--group-query-attention" in seen else heads
    model = {"layers": layers, "hidden": hidden, "heads": heads, "kv_heads": kv, "ffn_hidden": ffn, "gated_mlp": gated,
             "vocab": _int(seen, "--vocab-size"), "seq_len": seq,
             "tied_embeddings": "--untie-embeddings-and-output-weights" not in seen}

    if "--fp8-format" in seen:
        precision = "fp8"
    elif "--bf16" in seen:
        precision = "bf16"
    elif "--fp16" in seen:
        precision = "fp16"
    else:
        raise CosearchError("--bf16", "no precision flag: cosearch models bf16, fp16 and fp8 (--fp8-format) "
                            "training, not fp32; add --bf16 or --fp16")
    backend = str(seen.get("--attention-backend", "auto"))
    if backend not in ("auto", "flash", "fused", "unfused", "local"):
        raise CosearchError("--attention-backend", f"unknown backend {backend!r}")
    attention = "standard" if backend in ("unfused", "local") else "flash"
    dropout = max(_float(seen, f, 0.1, 0.0, 1.0) for f in ("--attention-dropout", "--hidden-dropout")) > 0

    tp = _int(seen, "--tensor-model-parallel-size", 1, least=1)
    pp = _int(seen, "--pipeline-model-parallel-size", 1, least=1)
    cp = _int(seen, "--context-parallel-size", 1, least=1)
    interleave = 1
    if "--num-virtual-stages-per-pipeline-rank" in seen:
        interleave = _int(seen, "--num-virtual-stages-per-pipeline-rank", least=1)
    elif "--num-layers-per-virtual-pipeline-stage" in seen:
        per = _int(seen, "--num-layers-per-virtual-pipeline-stage", least=1)
        if layers % (pp * per):
            raise CosearchError("--num-layers-per-virtual-pipeline-stage", f"{per} does not divide the "
                                f"{layers / pp:g} layers per pipeline stage")
        interleave = layers // (pp * per)
    gran = seen.get("--recompute-granularity")
    if gran is None and "--recompute-activations" in seen:
        gran = "selective"
    if gran not in (None, "selective", "full"):
        raise CosearchError("--recompute-granularity", f"expects selective or full (got {gran!r})")
    modules = seen.get("--recompute-modules")
    mla_up = False
    if modules is not None and gran == "selective":
        unknown = [x for x in modules if x not in _RECOMPUTE_MODULES]
        if unknown:
            raise CosearchError("--recompute-modules", f"{unknown[0]} is not modelled; allowed: {', '.join(_RECOMPUTE_MODULES)}")
        mla_up = "mla_up_proj" in modules
        if not set(modules) - {"mla_up_proj"}:
            gran = None  # only the up-projections rerun: recompute none with plan.recompute_mla_up_proj
    if gran == "full":
        method, n = seen.get("--recompute-method"), _int(seen, "--recompute-num-layers", 1)
        if method not in ("uniform", None) or n != 1:
            raise CosearchError("--recompute-method", "cosearch models full recompute of every layer "
                                "(--recompute-method uniform --recompute-num-layers 1)")
    zero = 0
    if "--use-distributed-optimizer" in seen:
        zero = 1
    if "--use-megatron-fsdp" in seen or "--use-custom-fsdp" in seen:
        strategy = str(seen.get("--data-parallel-sharding-strategy", "optim_grads_params"))
        levels = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
        if strategy not in levels:
            raise CosearchError("--data-parallel-sharding-strategy", f"expects one of {', '.join(levels)} "
                                f"(got {strategy!r})")
        zero = levels[strategy]

    cl = dict(cluster or {})
    if "gpus" not in cl and ("--nproc-per-node" in seen or "--nproc_per_node" in seen):
        per_node = _int(seen, "--nproc-per-node" if "--nproc-per-node" in seen else "--nproc_per_node", least=1)
        cl["gpus"] = per_node * _int(seen, "--nnodes", 1, least=1)
        cl.setdefault("gpus_per_node", per_node)
    if "gpu" not in cl:
        raise CosearchError("--gpu", "required: the GPU model is not in Megatron-LM's arguments (e.g. --gpu h100-sxm)")
    if "gpus" not in cl:
        raise CosearchError("--gpus", "required: the world size is the launcher's, not Megatron-LM's "
                            "(give --gpus N or a torchrun --nproc-per-node/--nnodes prefix)")
    gpus = cluster_gpus(cl)
    if gpus % (tp * pp * cp):
        raise CosearchError("--gpus", f"{gpus} GPUs are not a multiple of tp*pp*cp = {tp * pp * cp}")
    dp = gpus // (tp * pp * cp)
    micro = _int(seen, "--micro-batch-size", least=1)
    plan: dict[str, Any] = {
        "tp": tp, "pp": pp, "cp": cp, "microbatch": micro, "interleave": interleave,
        "recompute": gran or "none", "sequence_parallel": "--sequence-parallel" in seen, "zero": zero,
        "overlap_grad_reduce": "--overlap-grad-reduce" in seen, "tp_comm_overlap": "--tp-comm-overlap" in seen,
    }
    if mla_up:
        plan["recompute_mla_up_proj"] = True
    if "--fp8-param-gather" in seen:
        plan["fp8_param_gather"] = _fp8_param_gather(precision, zero)
    if zero == 3:  # Megatron-FSDP prefetches its gathers, as the export states
        plan["fsdp_overlap"] = fsdp_overlap("Megatron-LM")
    moe_training: dict[str, Any] = {}
    parse_moe(seen, model, plan, _int, _float, moe_training)  # issue 15: MoE / MLA / head_dim flags (megatron_moe.py)
    ignored = unread_flags(seen)
    if ignored:
        _log.warning("Megatron-LM flags not modelled, ignored: %s", " ".join(ignored))
    group = _instances_group(seen, dp, cp)
    if group is not None:
        plan["zero_group"] = group
    global_batch = _int(seen, "--global-batch-size", micro * dp, least=1)
    training: dict[str, Any] = {"global_batch": global_batch, "precision": precision, "attention": attention,
                                "dropout": dropout, **moe_training}
    moments = {str(seen.get(f, "fp32")) for f in ("--exp-avg-dtype", "--exp-avg-sq-dtype")}
    if "--use-precision-aware-optimizer" in seen and moments != {"fp32"}:
        if not moments <= {"bf16", "fp16"} or str(seen.get("--main-params-dtype", "fp32")) != "fp32":
            raise CosearchError("--exp-avg-dtype", "cosearch models fp32 main params with both Adam moments in fp32 "
                                "or both in 16 bits (--exp-avg-dtype and --exp-avg-sq-dtype bf16 or fp16)")
        training["optimizer_states"] = "bf16_moments"
    if "--train-samples" in seen:
        training["tokens"] = float(_int(seen, "--train-samples", least=1) * seq)
    elif "--train-iters" in seen:
        training["tokens"] = float(_int(seen, "--train-iters", least=1) * global_batch * seq)
    sc = parse_scenario({"model": model, "training": training, "cluster": cl, "plan": plan})
    if FIRST in seen or LAST in seen:  # checked on the parsed scenario: pp, interleave and MTP are valid there
        stage_split(layers, pp, interleave, sc.model.mtp_layers or 0, _int(seen, FIRST), _int(seen, LAST))
    elif layers % (pp * interleave):
        _even_split(layers, pp, interleave, sc.model.mtp_layers or 0)
    return sc


def _fp8_param_gather(precision: str, zero: int) -> bool:
    """``plan.fp8_param_gather`` of a command line with ``--fp8-param-gather``: true, or a one-line error naming the
    flag where Megatron-LM refuses it: without fp8 (Megatron-Core's TransformerConfig: "fp8_param must be used
    together with fp8 mode") or without a sharded optimizer (validate_args: "--fp8-param-gather only supported with
    distributed optimizer, ..."; Megatron-FSDP's no_shard strategy shards nothing)."""
    flag = "--fp8-param-gather"
    if precision != "fp8":
        raise CosearchError(flag, f"without --fp8-format (the run is {precision}): Megatron-Core keeps fp8 weights "
                            "only in fp8 training (\"fp8_param must be used together with fp8 mode\"); add "
                            "--fp8-format hybrid or drop the flag")
    if zero < 1:
        raise CosearchError(flag, "without --use-distributed-optimizer (or Megatron-FSDP sharding the optimizer): "
                            "Megatron-LM gathers fp8 weights only in the distributed optimizer or FSDP (\"--fp8-param-"
                            "gather only supported with distributed optimizer\"); add --use-distributed-optimizer or "
                            "drop the flag")
    return True


def _even_split(layers: int, pp: int, interleave: int, mtp: int) -> None:
    """Refuses ``--num-layers`` that pp * interleave does not divide where neither ``--decoder-first/last-pipeline-
    num-layers`` is given: Megatron-LM's validate_args refuses it ("Number of layers should be divisible by the
    pipeline-model-parallel size"; Megatron-Core's layer count per virtual stage likewise needs layers / pp divisible
    by the virtual stages), counting decoder layers only (the MTP modules sit on the last stage beside them, as
    :func:`stage_split` counts them), so no run had the split the model would evaluate. The one-line error names
    the flag at fault and gives the split :func:`uneven_stages` would export (:func:`_model_split`) where one fits."""
    split = _model_split(layers, pp, interleave, mtp) if pp > 1 else None
    hint = (f"for an uneven split give e.g. {FIRST} {split[0]} {LAST} {split[2]}" if split else
            f"no {FIRST} / {LAST} split fits cosearch's per-rank counts at this pp and interleave")
    if layers % pp:
        raise CosearchError("--pipeline-model-parallel-size", f"{pp} does not divide --num-layers {layers} "
                            "(Megatron-LM: \"Number of layers should be divisible by the pipeline-model-parallel "
                            f"size\"); {hint}")
    raise CosearchError("--num-virtual-stages-per-pipeline-rank", f"{interleave} does not divide the {layers // pp} "
                        f"layers per pipeline stage (--num-layers {layers} on --pipeline-model-parallel-size {pp}; "
                        f"Megatron-Core splits each stage's layers evenly over its virtual stages); {hint}")
