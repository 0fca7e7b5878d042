"""Scenario files: the typed contract at the edge (YAML / dict in, validated pydantic models out).

A scenario names a model (or a preset), the training job, the cluster (a catalog GPU plus
overrides) and the parallel plan. :func:`scenario_columns` turns one into the numeric columns the
vectorized model takes.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Optional, get_args

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from . import _files, hardware, hf
from .cloud.provision import CloudSpec, derived_cluster
from ._numbers import Bool, Float, Int, ZeroStage, allowed_range
from .errors import CosearchError
from .model.burst import DEFAULT_INTERFERENCE
from .model.columns import CATEGORICAL_CODES, INPUT_COLUMNS
from .model.moe import DEFAULT_LOAD_IMBALANCE
from .presets import ARCH_FIELDS, moe_columns, preset


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


#: Upper bounds: far beyond any real job, small enough that every result stays finite.
MAX_DIM = 1 << 24          # hidden, ffn_hidden
MAX_COUNT = 10**8          # GPUs and parallel degrees
MAX_TOKENS = 1e16          # tokens to train (GPT-3: 3e11, Llama 3: 1.5e13)
MAX_LAYERS = 100_000       # model.layers


class ModelSpec(_Strict):
    """Transformer architecture (decoder-only)."""

    layers: Int = Field(gt=0, le=MAX_LAYERS)
    hidden: Int = Field(gt=0, le=MAX_DIM)
    heads: Int = Field(gt=0, le=1 << 20)
    kv_heads: Optional[Int] = Field(None, gt=0, le=1 << 20, description="grouped-query attention; default = heads")
    ffn_hidden: Optional[Int] = Field(None, gt=0, le=MAX_DIM, description="default 4 * hidden")
    gated_mlp: Bool = False
    vocab: Int = Field(gt=0, le=10**8)
    seq_len: Int = Field(gt=0, le=10**8)
    tied_embeddings: Bool = True
    # --- issue 13: mixture of experts and attention kind (cosearch.model.moe); absent = dense ---
    experts: Int = Field(0, ge=0, le=1 << 20, description="routed experts per MoE layer; 0 = dense")
    top_k: Optional[Int] = Field(None, gt=0, le=1 << 20, description="routed experts per token")
    expert_ffn_hidden: Optional[Int] = Field(None, gt=0, le=MAX_DIM, description="routed expert FFN width; default ffn_hidden")
    shared_experts: Int = Field(0, ge=0, le=1 << 10, description="always-active experts per MoE layer")
    shared_ffn_hidden: Optional[Int] = Field(None, gt=0, le=MAX_DIM, description="width of one shared expert; default expert_ffn_hidden")
    dense_layers: Int = Field(0, ge=0, le=100_000, description="leading layers with a dense MLP (DeepSeek first_k_dense_replace)")
    dense_ffn_hidden: Optional[Int] = Field(None, gt=0, le=MAX_DIM, description="MLP width of the dense layers; default ffn_hidden")
    attention: Optional[Literal["mha", "gqa", "mla"]] = Field(
        None, description="mha | gqa (kv_heads < heads) | mla (DeepSeek multi-head latent attention); default from kv_heads")
    q_lora_rank: Optional[Int] = Field(None, ge=0, le=MAX_DIM, description="MLA query compression rank; 0 = none")
    kv_lora_rank: Optional[Int] = Field(None, gt=0, le=MAX_DIM, description="MLA key-value compression rank")
    qk_rope_head_dim: Optional[Int] = Field(None, gt=0, le=1 << 16, description="MLA decoupled RoPE head dim")
    qk_nope_head_dim: Optional[Int] = Field(None, gt=0, le=1 << 16, description="MLA non-RoPE query/key head dim")
    v_head_dim: Optional[Int] = Field(None, gt=0, le=1 << 16, description="MLA value head dim")
    head_dim: Optional[Int] = Field(None, gt=0, le=1 << 16, description="attention head width; default hidden / heads")
    routed_nodes_limit: Optional[Int] = Field(None, gt=0, le=1 << 20, description="most nodes a token is routed to "
                                              "(DeepSeek-V3 node-limited routing: 4); takes effect with plan.moe_dispatcher: deepep")
    # --- multi-token prediction and sliding-window attention (cosearch.model.flops, cosearch.model.window) ---
    mtp_layers: Optional[Int] = Field(None, ge=0, le=64, description="multi-token-prediction modules (DeepSeek-V3: 1), "
                                      "each one layer of the model's kind plus a pass through the output head")
    sliding_window: Optional[Int] = Field(None, gt=0, le=10**8, description="keys a query attends to in a windowed "
                                          "layer, itself included (GPT-OSS: 128; Mistral 7B v0.1: 4096); default full attention")
    global_attention_every: Optional[Int] = Field(None, ge=1, le=100_000, description="with sliding_window: every N-th "
                                                  "layer keeps full attention (GPT-OSS: 2, Gemma 3: 6); default every layer windowed")

    @model_validator(mode="after")
    def _defaults(self) -> "ModelSpec":
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.ffn_hidden is None:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        return self


class TrainingSpec(_Strict):
    global_batch: Int = Field(gt=0, le=10**9, description="sequences per optimizer step")
    precision: Literal["bf16", "fp16", "fp8"] = "bf16"
    tokens: Optional[Float] = Field(None, ge=1, le=MAX_TOKENS, description="tokens to train, for time-to-train and cost")
    attention: Literal["flash", "standard", "triton", "flash2"] = Field(
        "flash", description="flash: the GPU's own fused kernel (FlashAttention-2 on Ampere, FlashAttention-3/cuDNN on "
        "Hopper on); standard: unfused; triton: the 2023 Triton flash-attention kernel; flash2: FlashAttention-2 or "
        "PyTorch SDPA's flash backend on any GPU (29 % of H100 peak forward + backward, measured: no Hopper path)")
    dropout: Bool = Field(False, description="dropout layers on (GPT-3-era recipes); modern LLM recipes train without")
    target_tokens: Optional[Float] = Field(
        None, ge=1, le=MAX_TOKENS, description="time-to-accuracy target: tokens a tiny batch needs to reach the target loss (E_min)")
    critical_batch_tokens: Optional[Float] = Field(
        None, ge=1, le=MAX_TOKENS, description="gradient noise scale B_noise in tokens (McCandlish et al. 2018); default infinite")
    optimizer_states: Literal["fp32", "bf16_moments", "bf16_master", "bf16"] = Field(
        "fp32", description="Adam's states beside the 16-bit weights and gradients: fp32 master + m + v (12 B per "
        "parameter, mixed precision), bf16_moments (fp32 master, 16-bit m and v: 8 B; DeepSeek-V3, Megatron's "
        "precision-aware optimizer), bf16_master (16-bit master copy, m and v: 6 B; NeMo 1.x's Apex "
        "distributed_fused_adam with optim.dtype bf16) or bf16 (no master copy, 16-bit m and v: 4 B; pure-bf16 "
        "PyTorch stacks)")
    fusion: Literal["fused", "eager"] = Field(
        "fused", description="fused: memory-bound ops fused (Transformer Engine / Megatron kernels, torch.compile, XLA); "
        "eager: PyTorch eager mode, one kernel per op (2.4x the memory-bound HBM traffic, measured on one H100)")
    cross_entropy: Literal["fused", "eager"] = Field(
        "fused", description="the loss's logits memory on the last stage: fused keeps the 16-bit logits and one fp32 "
        "softmax whose gradient is written in place (Megatron-Core's vocab-parallel cross-entropy, a compiled loss): "
        "6 B per logit; eager runs PyTorch's F.cross_entropy on fp32 logits (torchtitan 2024): the saved fp32 "
        "log-softmax with its fp32 gradient pair at the loss backward, 12 B per logit")
    moe_load_imbalance: Float = Field(DEFAULT_LOAD_IMBALANCE, ge=1.0, le=100.0, description="busiest expert-parallel "
                                      "rank's routed tokens over the mean (issue 13; default: Switch Transformer's capacity factor 1.25)")


GpuCount = Annotated[Int, Field(ge=0, le=MAX_COUNT)]


class ClusterSpec(_Strict):
    gpu: Optional[str] = None   # required unless ``inventory`` is given (parse_scenario checks the form)
    gpus: Optional[Int] = Field(None, gt=0, le=MAX_COUNT)
    inventory: Optional[dict[str, GpuCount]] = Field(
        None, description="GPUs of several types, {catalog id: count}, instead of gpu/gpus (cosearch.inventory)")
    gpus_per_node: Optional[Int] = Field(None, gt=0, le=1 << 20)
    nvlink_domain: Optional[Int] = Field(None, gt=0, le=MAX_COUNT)
    hbm_gib: Optional[Float] = Field(None, gt=0, le=1e6, description="HBM per GPU: the datasheet 'GB' number as sold, read as GiB (within ~0.5 % for HBM stacks)")
    hbm_tbps: Optional[Float] = Field(None, ge=1e-3, le=1e4)
    nvlink_gbps: Optional[Float] = Field(None, ge=1e-3, le=1e6)
    network_gbps: Optional[Float] = Field(None, ge=1e-3, le=1e6)
    power_w: Optional[Float] = Field(None, gt=0, le=1e6, description="rated board power per GPU, W (energy); default the catalog's")
    power_limit_w: Optional[Float] = Field(None, gt=0, le=1e6, description="enforced power limit per GPU, W "
                                           "(nvidia-smi -pl): below power_w the tensor-core clock drops (cube law, "
                                           "cosearch.model.power) and the GPU draws at most this; default none")
    price_usd_per_gpu_hour: Optional[Float] = Field(None, ge=0, le=1e4)
    expansion_gib: Float = Field(0.0, ge=0, le=1e8, description="memory expansion tier (host DRAM / CXL) per GPU, GiB; per node if pooled")
    expansion_gbps: Float = Field(0.0, ge=0, le=1e6, description="expansion tier bandwidth per GPU, GB/s (reads and writes together)")
    expansion_pooled: Bool = Field(False, description="expansion_gib is one pool shared by the node's GPUs")
    oversubscription: Float = Field(1.0, ge=1.0, le=1e3, description="leaf-to-spine oversubscription; 1 = full bisection")
    leaf_gpus: Optional[Int] = Field(None, gt=0, le=MAX_COUNT, description="GPUs under one leaf switch; default one NVLink domain")


class PlanSpec(_Strict):
    tp: Int = Field(1, gt=0, le=MAX_COUNT)
    pp: Int = Field(1, gt=0, le=MAX_COUNT)
    dp: Optional[Int] = Field(None, gt=0, le=MAX_COUNT, description="default gpus / (tp * pp * cp)")
    cp: Int = Field(1, gt=0, le=MAX_COUNT)
    microbatch: Int = Field(1, gt=0, le=10**9)
    interleave: Int = Field(1, gt=0, le=100_000)
    recompute: Literal["none", "selective", "op", "full"] = Field(
        "none", description="none; selective: Megatron's (the attention core, or with flash attention only the MLP "
                            "activation); op: torchtitan's per-op SAC (every second matmul of a block and every "
                            "elementwise op rerun, dense models only); full: the whole layer")
    sequence_parallel: Bool = False
    zero: ZeroStage = 0
    zero_group: Optional[Int] = Field(None, gt=0, le=MAX_COUNT, description="ZeRO/FSDP sharding group, data-parallel ranks (hybrid sharding); default dp x cp, every rank holding the same parameters")
    zero3_live_params: Optional[Float] = Field(None, gt=0, le=1e13, description="ZeRO-3 parameters gathered at once "
                                               "(DeepSpeed stage3_max_live_parameters, default 1e9 there); default: "
                                               "PyTorch FSDP, the current and the prefetched layer")
    fsdp_overlap: Optional[Float] = Field(None, ge=0, le=1, description="share of compute that can hide ZeRO-3/FSDP "
                                          "gathers and reduce-scatters; default the profile's, fitted on DeepSpeed "
                                          "2021 and PyTorch FSDP1 2023 runs (~0.03); 1: every transfer that fits "
                                          "under the compute is hidden (Megatron-FSDP, PyTorch FSDP2 prefetching)")
    recompute_early_stop: Bool = Field(False, description="with recompute full: the recomputed forward stops once "
                                       "every tensor the backward needs exists, so the dense MLP's last GEMM (fc2/w2) "
                                       "and its tensor-parallel reduction are not rerun (PyTorch >= 2.1 non-reentrant "
                                       "checkpoint over native layers, torchtitan; JAX remat; not eager Transformer Engine "
                                       "modules, which save after their GEMM). false: the whole layer reruns "
                                       "(Megatron-Core, DeepSpeed)")
    recompute_mla_up_proj: Bool = Field(False, description="model.attention mla only: free q, k and v after each "
                                        "layer's forward and rebuild them from the kept latents before its attention "
                                        "backward (Megatron-Core recompute_modules 'mla_up_proj'; with recompute none "
                                        "or selective, moot under full). Costs the up-projection GEMMs once more")
    overlap_grad_reduce: Bool = Field(True, description="reduce gradients during the last backward pass (DDP buckets)")
    fp8_param_gather: Bool = Field(False, description="training.precision fp8 with zero >= 1 only: weights held in fp8 "
                                   "(1 B, no 16-bit copy; the fp32 master stays with the optimizer) and all-gathered "
                                   "in fp8 by the distributed optimizer or FSDP (Megatron --fp8-param-gather, on in "
                                   "Megatron-Bridge's fp8 recipes but blockwise; torchtitan "
                                   "enable_fsdp_float8_all_gather). false: 16-bit weights plus an fp8 copy")
    tp_comm_overlap: Bool = Field(False, description="overlap tensor-parallel collectives with GEMMs "
                                  "(Megatron-Core/NeMo --tp-comm-overlap, Transformer Engine userbuffers)")
    tp_overlap_passes: Literal["all", "forward"] = Field(
        "all", description="with tp_comm_overlap, the passes whose collectives are hidden: all (Transformer Engine "
        "userbuffers overlap the forward and the backward GEMMs) or forward (PyTorch async TP under torch.compile, "
        "torchtitan: 'up to ~29% forward pass speedup and ~8% E2E speedup' for Llama 3 7B and 70B, PyTorch "
        "dev-discuss 2024; the backward's and a recomputed forward's collectives stay exposed)")
    offload: Literal["none", "optimizer", "optimizer+weights", "activations", "optimizer+activations", "all"] = Field(
        "none", description="what lives in the cluster's memory expansion tier")
    tp_collective: Literal["nccl", "ring", "tree", "hierarchical", "direct", "auto"] = "nccl"
    dp_collective: Literal["nccl", "ring", "tree", "hierarchical", "direct", "auto"] = "nccl"
    # heterogeneous inventories (cosearch.model.hetero): how the types combine, and how many of each the plan uses
    hetero: Literal["pipeline", "data"] = Field("pipeline", description="inventory only: stages (pipeline) or replicas (data) per type")
    gpus_by_type: Optional[dict[str, GpuCount]] = Field(None, description="inventory only: GPUs used per type; default all")
    # DeepPool (cosearch.model.burst): left out, the feature is absent and its metrics are not computed
    burst: Optional[Bool] = Field(None, description="burst parallelism: each block of layers on its own "
                                  "data-parallel width at the fixed global batch (DeepPool, MLSys'22); needs pp = 1")
    burst_block_layers: Int = Field(1, gt=0, le=100_000, description="layers per burst block (1: per layer, as DeepPool)")
    burst_amplification: Optional[Float] = Field(None, ge=1, le=1e6, description="DeepPool's amplification limit: "
                                                 "a block's GPU time at most this many times that on its narrowest width "
                                                 "(2.0 in DeepPool's planner); default: no limit, the fastest step")
    multiplex: Optional[Bool] = Field(None, description="run a low-priority background job in the idle GPU time")
    multiplex_interference: Float = Field(DEFAULT_INTERFERENCE, ge=0, le=1, description="share of the idle GPU time "
                                          "the background job loses (assumed default; docs/deeppool.md)")
    background_tokens_per_gpu_s: Optional[Float] = Field(None, gt=0, le=1e12, description="the background job's "
                                                         "standalone tokens/s per GPU; default: this model's compute rate")
    schedule: Optional[Literal["1f1b", "interleaved", "zb-h1", "zb-v", "dualpipe"]] = Field(
        None, description="pipeline schedule (cosearch.model.schedules); default 1f1b, or interleaved when "
        "interleave > 1; zb-v needs interleave 2, dualpipe an even pp and >= 2*pp micro-batches")
    # --- issue 13: expert parallelism (cosearch.model.moe) ---
    ep: Int = Field(1, gt=0, le=MAX_COUNT, description="expert parallel size (Megatron --expert-model-parallel-size)")
    etp: Optional[Int] = Field(None, gt=0, le=MAX_COUNT, description="expert tensor parallel size; default tp")
    capacity_factor: Optional[Float] = Field(None, gt=0, le=1e3, description="expert capacity over the mean load "
                                             "(tokens over it are dropped); default none = dropless")
    moe_a2a_overlap: Float = Field(0.0, ge=0.0, le=1.0, description="share of each compute phase that hides the all-to-all "
                                   "paired with it (0: none; 1: DualPipe / Megatron's 1F1B A2A overlap: a forward chunk's "
                                   "dispatch under another micro-batch's backward MLP, its combine under that backward attention, "
                                   "and the reverse; a hidden transfer still holds 20 of 132 SMs)")
    moe_dispatcher: Literal["alltoall", "deepep"] = Field(
        "alltoall", description="alltoall: Megatron-Core's all-to-all (every token copy sent); deepep: one network "
        "send per destination node, NVLink forwarding there (DeepEP, DeepSeek-V3 sec. 3.2.2)")
    moe_grouped_gemm: Literal["grouped", "per_expert"] = Field(
        "per_expert", description="per_expert: one GEMM launch per local expert, 25 us of host time each (Megatron-Core "
        "with Transformer Engine, the stack MoE plans export to); grouped: one launch for all local experts "
        "(DeepGEMM, torch._grouped_mm, CUTLASS grouped kernels)")
    moe_fp8_dispatch: Bool = Field(False, description="under fp8, dispatch token copies in fp8 (DeepSeek-V3's stack, "
                                   "sec. 3.3.2); false: 16-bit, as Megatron-Core sends them whatever the GEMM precision")


class Scenario(_Strict):
    model: ModelSpec
    training: TrainingSpec
    cluster: ClusterSpec
    plan: PlanSpec = PlanSpec()
    #: Rented instances (docs/cloud.md); when present, the cluster's GPU, count, node size, network
    #: and price come from the instance type (cosearch.cloud.provision.derived_cluster).
    cloud: Optional[CloudSpec] = None


HARDWARE_OVERRIDES = (
    "gpus_per_node", "nvlink_domain", "hbm_gib", "hbm_tbps", "nvlink_gbps", "network_gbps", "power_w",
    "price_usd_per_gpu_hour",
)


def _error_from_validation(err: ValidationError) -> CosearchError:
    first = err.errors()[0]
    loc = ".".join(str(x) for x in first["loc"] if not isinstance(x, int) or True)
    kind = first["type"]
    if kind == "extra_forbidden":
        section = ".".join(str(x) for x in first["loc"][:-1])
        allowed = _allowed_keys(first["loc"][:-1])
        return CosearchError(loc, f"unknown key; allowed in {section or 'the scenario'}: {', '.join(allowed)}")
    if kind == "missing":
        return CosearchError(loc, "required field is missing")
    msg = first["msg"].rstrip(".")
    got = first.get("input")
    got = f"{got!r}" if len(repr(got)) <= 60 else f"{repr(got)[:40]}... ({type(got).__name__})"
    rng = _field_range(first["loc"])
    if rng and kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        msg = "out of range"
    return CosearchError(loc, f"{msg} (got {got}{'; allowed: ' + rng if rng else ''})")


def _field_range(loc: tuple) -> str:
    """Allowed range of the scenario field at ``loc`` ('' when unknown or unbounded)."""
    try:
        model: Any = Scenario
        for part in loc[:-1]:
            ann = model.model_fields[str(part)].annotation
            model = next(c for c in (ann, *get_args(ann)) if isinstance(c, type) and issubclass(c, BaseModel))
        return allowed_range(model.model_fields[str(loc[-1])].metadata)
    except (KeyError, StopIteration, IndexError, AttributeError):
        return ""


def _allowed_keys(section: tuple) -> list[str]:
    model: type[BaseModel] = Scenario
    for part in section:
        ann = model.model_fields[str(part)].annotation
        for cand in (ann, *get_args(ann)):  # unwrap Optional[...]
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                model = cand
                break
    return list(model.model_fields)


class _CloudOnly(_Strict):
    cloud: CloudSpec


def _with_cloud_cluster(data: Mapping[str, Any]) -> dict[str, Any]:
    """Fill ``cluster`` from the ``cloud`` section (validated first, errors named cloud.*)."""
    try:
        spec = _CloudOnly.model_validate({"cloud": data["cloud"]}).cloud
    except ValidationError as err:
        raise _error_from_validation(err) from None
    cluster = data.get("cluster")
    if cluster is not None and not isinstance(cluster, Mapping):
        return dict(data)  # let validation name the problem
    return {**data, "cloud": spec.model_dump(exclude_none=True), "cluster": derived_cluster(spec, cluster)}


def parse_scenario(data: Any) -> Scenario:
    """Validate a dict (or an existing Scenario) into a :class:`Scenario`; one-line error otherwise."""
    if isinstance(data, Scenario):
        return data
    if not isinstance(data, Mapping):
        raise CosearchError("scenario", f"expected a mapping with model, training, cluster, plan; got {type(data).__name__}")
    if isinstance(data.get("model"), str):
        data = {**data, "model": preset(data["model"])}  # unknown name -> error naming `model`
    data = hf.expand(data)  # model: {hf_config: config.json, ...overrides} -> model fields (cosearch.hf)
    if isinstance(data.get("cloud"), Mapping):
        data = _with_cloud_cluster(data)
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as err:
        raise _error_from_validation(err) from None
    if sc.plan.fp8_param_gather and (sc.training.precision != "fp8" or sc.plan.zero < 1):
        why = (f"training.precision is {sc.training.precision}" if sc.training.precision != "fp8"
               else "plan.zero is 0 (fp8 weights are gathered by the distributed optimizer or FSDP)")
        raise CosearchError("plan.fp8_param_gather", f"needs training.precision fp8 and plan.zero >= 1; {why}; "
                            "allowed here: false")
    if sc.cluster.inventory is not None:
        check_inventory_scenario(sc)
        return sc
    if sc.cluster.gpu is None:
        raise CosearchError("cluster.gpu", "required field is missing (or give cluster.inventory)")
    if sc.cluster.gpus is None:
        raise CosearchError("cluster.gpus", "required field is missing")
    if sc.plan.gpus_by_type is not None:
        raise CosearchError("plan.gpus_by_type", "needs cluster.inventory (GPUs of several types)")
    hardware.gpu(sc.cluster.gpu)  # unknown id -> error naming cluster.gpu
    _check_moe(sc.model)
    if sc.plan.recompute_mla_up_proj and sc.model.attention != "mla":
        raise CosearchError("plan.recompute_mla_up_proj", "needs model.attention: mla (this model has no latent attention); "
                            "allowed here: false")
    return sc


def _check_moe(m: ModelSpec) -> None:
    """Consistency of the MoE / attention fields (issue 13), one-line errors naming the field."""
    if m.experts == 0:
        for key in ("top_k", "expert_ffn_hidden", "shared_ffn_hidden", "dense_ffn_hidden", "routed_nodes_limit"):
            if getattr(m, key) is not None:
                raise CosearchError(f"model.{key}", "needs model.experts > 0 (a mixture-of-experts model)")
        if m.shared_experts or m.dense_layers:
            key = "shared_experts" if m.shared_experts else "dense_layers"
            raise CosearchError(f"model.{key}", "needs model.experts > 0 (a mixture-of-experts model)")
    else:
        if m.top_k is None or m.top_k > m.experts:
            raise CosearchError("model.top_k", f"a MoE model needs 1 <= top_k <= experts ({m.experts}) (got {m.top_k})")
        if m.dense_layers >= m.layers:
            raise CosearchError("model.dense_layers", f"must be below model.layers ({m.layers}) (got {m.dense_layers})")
        # a width with nothing to apply it to would be ignored silently
        if m.shared_ffn_hidden is not None and not m.shared_experts:
            raise CosearchError("model.shared_ffn_hidden", "needs model.shared_experts > 0 (the width of a shared expert)")
        if m.dense_ffn_hidden is not None and not m.dense_layers:
            raise CosearchError("model.dense_ffn_hidden", "needs model.dense_layers > 0 (the MLP width of the leading "
                                "dense layers)")
    if m.global_attention_every is not None and m.sliding_window is None:
        raise CosearchError("model.global_attention_every", "needs model.sliding_window (the window of the other layers)")
    mla_keys = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    if m.attention == "mla":
        for key in mla_keys[1:]:
            if getattr(m, key) is None:
                raise CosearchError(f"model.{key}", "required with model.attention: mla")
        if m.head_dim is not None:
            raise CosearchError("model.head_dim", "not used with model.attention: mla (give qk_nope_head_dim, "
                                "qk_rope_head_dim, v_head_dim)")
    else:
        for key in mla_keys:
            if getattr(m, key) is not None:
                raise CosearchError(f"model.{key}", "needs model.attention: mla")
        if m.attention == "mha" and m.kv_heads != m.heads:
            raise CosearchError("model.attention", f"mha needs kv_heads == heads ({m.heads}) (got kv_heads "
                                f"{m.kv_heads}); use gqa")


def read_yaml(path: str | Path) -> Any:
    """Read a user YAML file safely (size, encoding, alias, depth caps: :mod:`cosearch._files`)."""
    return _files.read_yaml(path)


#: What the public loaders take as a file path. ``os.stat`` would also take bytes and an int (a file
#: descriptor: ``0`` is stdin) and fail on a NumPy integer with "embedded null character": refused.
PATH_TYPES = (str, os.PathLike)


def load_scenario(source: Any) -> Scenario:
    """A Scenario from a YAML file path (str or os.PathLike), a dict or a Scenario (anything else:
    :func:`parse_scenario`'s one-line error naming ``scenario``)."""
    if isinstance(source, PATH_TYPES):
        return parse_scenario(read_yaml(source))
    return parse_scenario(source)


def hardware_values(cluster: ClusterSpec, precision: str) -> dict[str, float]:
    """Catalog values of ``cluster.gpu`` with the cluster's overrides applied."""
    entry = hardware.gpu(cluster.gpu)
    values = {k: float(entry[k]) for k in HARDWARE_OVERRIDES}
    for key in HARDWARE_OVERRIDES:
        override = getattr(cluster, key)
        if override is not None:
            values[key] = float(override)
    node_scoped_nvlink = entry["nvlink_domain"] <= entry["gpus_per_node"]
    if cluster.gpus_per_node is not None and cluster.nvlink_domain is None and node_scoped_nvlink:
        values["nvlink_domain"] = float(cluster.gpus_per_node)  # NVLink ends at the node boundary
    values["peak_tflops"] = hardware.peak_tflops(cluster.gpu, precision)
    for key in hardware.EFFICIENCY_COLUMNS:  # NaN fp8 / legacy attention: bf16 x profile ratio / no cap
        values[key] = float(entry[key])
    return values


_SECTION_COLUMNS: dict[type, tuple[tuple[str, dict | None], ...]] = {}


def _section_columns(section_type: type) -> tuple[tuple[str, dict | None], ...]:
    """(field, word codes or None) of each field of a scenario section that is a model column, in field
    order: what :func:`scenario_columns` reads (worked out once per section class, not per call)."""
    found = _SECTION_COLUMNS.get(section_type)
    if found is None:
        found = _SECTION_COLUMNS[section_type] = tuple(
            (key, CATEGORICAL_CODES.get(key)) for key in section_type.model_fields if key in INPUT_COLUMNS)
    return found


def scenario_columns(sc: Scenario | Mapping[str, Any] | str | os.PathLike) -> dict[str, float]:
    """The numeric input columns of the vectorized model for one scenario (a Scenario, or what
    :func:`load_scenario` reads: a dict or a YAML path).

    Every training/plan/cluster field whose name is a model column is passed through (words via
    ``CATEGORICAL_CODES``, booleans as 0/1), so a new knob needs no change here; catalog values
    with the cluster's overrides are applied last.
    """
    sc = load_scenario(sc)  # a Scenario comes back as it is
    m, cl, pl = sc.model, sc.cluster, sc.plan
    cols: dict[str, float] = {k: getattr(m, k) for k in ARCH_FIELDS}
    cols.update(moe_columns(m.__dict__))  # MoE / MLA / MTP / window columns (absent: dense, full attention)
    for section in (sc.training, pl, cl):
        values = section.__dict__  # the fields: these sections hold only plain values
        for key, codes in _section_columns(type(section)):
            value = values[key]
            if value is not None:
                cols[key] = value if codes is None else codes[value]
    cols["tokens"] = sc.training.tokens if sc.training.tokens is not None else np.nan
    cols["gpus"] = cl.gpus
    cols["dp"] = pl.dp if pl.dp is not None else cl.gpus / (pl.tp * pl.pp * pl.cp)
    cols["zero_group"] = pl.zero_group if pl.zero_group is not None else np.nan
    cols["schedule"] = CATEGORICAL_CODES["schedule"][pl.schedule] if pl.schedule is not None else np.nan
    cols.update(hardware_values(cl, sc.training.precision))
    return {k: float(v) for k, v in cols.items()}


# --- heterogeneous inventories (issue 14; evaluated by cosearch.inventory / cosearch.model.hetero) ---

INVENTORY_EXAMPLE = "{h100-sxm: 64, a100-80gb: 128}"


def check_inventory_scenario(sc: Scenario) -> None:
    """One-line errors for an inventory scenario that cannot be read (after the schema passed)."""
    cl, pl = sc.cluster, sc.plan
    for key in ("gpu", "gpus"):
        if getattr(cl, key) is not None:
            raise CosearchError(f"cluster.{key}", "give either cluster.gpu and cluster.gpus or cluster.inventory, not both")
    if not cl.inventory:
        raise CosearchError("cluster.inventory", f"needs at least one GPU type with its count, e.g. {INVENTORY_EXAMPLE}")
    for name in cl.inventory:
        if name not in hardware.catalog():
            raise CosearchError("cluster.inventory", f"unknown GPU id {name!r}; allowed: {', '.join(sorted(hardware.catalog()))}")
    for key in HARDWARE_OVERRIDES:
        if getattr(cl, key) is not None:
            raise CosearchError(f"cluster.{key}", "overrides are per GPU type and not supported with cluster.inventory "
                                "(the catalog values of each type are used)")
    if sc.cloud is not None:
        raise CosearchError("cloud", "rented instances and cluster.inventory cannot be combined")
    for name, n in (pl.gpus_by_type or {}).items():
        if name not in cl.inventory:
            raise CosearchError(f"plan.gpus_by_type.{name}", f"not in cluster.inventory; allowed: {', '.join(cl.inventory)}")
        if n > cl.inventory[name]:
            raise CosearchError(f"plan.gpus_by_type.{name}", f"uses {n} GPUs but cluster.inventory has {cl.inventory[name]}")
    if sum(gpus_used(sc).values()) == 0:
        raise CosearchError("plan.gpus_by_type", "uses no GPU at all")


def gpus_used(sc: Scenario) -> dict[str, int]:
    """GPUs of each type the plan uses: ``plan.gpus_by_type``, the whole inventory for a type it omits."""
    given = sc.plan.gpus_by_type or {}
    return {name: int(given.get(name, n)) for name, n in sc.cluster.inventory.items()}
