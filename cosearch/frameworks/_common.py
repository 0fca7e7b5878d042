"""Checks and numbers every framework mapping shares."""
from __future__ import annotations

from .._cells import prefetching_fsdp, recompute_stops_early, tp_overlap_passes
from ..errors import CosearchError
from ..model.memory import stage_layers
from ..scenario import Scenario, scenario_columns


def refuse(field: str, reason: str) -> CosearchError:
    return CosearchError(field, reason)


#: ``training.optimizer_states`` each framework's configuration can express (others: fp32 only).
OPTIMIZER_STATES = {"Megatron-LM": ("fp32", "bf16_moments")}  # Megatron-Core's precision-aware optimizer

#: The ``training`` kernel choices (attention, fusion, cross_entropy) each framework's launch runs; a field
#: not listed takes every value (torchtitan: fusion and its loss follow ``compile``).
KERNELS = {
    "Megatron-LM": {"attention": ("flash", "standard"), "fusion": ("fused",), "cross_entropy": ("fused",)},
    "NeMo": {"attention": ("flash",), "fusion": ("fused",), "cross_entropy": ("fused",)},
    "torchtitan": {"attention": ("flash", "flash2")},
    "DeepSpeed": {"attention": ("flash",), "fusion": ("fused",), "cross_entropy": ("fused",)},
}
#: What each framework runs for those fields: the reason of a refusal.
KERNELS_RUN = {
    "Megatron-LM": "Megatron-Core runs Transformer Engine's fused attention (--attention-backend flash) or "
                   "unfused attention (--attention-backend unfused), no FlashAttention-2/SDPA or Triton path; fused "
                   "elementwise kernels (no eager mode); its vocab-parallel cross-entropy on the 16-bit logits",
    "NeMo": "NeMo (Megatron-Core) runs Transformer Engine's fused attention (this export sets no other backend), fused "
            "elementwise kernels and the vocab-parallel cross-entropy on the 16-bit logits",
    "torchtitan": "torchtitan runs PyTorch SDPA: flash (cuDNN, PyTorch >= 2.11 on Hopper/Blackwell) or flash2 "
                  "(FlashAttention-2, earlier PyTorch); no unfused or Triton attention setting is mapped",
    "DeepSpeed": "kernels are the model code's, not DeepSpeed config settings; this export maps the scenario defaults",
}
#: Frameworks whose export writes an uneven pipeline split (first and last stage set apart) and checks it itself
#: (megatron.uneven_stages; torchtitan counts the embedding and the output as a layer each,
#: torchtitan._export_split); the others need pp * interleave to divide model.layers.
UNEVEN_PIPELINE = ("Megatron-LM", "torchtitan")
#: The ZeRO-3 implementation each export writes (others: none or DeepSpeed's own ZeRO-3).
FSDP = {"Megatron-LM": "Megatron-FSDP", "torchtitan": "FSDP2"}


def layout(sc: Scenario, framework: str, states: tuple[str, ...] | None = None,
           early_stop_key: bool = False) -> dict[str, int]:
    """dp, gradient-accumulation steps and nodes of a plan that a launcher can run as written.

    Refuses plans whose degrees do not tile the cluster or the batch (a launcher would fail on
    them) or that use fields the framework's mapping does not express, and runs the scenario's own
    hardware checks (e.g. fp8 on a GPU without fp8). A release whose configuration expresses more than
    the framework's default export says so: ``states``, the ``training.optimizer_states`` it writes (default
    :data:`OPTIMIZER_STATES`); ``early_stop_key``, it writes full recompute's early stop as the plan states it
    (torchtitan v0.2's ``[activation_checkpoint] early_stop``), so ``plan.recompute_early_stop`` is its own check.
    """
    if sc.cluster.inventory is not None:
        raise refuse("cluster.inventory", f"{framework} launches one GPU type per job; export a plan that uses one "
                     "type (plan.gpus_by_type) or write the per-type stage layout by hand")
    scenario_columns(sc)  # hardware checks: unknown GPU, precision the GPU lacks
    m, pl, cl = sc.model, sc.plan, sc.cluster
    if pl.zero3_live_params is not None and framework.lower() != "deepspeed":
        raise refuse("plan.zero3_live_params", f"a cap on live gathered parameters is DeepSpeed's "
                     f"(stage3_max_live_parameters); {framework} gathers whole wrapped layers")
    if framework != "Megatron-LM":  # issue 13: MoE / MLA / head_dim flags are mapped for Megatron-LM only
        for key, on in (("experts", m.experts > 0), ("attention", m.attention == "mla"), ("head_dim", m.head_dim is not None),
                        ("mtp_layers", bool(m.mtp_layers)), ("sliding_window", m.sliding_window is not None)):
            if on:
                raise refuse(f"model.{key}", f"mixture-of-experts / MLA / head_dim / MTP / sliding-window export is "
                             f"mapped for megatron only, not {framework}; use --format megatron")
    stops_early = recompute_stops_early(framework)  # of the exported stacks, torchtitan
    if pl.recompute == "op" and not stops_early:
        raise refuse("plan.recompute", f"op is torchtitan's per-op selective checkpointing; {framework} has no such "
                     "mode (use none, selective or full, or --format torchtitan)")
    if pl.recompute == "full" and pl.recompute_early_stop != stops_early and not early_stop_key:
        raise refuse("plan.recompute_early_stop", (
            "torchtitan's full activation checkpointing stops the recompute early (PyTorch's non-reentrant "
            "checkpoint; torch.compile recomputes only what the backward reads); set it true to export") if stops_early
            else (f"{framework}'s full recompute reruns the whole layer (its own reentrant checkpoint function); "
                  "set it false to export, or use --format torchtitan"))
    passes = tp_overlap_passes(framework)  # async TP: the forward only
    if pl.tp_comm_overlap and pl.tp > 1 and pl.tp_overlap_passes != passes:
        raise refuse("plan.tp_overlap_passes", f"{pl.tp_overlap_passes}: {framework}'s tensor-parallel overlap hides "
                     f"the collectives of {'the forward pass only' if passes == 'forward' else 'every pass'}; set "
                     f"{passes} to export")
    allowed = states or OPTIMIZER_STATES.get(framework, ("fp32",))
    if sc.training.optimizer_states not in allowed:
        raise refuse("training.optimizer_states", f"{sc.training.optimizer_states}: no {framework} setting is mapped "
                     f"for it here; allowed: {', '.join(allowed)}")
    kernels(sc, framework)
    model_par = pl.tp * pl.pp * pl.cp
    if cl.gpus % model_par:
        raise refuse("plan", f"tp*pp*cp = {model_par} does not divide cluster.gpus = {cl.gpus}; {framework} "
                     "launches one rank per GPU")
    dp = pl.dp if pl.dp is not None else cl.gpus // model_par
    if dp * model_par != cl.gpus:
        raise refuse("plan.dp", f"tp*pp*cp*dp = {dp * model_par} but cluster.gpus = {cl.gpus}; {framework} "
                     "uses every launched GPU")
    per_step = pl.microbatch * dp
    if sc.training.global_batch % per_step:
        raise refuse("training.global_batch", f"{sc.training.global_batch} is not a multiple of microbatch*dp = "
                     f"{per_step}; {framework} needs a whole number of gradient-accumulation steps")
    if m.heads % pl.tp or m.kv_heads % pl.tp:
        raise refuse("plan.tp", f"tp = {pl.tp} must divide model.heads = {m.heads} and model.kv_heads = {m.kv_heads}")
    uneven = framework in UNEVEN_PIPELINE  # its own split checks (megatron.stage_split, torchtitan._export_split)
    if m.layers % pl.pp and not uneven:
        raise refuse("plan.pp", f"pp = {pl.pp} does not divide model.layers = {m.layers}")
    if pl.interleave > 1:
        if pl.pp == 1:
            raise refuse("plan.interleave", "interleaved (virtual) pipeline stages need pp > 1")
        if m.layers % (pl.pp * pl.interleave) and not uneven:
            raise refuse("plan.interleave", f"interleave = {pl.interleave} does not divide the {m.layers // pl.pp} "
                         "layers per pipeline stage")
    if pl.zero_group is not None and (pl.zero_group > dp or dp % pl.zero_group):
        raise refuse("plan.zero_group", f"zero_group = {pl.zero_group} must divide dp = {dp}")
    for key in ("tp_collective", "dp_collective"):
        if getattr(pl, key) != "nccl":
            raise refuse(f"plan.{key}", f"{getattr(pl, key)!r} is a collective-algorithm choice (an NCCL_ALGO "
                         f"environment setting), not a {framework} argument; use 'nccl' to export")
    gpn = cl.gpus_per_node or int(scenario_columns(sc)["gpus_per_node"])
    nodes = max(1, cl.gpus // gpn)
    return {"dp": dp, "grad_accum": sc.training.global_batch // per_step, "nodes": nodes,
            "gpus_per_node": min(gpn, cl.gpus)}


def kernels(sc: Scenario, framework: str) -> None:
    """Refuse an attention kernel, eager elementwise ops or an eager loss that the framework's launch does not run
    (:data:`KERNELS`): the plan would be estimated with kernels the job never uses."""
    for key, allowed in KERNELS[framework].items():
        value = getattr(sc.training, key)
        if value not in allowed:
            raise refuse(f"training.{key}", f"{value}: {KERNELS_RUN[framework]}; allowed: {', '.join(allowed)}")


def fsdp_overlap(framework: str) -> float | None:
    """``plan.fsdp_overlap`` of the framework's ZeRO-3, for export and import alike: 1 where it prefetches every
    gather (Megatron-FSDP, torchtitan's FSDP2: :func:`cosearch._cells.prefetching_fsdp`), else None (the
    profile's overlap, fitted on DeepSpeed ZeRO-3)."""
    return 1.0 if prefetching_fsdp(FSDP.get(framework, ""), framework) else None


def zero3_overlap(sc: Scenario, framework: str) -> None:
    """Refuse a ZeRO-3 plan whose ``plan.fsdp_overlap`` is not the framework's (:func:`fsdp_overlap`): its
    step would be estimated with more or less of the gathers hidden than the job hides. Exporters call it after
    their own checks, so a plan whose sharding cannot run at all is refused for that first."""
    pl, want = sc.plan, fsdp_overlap(framework)
    if pl.zero < 3 or pl.fsdp_overlap == want:
        return
    if want is None:
        raise refuse("plan.fsdp_overlap", f"{pl.fsdp_overlap:g}: {framework}'s ZeRO-3 runs at the profile's overlap "
                     "(fitted on DeepSpeed ZeRO-3 and FSDP1); leave it unset to export")
    got = "unset (the profile's)" if pl.fsdp_overlap is None else f"{pl.fsdp_overlap:g}"
    raise refuse("plan.fsdp_overlap", f"{got}: {framework}'s ZeRO-3 ({FSDP[framework]}) prefetches every gather "
                 f"behind compute; set {want:g} to export")


def megatron_core_schedule(sc: Scenario, framework: str) -> None:
    """Refuse pipeline schedules Megatron-Core cannot run: its ``get_forward_backward_func``
    (megatron/core/pipeline_parallel/schedules.py) picks no pipelining, 1F1B or interleaved 1F1B."""
    pl = sc.plan
    if pl.pp > 1 and pl.schedule in ("zb-h1", "zb-v", "dualpipe"):
        where = {"dualpipe": "DeepSeek's own trainer (deepseek-ai/DualPipe)"}.get(
            pl.schedule, "the sail-sg/zero-bubble-pipeline-parallelism fork")
        raise refuse("plan.schedule", f"{pl.schedule}: {framework}'s pipeline schedules (Megatron-Core "
                     f"schedules.py) are 1F1B and interleaved 1F1B only; {pl.schedule} runs in {where}")


def hybrid(sc: Scenario, dp: int) -> int | None:
    """Sharding-group size when the plan shards over a subgroup of its dp x cp ranks (hybrid sharding), else None.

    The model shards over every data- and context-parallel rank unless ``plan.zero_group`` names a group of
    data-parallel ranks, replicated over the rest and over cp (cosearch.model.evaluate), so under context
    parallelism a stated group is hybrid even when it equals dp."""
    g = sc.plan.zero_group
    return None if g is None or g == dp * sc.plan.cp or sc.plan.zero == 0 else g


def model_stages(layers: int, pp: int, interleave: int, mtp: int) -> tuple[int, int, int]:
    """(fullest, first, last) layers per pipeline rank as the model evaluates them
    (:func:`cosearch.model.memory.stage_layers` on ``layers + mtp``: the last rank's count includes its MTP modules).
    The fullest is ceil(layers / (pp*v)) * v without MTP; that rank paces the pipeline. An uneven split takes one
    layer off the first rank (deficit 1), or off the first and the last (deficit 2 or more)."""
    return tuple(int(n) for n in stage_layers(layers + mtp, pp, interleave))  # type: ignore[return-value]


def shard_group(sc: Scenario, dp: int, framework: str) -> int | None:
    """:func:`hybrid`, refused under context parallelism for frameworks that fold cp into the sharding group:
    Megatron-Core's distributed-optimizer instances are slices of its dp-with-cp group, torchtitan's HSDP shards
    over dp_shard x cp, while the model's zero_group holds data-parallel ranks only."""
    g = hybrid(sc, dp)
    if g is not None and sc.plan.cp > 1:
        raise refuse("plan.zero_group", f"{g} with cp = {sc.plan.cp}: {framework}'s sharding groups include the "
                     f"context-parallel ranks, the model's zero_group is data-parallel ranks replicated over cp; leave "
                     f"it unset (shard over all dp x cp = {dp * sc.plan.cp}) or use cp 1")
    return g


def train_steps(sc: Scenario) -> int | None:
    """Optimizer steps covering ``training.tokens`` (rounded up), or None without a token budget."""
    if sc.training.tokens is None:
        return None
    per_step = sc.training.global_batch * sc.model.seq_len
    return int(-(-sc.training.tokens // per_step))
