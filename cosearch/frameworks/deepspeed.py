"""A DeepSpeed config JSON (``ds_config.json``).

Follows the keys documented at https://www.deepspeed.ai/docs/config-json/ (**DeepSpeed 0.16**):
``train_batch_size``, ``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``
(``train_batch_size = micro x accumulation x dp``), ``zero_optimization.stage``,
``zero_optimization.overlap_comm``, ``zero_optimization.contiguous_gradients``,
``zero_optimization.offload_optimizer.device`` / ``offload_param.device`` (``"cpu"``),
``bf16.enabled``, ``fp16.enabled``, ``activation_checkpointing.partition_activations`` /
``cpu_checkpointing`` (used by ``deepspeed.checkpointing`` when the model code checkpoints
whole layers).

Every key emitted here was checked (issue 15) against the DeepSpeed source, deepspeedai/DeepSpeed:
top-level and ``fp16``/``bf16`` keys in deepspeed/runtime/constants.py
(@088be892c7499b4f4925d6a31da1e399a19aec20), ``zero_optimization`` in
deepspeed/runtime/zero/config.py (DeepSpeedZeroConfig, @1b88ac366fc922254d56abda5cf6b1f266556d19),
``offload_optimizer``/``offload_param`` (``device``, ``pin_memory``) in
deepspeed/runtime/zero/offload_config.py (@1978617c691b2c992a17902975187ef8d61176fa),
``activation_checkpointing`` in deepspeed/runtime/activation_checkpointing/config.py (ACT_CHKPT_*).
The same lists are tests/test_export.py's DEEPSPEED_KEYS / DEEPSPEED_SUBKEYS.

DeepSpeed's config has no tensor, pipeline or context parallelism (Megatron-DeepSpeed and
Ulysses live in model code): plans with tp, pp or cp > 1 are refused, as are fp8 (Transformer
Engine lives in model code), selective recompute (model code), kernels other than the scenario
defaults and dropout (attention, fusion, cross_entropy: model code), hybrid sharding (``zero_group``:
MiCS/ZeRO++ are outside this export), ``plan.overlap_grad_reduce`` without ZeRO (stage 0
all-reduces after the backward: ``overlap_comm`` is a ZeRO setting), a ``plan.fsdp_overlap`` under
ZeRO-3 (it runs at the profile's overlap, fitted on it) and offloads other than optimizer (and
weights with ZeRO-3).
"""
from __future__ import annotations

import json
from typing import Any

from ..scenario import Scenario
from ._common import hybrid, layout, refuse, zero3_overlap

VERSION = "DeepSpeed 0.16 (config-json)"


def config(sc: Scenario) -> dict[str, Any]:
    pl, t = sc.plan, sc.training
    for key in ("tp", "pp", "cp"):
        if getattr(pl, key) > 1:
            raise refuse(f"plan.{key}", f"{key} = {getattr(pl, key)}: DeepSpeed's config has no tensor, pipeline or "
                         "context parallelism; export this plan to megatron or nemo")
    lay = layout(sc, "DeepSpeed")
    if t.precision == "fp8":
        raise refuse("training.precision", "fp8 is not a DeepSpeed config setting (Transformer Engine in model code)")
    if pl.recompute == "selective":
        raise refuse("plan.recompute", "selective recompute is model code, not a DeepSpeed config setting; use "
                     "none or full")
    if t.dropout:
        raise refuse("training.dropout", "dropout is model code, not a DeepSpeed config setting; use false")
    if pl.zero == 0 and pl.overlap_grad_reduce and lay["dp"] > 1:  # engine.allreduce_gradients: buffered fallback
        raise refuse("plan.overlap_grad_reduce", "true with zero 0: without ZeRO DeepSpeed all-reduces the gradients "
                     "after the backward (overlap_comm is a ZeRO setting); set false, or use zero >= 1")
    if hybrid(sc, lay["dp"]) is not None:
        raise refuse("plan.zero_group", "hybrid sharding is not mapped for DeepSpeed; ZeRO shards over all dp ranks")
    zero3_overlap(sc, "DeepSpeed")
    zero: dict[str, Any] = {"stage": pl.zero}
    if pl.zero >= 1:
        zero["overlap_comm"] = bool(pl.overlap_grad_reduce)
        zero["contiguous_gradients"] = True
    if pl.zero3_live_params is not None:
        if pl.zero != 3:
            raise refuse("plan.zero3_live_params", "a live-parameter cap needs zero 3")
        zero["stage3_max_live_parameters"] = int(pl.zero3_live_params)
    if pl.offload != "none":
        if pl.offload not in ("optimizer", "optimizer+weights"):
            raise refuse("plan.offload", f"{pl.offload!r}: only optimizer (and weights with zero 3) offload is mapped "
                         "for DeepSpeed")
        if pl.zero == 0:
            raise refuse("plan.offload", "DeepSpeed offloads the optimizer only with ZeRO (zero >= 1)")
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if pl.offload == "optimizer+weights":
            if pl.zero != 3:
                raise refuse("plan.offload", "DeepSpeed offloads weights (offload_param) only with zero 3")
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    out: dict[str, Any] = {
        "train_batch_size": t.global_batch,
        "train_micro_batch_size_per_gpu": pl.microbatch,
        "gradient_accumulation_steps": lay["grad_accum"],
        "zero_optimization": zero,
        "bf16": {"enabled": t.precision == "bf16"},
        "fp16": {"enabled": t.precision == "fp16"},
    }
    if pl.recompute == "full":
        out["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": False}
    return out


def export(sc: Scenario) -> str:
    return json.dumps(config(sc), indent=2) + "\n"
