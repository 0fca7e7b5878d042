"""A torchtitan job TOML (``torchtitan/train.py --job.config_file``).

Follows **torchtitan v0.1.0** ``torchtitan/config/job_config.py``:
``[parallelism]`` ``data_parallel_replicate_degree``, ``data_parallel_shard_degree``,
``fsdp_reshard_after_forward`` (``"default"``/``"never"``), ``tensor_parallel_degree``,
``enable_async_tensor_parallel`` (plan.tp_comm_overlap with tp_overlap_passes forward: async TP hides
the forward's collectives only), ``pipeline_parallel_degree``, ``pipeline_parallel_schedule``
(``1F1B`` / ``Interleaved1F1B`` / ``ZBVZeroBubble`` for plan.schedule zb-v; the names of PyTorch's
``torch.distributed.pipelining.schedules.get_schedule_class``: 1F1B, Interleaved1F1B, GPipe,
LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV), ``pipeline_parallel_layers_per_stage``,
``pipeline_parallel_microbatch_size``, ``context_parallel_degree``; ``[training]``
``local_batch_size``, ``global_batch_size``, ``seq_len``, ``steps``, ``mixed_precision_param``, ``compile``
(training.fusion fused, else eager); ``[activation_checkpoint] mode`` (``none``/``selective``/``full``; plan.recompute op is ``selective`` with
``selective_ac_option = "op"``, per-op SAC, and Megatron's selective is refused; full is
``plan.recompute_early_stop``: PyTorch's non-reentrant checkpoint stops the recompute early);
``[model] converters = ["float8"]`` with ``[float8]`` for fp8.

Names checked (issue 15) against pytorch/torchtitan torchtitan/config/job_config.py
@000204a4a8bf3d0f31adc44fc29855fbb6ea13d8 (the version the code search stores): ``Parallelism``
has every ``[parallelism]`` name above, ``fsdp_reshard_after_forward`` being
``Literal["default", "always", "never"]`` (``"always"`` reads back as zero 3); ``Training`` has
``local_batch_size``, ``global_batch_size``, ``seq_len``, ``steps``, ``mixed_precision_param``
(``"bfloat16"``/``"float32"``); ``ActivationCheckpoint.mode`` is ``Literal["selective", "full",
"none"]`` with ``selective_ac_option`` (``'int'`` or ``'op'``); ``Model.converters`` is a list and
``JobConfig.float8`` a ``Float8`` section with ``enable_fsdp_float8_all_gather``. That version
has no ``[quantize]`` section (fp8 is ``[float8]``, MX is ``[mx]``); later torchtitan trees move
configuration into torchtitan/config/configs.py and config/transform/quantization.py, which this
export does not follow.

Mapping of the data-parallel sharding: zero 0 -> DDP (replicate = dp); zero 2 -> FSDP2 with
``fsdp_reshard_after_forward = "never"`` (parameters stay gathered between forward and backward);
zero 3 -> FSDP2 (reshard after forward); ``zero_group`` -> HSDP (shard = zero_group, replicate =
dp / zero_group). Under pipeline parallelism FSDP2 is zero 1 both ways: PyTorch's pipelining keeps
a stage's parameters and gradients whole until its last micro-batch
(:func:`cosearch._cells.pipelined_zero`), so zero 1 exports as FSDP2 and zero 2 or 3 is refused.
Batches: without pipeline parallelism ``local_batch_size`` is the micro-batch and torchtitan
accumulates ``global / (local x dp)`` steps; with it ``local_batch_size`` is the per-replica batch
and ``pipeline_parallel_microbatch_size`` the micro-batch.

Refused: zero 1 without pipelining (torchtitan has no optimizer-only sharding), zero 2 or 3 with
it, fp16 (torchtitan trains in bf16 or fp32), tensor parallelism without sequence parallelism
(torchtitan's TP always shards norms over the sequence), the Triton attention kernel, dropout,
offload, schedule zb-h1 (PyTorch's zero-bubble schedules are multi-stage: InterleavedZeroBubble,
ZBVZeroBubble) and dualpipe (PyTorch has DualPipeV, the V-shaped
variant with one parameter copy, not DualPipe's two). The model architecture is torchtitan's
``[model] name/flavor``, not a TOML shape: the export states the shape in a comment.
"""
from __future__ import annotations

from typing import Any

from .._cells import pipelined_zero, tp_overlap_passes
from ..scenario import Scenario
from ..model.schedules import schedule_name
from ._common import hybrid, layout, refuse, train_steps

VERSION = "torchtitan v0.1.0"
#: cosearch schedule -> torchtitan ``pipeline_parallel_schedule``
_SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "zb-v": "ZBVZeroBubble"}


def sections(sc: Scenario) -> dict[str, dict[str, Any]]:
    lay = layout(sc, "torchtitan")
    m, t, pl = sc.model, sc.training, sc.plan
    dp = lay["dp"]
    if pl.zero == 1 and pl.pp == 1:
        raise refuse("plan.zero", "zero 1: without pipelining torchtitan has no optimizer-only sharding; use 0 (DDP), "
                     "2 or 3 (FSDP2)")
    if pl.zero >= 2 and pl.pp > 1:  # the plan would be estimated with a sharding torchtitan does not keep
        raise refuse("plan.zero", f"zero {pl.zero}: under pipelining torchtitan's FSDP2 keeps a stage's parameters and "
                     "gradients whole from its first micro-batch to its last (zero 1's memory); use 1 (FSDP2) or 0")
    if t.precision == "fp16":
        raise refuse("training.precision", "fp16: torchtitan's mixed_precision_param is bfloat16 or float32")
    if pl.tp > 1 and not pl.sequence_parallel:
        raise refuse("plan.sequence_parallel", "torchtitan's tensor parallelism always runs sequence parallel; set "
                     "sequence_parallel: true")
    if t.attention == "triton":
        raise refuse("training.attention", "torchtitan uses PyTorch SDPA / flex attention, not the Triton kernel")
    if t.dropout:
        raise refuse("training.dropout", "torchtitan's models train without dropout")
    if pl.offload != "none":
        raise refuse("plan.offload", f"{pl.offload!r}: no torchtitan offload setting is mapped; use 'none'")
    if pl.tp_comm_overlap and pl.tp > 1 and t.fusion == "eager":  # the plan would be estimated with an overlap it never gets
        raise refuse("plan.tp_comm_overlap", "torchtitan's async TP (enable_async_tensor_parallel) runs only under "
                     "torch.compile; with training.fusion: eager use false, or set fusion: fused")
    # compile = true compiles the loss with the model: the loss runs as the fusion does (fused | eager both ways)
    if t.cross_entropy != t.fusion:  # the plan's memory would count a loss torchtitan does not run
        raise refuse("training.cross_entropy", f"{t.cross_entropy}: torchtitan's loss runs {t.fusion} with "
                     f"training.fusion: {t.fusion} (torch.compile compiles the loss with the model); set {t.fusion}")
    schedule = _SCHEDULES.get(schedule_name(pl.schedule, pl.interleave)) if pl.pp > 1 else None
    if pl.pp > 1 and schedule is None:
        raise refuse("plan.schedule", {
            "zb-h1": "zb-h1: PyTorch's zero-bubble schedules are multi-stage (InterleavedZeroBubble, ZBVZeroBubble); "
                     "use zb-v with interleave 2",
            "dualpipe": "dualpipe: torchtitan/PyTorch run DualPipeV (one parameter copy, V-shaped), not DualPipe's "
                        "two parameter copies"}[pl.schedule])
    group = hybrid(sc, dp)
    par: dict[str, Any] = {}
    if pl.zero == 0:
        par.update(data_parallel_replicate_degree=dp, data_parallel_shard_degree=1)
    else:
        shard = group or dp
        par.update(data_parallel_replicate_degree=dp // shard, data_parallel_shard_degree=shard,
                   fsdp_reshard_after_forward="never" if pl.zero == 2 else "default")
    par.update(tensor_parallel_degree=pl.tp, enable_async_tensor_parallel=bool(pl.tp_comm_overlap and pl.tp > 1),
               pipeline_parallel_degree=pl.pp, context_parallel_degree=pl.cp)
    # training.fusion: torch.compile fuses the memory-bound ops (torchtitan's default is eager)
    training: dict[str, Any] = {"global_batch_size": t.global_batch, "seq_len": m.seq_len,
                                "mixed_precision_param": "bfloat16", "compile": t.fusion == "fused"}
    if pl.pp > 1:
        par["pipeline_parallel_schedule"] = schedule
        par["pipeline_parallel_layers_per_stage"] = m.layers // (pl.pp * pl.interleave)
        par["pipeline_parallel_microbatch_size"] = pl.microbatch
        training["local_batch_size"] = t.global_batch // dp
    else:
        training["local_batch_size"] = pl.microbatch
    steps = train_steps(sc)
    if steps is not None:
        training["steps"] = steps
    if pl.recompute == "selective":
        raise refuse("plan.recompute", "torchtitan has no Megatron-style selective recompute (attention core only); "
                     "use op (its per-op SAC), none or full")
    ac: dict[str, Any] = {"mode": "selective" if pl.recompute == "op" else pl.recompute}
    if pl.recompute == "op":
        ac["selective_ac_option"] = "op"
    out = {"parallelism": par, "training": training, "activation_checkpoint": ac}
    if t.precision == "fp8":
        out["model"] = {"converters": ["float8"]}
        out["float8"] = {"enable_fsdp_float8_all_gather": pl.zero >= 1}
    return out


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return str(v)


def export(sc: Scenario) -> str:
    m = sc.model
    lines = [f"# {VERSION} job config: cosearch export of {sc.cluster.gpus} x {sc.cluster.gpu}",
             f"# model shape (set [model] name/flavor to match): layers={m.layers} hidden={m.hidden} heads={m.heads} "
             f"kv_heads={m.kv_heads} ffn_hidden={m.ffn_hidden} gated_mlp={m.gated_mlp} vocab={m.vocab} "
             f"tied_embeddings={m.tied_embeddings}"]
    for name, body in sections(sc).items():
        lines += ["", f"[{name}]"] + [f"{k} = {_value(v)}" for k, v in body.items()]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- plan in
def parse_toml(text: str, model: Any, cluster: dict[str, Any]) -> Scenario:
    """A :class:`Scenario` from a torchtitan job TOML (the inverse of :func:`export`).

    torchtitan names its architecture (``[model] name/flavor``) instead of writing the shape,
    so ``model`` (a cosearch preset name or a model mapping) is required, as is the cluster
    (``gpu`` and ``gpus``). torchtitan defaults apply to absent keys (degrees 1, shard degree -1 =
    the remaining GPUs, global batch = local batch x dp, activation checkpointing selective).
    """
    import tomllib

    from ..errors import CosearchError
    from ..presets import preset
    from ..scenario import parse_scenario

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise CosearchError("--torchtitan-toml", f"malformed TOML: {err}") from None
    m = preset(model) if isinstance(model, str) else dict(model)
    if "gpu" not in cluster or "gpus" not in cluster:
        raise CosearchError("--gpus" if "gpu" in cluster else "--gpu", "required with --torchtitan-toml (the TOML "
                            "does not name the GPU model or the world size)")
    par, tr = doc.get("parallelism", {}), doc.get("training", {})
    ac = doc.get("activation_checkpoint", {})
    gpus = int(cluster["gpus"])
    tp, pp, cp = (int(par.get(k, 1)) for k in ("tensor_parallel_degree", "pipeline_parallel_degree",
                                                "context_parallel_degree"))
    rep = int(par.get("data_parallel_replicate_degree", 1))
    shard = int(par.get("data_parallel_shard_degree", -1))
    if shard == -1:
        shard = gpus // (rep * tp * pp * cp)
    dp = rep * shard
    if dp * tp * pp * cp != gpus:
        raise CosearchError("[parallelism]", f"degrees multiply to {dp * tp * pp * cp}, cluster has {gpus} GPUs")
    if shard == 1:
        zero, group = 0, None
    else:  # under pipelining FSDP2 keeps parameters and gradients whole through the step (_cells.pipelined_zero)
        zero = 2 if par.get("fsdp_reshard_after_forward", "default") == "never" else 3
        zero = pipelined_zero(zero, pp, "torchtitan")
        group = shard if rep > 1 else None
    local = int(tr.get("local_batch_size", 8))
    gb = int(tr.get("global_batch_size", -1))
    gb = local * dp if gb == -1 else gb
    interleave = 1
    if pp > 1:
        micro = int(par.get("pipeline_parallel_microbatch_size", 1))
        lps = par.get("pipeline_parallel_layers_per_stage")
        if lps is not None:
            if m["layers"] % (pp * int(lps)):
                raise CosearchError("pipeline_parallel_layers_per_stage", f"{lps} does not divide the layers per rank")
            interleave = m["layers"] // (pp * int(lps))
        elif str(par.get("pipeline_parallel_schedule", "1F1B")) in ("Interleaved1F1B", "ZBVZeroBubble"):
            raise CosearchError("pipeline_parallel_layers_per_stage", "required with an interleaved schedule")
    else:
        micro = local
    converters = doc.get("model", {}).get("converters", [])
    if str(tr.get("mixed_precision_param", "bfloat16")) != "bfloat16":
        raise CosearchError("mixed_precision_param", "cosearch models bf16 (and fp8) torchtitan training, not fp32")
    precision = "fp8" if "float8" in converters else "bf16"
    mode = str(ac.get("mode", "selective"))
    if mode not in ("none", "selective", "full"):
        raise CosearchError("activation_checkpoint.mode", f"expects none, selective or full (got {mode!r})")
    if mode == "selective":  # torchtitan's default option "2" checkpoints every second layer: not a modelled mode
        option = str(ac.get("selective_ac_option", "2"))
        if option != "op":
            raise CosearchError("activation_checkpoint.selective_ac_option",
                                f"expects op (per-op SAC); every-n-layer checkpointing ({option!r}) is not modelled")
        mode = "op"
    m["seq_len"] = int(tr.get("seq_len", m.get("seq_len", 2048)))
    compiled = tr.get("compile", False) is True
    # torch.compile fuses the memory-bound ops and, with the model, the loss (torchtitan's compiled loss_fn)
    training: dict[str, Any] = {"global_batch": gb, "precision": precision, "fusion": "fused" if compiled else "eager",
                                "cross_entropy": "fused" if compiled else "eager"}
    if "steps" in tr:
        training["tokens"] = float(int(tr["steps"]) * gb * m["seq_len"])
    sched_in = {v: k for k, v in _SCHEDULES.items()}.get(str(par.get("pipeline_parallel_schedule", "1F1B")))
    # async TP is micro-pipelined by the compiler: without compile the flag has no effect
    overlap = bool(par.get("enable_async_tensor_parallel", False)) and training["fusion"] == "fused"
    plan = {"tp": tp, "pp": pp, "cp": cp, "microbatch": micro, "interleave": interleave, "recompute": mode,
            "schedule": "zb-v" if pp > 1 and sched_in == "zb-v" else None,
            "sequence_parallel": tp > 1, "zero": zero, "zero_group": group,
            "tp_comm_overlap": overlap,
            "tp_overlap_passes": tp_overlap_passes("torchtitan") if overlap else "all",
            "recompute_early_stop": mode == "full"}
    return parse_scenario({"model": m, "training": training, "cluster": dict(cluster), "plan": plan})
