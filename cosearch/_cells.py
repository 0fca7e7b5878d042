"""Cells of the published-runs CSVs (experiments/data/validation): numbers, yes/no, recompute modes,
and the FSDP implementation a row names.

One reader for the dense (:mod:`cosearch.validation`) and mixture-of-experts
(:mod:`cosearch.validation_moe`) rows.
"""
from __future__ import annotations

import math
import re
from typing import Any

from .errors import CosearchError


def _num(x: Any) -> float | None:
    """A CSV cell as a float, or None when empty."""
    if x is None or (isinstance(x, str) and not x.strip()):
        return None
    v = float(x)
    return None if math.isnan(v) else v


def _stated(text: Any) -> bool | None:
    """A yes/no cell (``yes (yaml)``, ``no``, 1, 0) as a bool; None when the source does not say."""
    if isinstance(text, str):
        t = text.strip().lower()
        if t.startswith(("yes", "true", "on")):
            return True
        if t.startswith(("no", "false", "off")):
            return False
        return None
    v = _num(text)
    return None if v is None else bool(v)


#: Words of a "selective (...)" cell for the modules ``plan.recompute: selective`` reruns: the activation
#: function (Megatron-Core recompute_modules moe_act, mlp) and the attention core (core_attn)
_SELECTIVE_MODULES = ("act", "mlp", "core_attn", "swiglu")


def _recompute(text: Any, source: str) -> str:
    """A recompute cell as none | selective | op | full; unstated: full for the Megatron-LM 2019-2021 example
    scripts (sources S4, S5), which checkpoint every layer, else none. torchtitan's per-op SAC ("per-op",
    "selective op") is op. A selective cell that lists only modules outside ``selective`` (norms, MLA
    up-projections: :func:`recomputes_mla_up_proj`) is none."""
    if isinstance(text, str):
        t = text.lower()
        if t.startswith("full"):
            return "full"
        if "per-op" in t or "selective op" in t or "op-level" in t:
            return "op"
        if "selective" in t:
            listed = t.partition("(")[2]
            if listed and not any(m in listed for m in _SELECTIVE_MODULES):
                return "none"
            return "selective"
        if t.startswith("none"):
            return "none"
    return "full" if source in {"S4", "S5"} else "none"


def recomputes_mla_up_proj(text: Any) -> bool:
    """Whether a recompute cell names MLA's up-projections (Megatron-Core ``mla_up_proj``; DeepSeek-V3's
    report, sec. 3.2.3: "MLA up-projection"): ``plan.recompute_mla_up_proj``."""
    t = text.lower() if isinstance(text, str) else ""
    return "mla" in t and ("up_proj" in t or "up-proj" in t or "up proj" in t)


def prefetching_fsdp(sharding: str, framework: str) -> bool:
    """Whether a row's ZeRO-3 implementation prefetches: Megatron-FSDP (Megatron-Core docs: parameter
    all-gathers and gradient reduce-scatters overlapped with compute, double-buffered), PyTorch FSDP2
    (``fully_shard``: implicit forward/backward prefetch of the next module's all-gather; the FSDP of
    torchtitan) and JAX/XLA sharding (MaxText, Pax: XLA's latency-hiding scheduler runs the collectives
    of FSDP asynchronously, ``--xla_gpu_enable_latency_hiding_scheduler`` in MaxText's GPU recipes) take
    ``plan.fsdp_overlap`` 1; DeepSpeed ZeRO-3 (2021) and FSDP1 (llm-foundry, 2023) keep the profile's
    overlap, which was fitted on them. A fact of the stack, not of the row."""
    s, f = sharding.lower(), framework.lower()
    return ("megatron-fsdp" in s or "fsdp2" in s or "fully_shard" in s or "torchtitan" in f
            or any(k in f for k in ("jax", "maxtext", "xla", "paxml", "pax ")))


def recompute_stops_early(framework: str) -> bool:
    """Whether a row's full recompute stops once the backward's tensors exist (``plan.recompute_early_stop``):
    torchtitan (PyTorch's non-reentrant ``checkpoint``, early stop by default since PyTorch 2.1, PRs #96783 and
    #96866; under torch.compile the partitioner recomputes only what the backward reads) and JAX stacks
    (``jax.checkpoint``: the recomputed forward is dead-code-eliminated to what the backward uses). Megatron-LM/
    Core, NeMo and DeepSpeed rerun the whole layer with their own reentrant checkpoint function; llm-foundry's
    2023 tables predate PyTorch 2.1. A fact of the stack, not of the row."""
    f = framework.lower()
    return "torchtitan" in f or any(k in f for k in ("jax", "maxtext", "paxml", "pax ", "levanter"))


def names_async_tp(framework: str) -> bool:
    """Whether a framework cell names PyTorch's async tensor parallelism ("async TP", ``async_tp``)."""
    f = framework.lower()
    return any(k in f for k in ("async tp", "async_tp", "async-tp"))


def tp_overlap_passes(framework: str) -> str:
    """``plan.tp_overlap_passes`` of a stack's tensor-parallel overlap: PyTorch's async TP (torchtitan's
    ``--parallelism.enable_async_tensor_parallel``, micro-pipelined all-gather/reduce-scatter matmuls) hides the
    forward pass's collectives only; Transformer Engine's userbuffers (Megatron-Core, NeMo) hide every pass's. A
    fact of the stack, not of the row; used by the validation and by the exporters (cosearch.frameworks)."""
    f = framework.lower()
    pytorch_async = "torchtitan" in f or names_async_tp(f)
    return "forward" if pytorch_async and not megatron_core_stack(f) else "all"


def stack_training_facts(sharding: str, framework: str, legacy: bool = False) -> dict[str, Any]:
    """The training fields a row's stack fixes, for dense and MoE rows alike: the attention kernel
    (:func:`attention_kernel`), the optimizer states' precision (:func:`optimizer_states`) and eager or fused
    elementwise kernels (:func:`fusion_of`)."""
    return {"attention": attention_kernel(framework, legacy), "optimizer_states": optimizer_states(sharding, framework),
            "fusion": fusion_of(framework), "cross_entropy": cross_entropy_of(framework)}


def cross_entropy_of(framework: str) -> str:
    """``training.cross_entropy`` of a row's stack: eager for torchtitan of 2024, whose Llama returns
    ``self.output(h).float()`` and whose train.py calls ``F.cross_entropy`` outside torch.compile (which it applied
    per TransformerBlock only); fused otherwise (Megatron-Core's vocab-parallel cross-entropy; later torchtitan
    compiles the loss with the model, and its June 2025 H200 table's memory agrees with the fused count). A fact of
    the stack, not of the row."""
    f = framework.lower()
    return "eager" if "torchtitan" in f and "2024" in f else "fused"


def stack_plan_facts(sharding: str, framework: str, zero: int) -> dict[str, Any]:
    """The plan fields a row's stack fixes, for dense and MoE rows alike: ``fsdp_overlap`` 1 for a prefetching
    ZeRO-3 (:func:`prefetching_fsdp`), ``recompute_early_stop`` where a full recompute stops early
    (:func:`recompute_stops_early`); absent otherwise (the model's defaults)."""
    facts: dict[str, Any] = {}
    if zero == 3 and prefetching_fsdp(sharding, framework):
        facts["fsdp_overlap"] = 1.0
    if recompute_stops_early(framework):
        facts["recompute_early_stop"] = True
    return facts


#: NeMo Framework containers (YY.MM, inclusive) whose launcher switched Transformer Engine's cuDNN attention
#: off, so TE ran the flash-attn package (FlashAttention-2) on Hopper although TE >= 1.2 prefers cuDNN on sm90
#: (TransformerEngine PR #497). NVIDIA/NeMo-Framework-Launcher launcher_scripts/conf/config.yaml @01d0773
#: pins ``nvcr.io/nvidia/nemo:24.03.01.framework`` with ``NVTE_FUSED_ATTN: 0  # Disable cudnn FA until we've
#: tested it more`` (its 23.11 version @9f94615 does not set it); launcher PRs #384 "(1) Enable cuDNN FA"
#: (opened 2024-07-15, approved 2024-08-06) and #422 "enable fused attention" (approved 2024-08-29) turned it
#: back on, so the 24.05 and 24.07 containers (TE 1.6 / 1.8, NeMo's software component table) fall inside
#: too: that end is inferred from the PR dates, not from a config pinned to those containers.
NEMO_LAUNCHER_FA2_RELEASES = ((24, 3), (24, 7))


#: First PyTorch release whose SDPA picks cuDNN attention by default on Hopper/Blackwell: its
#: ``check_prefer_cudnn_attention`` (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, in 2.10) prefers cuDNN on
#: sm90/sm100 when the cuDNN is newer than 9.15 (the guard pytorch#138522 left after 2.5's cuDNN bugs), and 2.11's
#: wheels bundle one (huggingface/transformers#48163, 2026-08). Measured on the lent H100 with torch 2.11.0+cu130 and
#: cuDNN 9.19 (experiments/gpu/sdpa_default_backend.py): the default call is cuDNN, 500 TFLOP/s forward + backward on
#: Llama 3 8B's attention at 8,192 tokens, against 281 for SDPA's FlashAttention-2 forced (the model: 480 and 282).
SDPA_CUDNN_FROM = (2, 11)


def sdpa_attention(torch_version: str | None) -> str:
    """``training.attention`` of PyTorch's ``scaled_dot_product_attention`` under ``torch_version`` ("2.6.0",
    "2.11"; None: a current release): ``flash`` (the GPU's own fused kernel: cuDNN on Hopper/Blackwell, the one
    FlashAttention-2 is on Ampere) from :data:`SDPA_CUDNN_FROM` on, FlashAttention-2's rate (``flash2``) before."""
    if torch_version is None:
        return "flash"
    parts = str(torch_version).split("+")[0].split(".")
    try:
        major, minor = int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        raise CosearchError("--torch-version", f"expects a PyTorch version such as 2.6 or 2.11.0 (got {torch_version!r})"
                            ) from None
    return "flash" if (major, minor) >= SDPA_CUDNN_FROM else "flash2"


#: A framework cell that states Transformer Engine's cuDNN attention setting (``NVTE_FUSED_ATTN=0`` or ``=1``): off, TE
#: runs the flash-attn package, FlashAttention-2 on Hopper (TE's attention backend selection; NVIDIA's dgxc-benchmarking
#: Nemotron-4 340B and GPT-3 175B recipes of 2024 export it in their configure.sh); on, cuDNN whatever the container.
_CUDNN_ATTENTION = re.compile(r"nvte_fused_attn\s*=\s*([01])\b")


def attention_kernel(framework: str, legacy: bool) -> str:
    """``training.attention`` of a row's stack: unfused for the pre-2022 Megatron-LM runs (``legacy``), the 2023
    Triton kernel where the framework names Triton (llm-foundry), FlashAttention-2's rate ("flash2") for PyTorch
    FlexAttention (a Triton template: "90 % of FlashAttention2's performance in the forward pass and 85 % in the
    backward", PyTorch blog "FlexAttention", 2024-08-07), for PyTorch's ``scaled_dot_product_attention``
    ("SDPA": its flash backend is FlashAttention-2, and on H100 it does not pick the cuDNN backend:
    pytorch/pytorch#142132, Dec 2024, native SDPA 329 vs cuDNN 631 TFLOP/s at head_dim 128, "expected, see
    #141133"; every SDPA row predates PyTorch 2.11, :func:`sdpa_attention`), for NeMo containers run with cuDNN attention switched off
    (:data:`NEMO_LAUNCHER_FA2_RELEASES`) unless the cell states it on, and where the cell states it off
    (:data:`_CUDNN_ATTENTION`), else the GPU's own fused kernel."""
    f = framework.lower()
    if legacy:
        return "standard"
    stated = _CUDNN_ATTENTION.search(f)
    if "flexattention" in f or "flex attention" in f or "sdpa" in f or (stated and stated.group(1) == "0"):
        return "flash2"
    release = container_release(f)
    first, last = NEMO_LAUNCHER_FA2_RELEASES
    if "nemo" in f and release is not None and first <= release <= last and not stated:
        return "flash2"
    return "triton" if "triton" in f else "flash"


def fusion_of(framework: str) -> str:
    """``training.fusion`` of a row's stack: ``eager`` where the framework cell says the PyTorch model ran
    eager (torchtitan's tables state eager vs torch.compile), else ``fused`` (Transformer Engine / Megatron
    fused kernels, torch.compile, XLA). A fact of the stated stack, not of the row."""
    return "eager" if re.search(r"\beager\b", framework.lower()) else "fused"


def optimizer_states(sharding: str, framework: str) -> str:
    """``training.optimizer_states`` of a row: "bf16_master" where its sharding cell names Apex's
    ``distributed_fused_adam`` (NeMo 1.x) with a bf16 state (``optim.dtype: bf16``: master copy, m and v all in
    bf16), "bf16_moments" where it states 16-bit optimizer states or moments otherwise (Megatron's
    precision-aware optimizer keeps an fp32 master) and for DeepSeek's HAI-LLM (DeepSeek-V3 tracks
    Adam's moments in BF16, arXiv 2412.19437 sec. 3.3.3), "bf16" for NeMo
    AutoModel (its MoE models are created in bf16 and torch.optim.Adam keeps its states in the parameters'
    dtype: ``initialize_weights(dtype=torch.bfloat16)``, ``cast_model_to_dtype``), else "fp32" (fp32 master,
    m and v). A fact of the stack or of the stated cell, not of the row's speed."""
    s, f = sharding.lower(), framework.lower()
    if "automodel" in f:
        return "bf16"
    if "distributed_fused_adam" in s and "bf16" in s:  # apex/contrib/optimizers/distributed_fused_adam.py
        return "bf16_master"
    if "bf16 optimizer state" in s or "bf16 moment" in s or "hai-llm" in f:  # HAI-LLM: arXiv 2412.19437 sec. 3.3.3
        return "bf16_moments"
    return "fp32"


def zero_stage(sharding: str, megatron_core: bool) -> int:
    """The ZeRO stage a ``dp_sharding`` cell names: an explicit stage ("ZeRO-1", "zero stage 2"), FSDP
    (FULL_SHARD, FSDP2 ``fully_shard``, HYBRID_SHARD/HSDP: 3; SHARD_GRAD_OP: 2), Megatron's distributed
    optimizer (1), plain DDP (0); unstated: Megatron-Core/NeMo's default, the distributed optimizer (1),
    else 0."""
    s = sharding.lower()
    m = re.search(r"zero[\s_-]*(?:stage[\s_-]*)?([0-3])\b", s)
    if m:
        return int(m.group(1))
    if "shard_grad_op" in s:
        return 2
    if any(k in s for k in ("fsdp", "full_shard", "fully_shard", "hybrid_shard", "hsdp")):
        return 3
    if "distributed optim" in s or "optimizer shard" in s:
        return 1
    if "ddp" in s or s.startswith(("none", "no ")):
        return 0
    return 1 if megatron_core else 0


def pipelined_zero(zero: int, pp: int, framework: str) -> int:
    """The ZeRO stage FSDP runs at under PyTorch's pipelining (torchtitan): ZeRO-1. Every backward but the
    last runs with ``set_reshard_after_backward(False)`` and ``set_requires_gradient_sync(False)``
    (pytorch/pytorch torch/distributed/pipelining/stage.py ``backward_maybe_with_nosync``, @0138610) and torchtitan
    does not reshard after forward under PP (``apply_fsdp``, "to avoid per-microbatch all-gathers"), so a stage's
    parameters and gradients stay whole from its first micro-batch to its last and only the optimizer states stay
    sharded; one all-gather and one reduce-scatter per step. A fact of the stack, not of the row."""
    return 1 if pp > 1 and zero >= 2 and "torchtitan" in framework.lower() else zero


def pipeline_split_default(framework: str, pp: int, vpp: int | None, local_batch: int) -> tuple[int, int] | None:
    """(stages per rank, micro-batch size) a stack runs when a table states neither: torchtitan splits the
    per-replica batch into as many micro-batches as there are pipeline stages, ``pipeline_parallel_microbatches``
    "The default value will be the number of pipeline stages" (config_manager.py, Dec 2024;
    ``build_pipeline_schedule``: pp x stages per rank), with 2 stages per rank for a multi-stage (interleaved)
    schedule when no split points are given (``generate_split_points``). None for other stacks, without
    pipelining, or when the batch does not split evenly."""
    if pp <= 1 or "torchtitan" not in framework.lower():
        return None
    stages = vpp or (2 if "interleaved" in framework.lower() else 1)
    micro, rest = divmod(local_batch, pp * stages)
    return (stages, micro) if micro >= 1 and rest == 0 else None


def hybrid_shard_group(sharding: str) -> int | None:
    """GPUs per sharding group of hybrid sharding (HSDP / HYBRID_SHARD, "8-GPU shard groups", "shard group
    of 16"): the parameters are sharded inside the group and replicated across groups; None when the cell
    names no hybrid sharding or no size (the caller takes one node)."""
    s = sharding.lower()
    if not any(k in s for k in ("hybrid", "hsdp")):
        return None
    m = re.search(r"(\d+)[\s-]*gpu", s) or re.search(r"group[s]?\s*(?:of|=|:)?\s*(\d+)", s)
    return int(m.group(1)) if m else None


def precision_of(text: Any, gpu: str) -> str:
    """A ``precision`` cell as the model's fp8 | bf16 | fp16: any fp8 format (fp8, MXFP8, float8, e4m3,
    "fp8-cs") is fp8; fp4 formats (NVFP4), which the model does not have, are taken as fp8, their
    nearest modelled precision (the prediction is then on the slow side); fp16 where it is named or on
    V100 (no bf16 there); else bf16."""
    t = str(text).lower()
    if not t.startswith(("no fp8", "bf16 (no fp8")) and any(k in t for k in ("fp8", "float8", "e4m3", "fp4")):
        return "fp8"
    if t.startswith("fp16") or gpu.startswith("v100"):
        return "fp16"
    return "bf16"


#: Precision cells naming Megatron-Bridge's MXFP8 and per-tensor current-scaling fp8 recipes, both of which set
#: ``fp8_param_gather = True`` (megatron/bridge/training/mixed_precision.py: bf16_with_mxfp8_mixed,
#: bf16_with_fp8_current_scaling_mixed; the blockwise recipe sets it False and is not named here).
FP8_PARAM_GATHER_PRECISIONS = ("fp8-mx", "fp8-cs")


#: Words of a precision cell that state fp8 weights by their switch: NeMo 1.x's ``model.fp8_params`` (the model
#: is built under Transformer Engine's ``fp8_model_init`` and Megatron-Core's DDP gets
#: ``fp8_param_gather=cfg.fp8_params``: nlp/models/language_modeling/megatron_gpt_model.py) and torchtitan's
#: ``enable_fsdp_float8_all_gather`` (FSDP2 all-gathers the float8 weights).
FP8_PARAM_GATHER_WORDS = ("fp8_params", "enable_fsdp_float8_all_gather")


def fp8_param_gather_of(text: Any, zero: int, stated: Any = None) -> bool:
    """``plan.fp8_param_gather`` of a run whose weights are sharded (``zero`` >= 1): its precision cell names a
    recipe that gathers fp8 weights (:data:`FP8_PARAM_GATHER_PRECISIONS`) or the switch itself
    (:data:`FP8_PARAM_GATHER_WORDS`), or its ``fp8_params`` cell (``stated``: the recipe's setting,
    recipe_settings.csv) says yes; never for a 16-bit run."""
    t = str(text).strip().lower()
    if zero < 1 or not t.startswith("fp8"):
        return False
    return t.startswith(FP8_PARAM_GATHER_PRECISIONS) or _FP8_PARAM_SWITCH_ON.search(t) is not None or bool(
        _stated(stated))


#: A switch of :data:`FP8_PARAM_GATHER_WORDS` named as on: not after "no"/"without", not set to false, 0 or no.
_FP8_PARAM_SWITCH_ON = re.compile(r"(?<!no )(?<!without )\b(?:" + "|".join(FP8_PARAM_GATHER_WORDS)
                                  + r")\b(?!\s*[:=]\s*(?:false|0|no|off)\b)")


def source_year(source: Any) -> int | None:
    """The newest year a ``source`` cell names (a 4-digit year 2015-2039, or an arXiv id YYMM.NNNNN), or
    None: dates a run's software era when its source id is not one this module knows."""
    t = str(source)
    years = [int(y) for y in re.findall(r"(?<!\d)(20[1-3]\d)(?!\d)", t)]
    years += [2000 + int(y) for y in re.findall(r"(?<![\d.])([12]\d)[01]\d\.\d{4,5}(?!\d)", t)]
    return max(years) if years else None


def legacy_megatron(source_id: Any, source: Any, framework: str) -> bool:
    """True for Megatron-LM (or Megatron-DeepSpeed) runs before 2023: unfused attention (FlashAttention
    entered Megatron-LM in 2023, ``--use-flash-attn``), dropout in GPT recipes. Known sources S1, S4 and
    S5 (2019-2021); other rows by the framework's name and the source's year."""
    if str(source_id) in {"S1", "S4", "S5"}:
        return True
    year = source_year(source)
    return "megatron" in framework.lower() and not megatron_core_stack(framework) and year is not None and year <= 2022


def megatron_core_stack(framework: str) -> bool:
    """Whether a ``framework`` cell names a Megatron-Core stack (Megatron-Core itself, NeMo, Megatron-Bridge),
    whose defaults (distributed optimizer, SP with TP, flash attention) the validation applies. NeMo
    AutoModel is NeMo's PyTorch-native (FSDP2) library, not a Megatron-Core stack."""
    f = framework.lower()
    return "automodel" not in f and any(k in f for k in ("nemo", "megatron-core", "mcore", "bridge"))


def causal_flops_count(convention: Any, source: Any, framework: Any) -> bool:
    """Whether a source's model-FLOPs count halves attention for the causal mask: its ``flops_convention``
    says so, or it is Megatron's counter (Megatron-LM/Core, NeMo, Megatron-Bridge) or MaxText's from 2025 on
    (Megatron-LM training.py divides the attention FLOPs by 2 since 2025; MaxText PR #1988, July 2025).
    Earlier counters (Narayanan et al. eq. 3, PaLM's 6N + 12*L*H*Q*T, torchtitan) count all s^2 scores."""
    conv = str(convention or "").lower()
    if "non-causal" in conv or "noncausal" in conv:
        return False
    if "causal" in conv:
        return True
    fw = str(framework or "").lower()
    years = [y for y in (source_year(source), source_year(framework), container_year(framework)) if y is not None]
    return bool(years) and max(years) >= 2025 and ("megatron" in fw or megatron_core_stack(fw) or "maxtext" in fw)


def container_release(framework: Any) -> tuple[int, int] | None:
    """(YY, MM) of the NVIDIA container release a ``framework`` cell names (``NeMo 25.09``, ``PyTorch 24.07``,
    ``NeMo 24.03.01``), or None; a ``24.x`` cell gives month 0 (the year only)."""
    m = re.search(r"(?:nemo|pytorch|container)\D{0,3}([1-3]\d)\.(0[1-9]|1[0-2]|x)", str(framework).lower())
    if m is None:
        return None
    return int(m.group(1)), 0 if m.group(2) == "x" else int(m.group(2))


def container_year(framework: Any) -> int | None:
    """The year of a NVIDIA container release a ``framework`` cell names (``NeMo 25.09``: 2025), or None."""
    release = container_release(framework)
    return None if release is None else 2000 + release[0]


#: Catalog ids by the text a ``gpu_type`` cell uses, most specific first ("gb200" before "b200", "h100
#: pcie" before "h100", "gh200" before "h200").
_GPU_NAMES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gb300", ("gb300",)), ("gb200", ("gb200",)), ("b300", ("b300",)), ("b200", ("b200",)),
    ("h800", ("h800",)), ("gh200", ("gh200",)), ("h200", ("h200",)),
    ("h100-pcie", ("h100 pcie", "h100-pcie", "h100pcie", "h100 nvl", "h100-nvl")), ("h100-sxm", ("h100",)),
    ("mi355x", ("mi355", "mi350")), ("mi325x", ("mi325",)), ("mi300x", ("mi300",)),
    ("l40s", ("l40s",)), ("a10g", ("a10g",)), ("l4", ("nvidia l4", "l4 ", "l4-")), ("t4", ("tesla t4", "t4 ")),
    ("v100-32gb", ("v100",)), ("a800", ("a800",)), ("a100", ("a100",)),
)


def gpu_id(text: Any) -> tuple[str | None, dict[str, float]]:
    """Catalog id and the cluster overrides a run's ``gpu_type`` text states (network, DGX-2 size, A800's
    cut NVLink, GH200's memory), or (None, {}) for a GPU the catalog does not hold (TPU, H20, ...).

    Overrides, each from the part's datasheet (or the cloud's machine-type page): 1600 Gb/s RoCE per 8-GPU node
    -> 200 Gb/s per GPU; GCP A3 High -> 100 Gb/s per GPU; DGX-2 -> 16 V100 on NVSwitch; DGX A100 -> 8x 200 Gb/s
    HDR; A800 = A100 with NVLink cut to 400 GB/s bidirectional (NVIDIA A800 datasheet) -> 200 per direction;
    GH200 = the H100-class GPU of the Grace Hopper superchip with 96 GB HBM3 at 4.0 TB/s, or 144 GB HBM3e at
    4.9 TB/s (NVIDIA GH200 datasheet), four per node on NVLink (the quad-GH200 nodes of CSCS Alps and JUPITER);
    an H100 stated as 96 GB HBM2e (Meta's Grand Teton) -> 96 GiB at 2.4 TB/s; a stated power limit ("500 W power
    limit") -> ``power_limit_w``."""
    t = " ".join(str(text).lower().replace("_", " ").split()) + " "
    over: dict[str, float] = {}
    if "1600 gbps" in t:
        over["network_gbps"] = 200.0
    if "a3-highgpu" in t or "a3 high" in t:
        # GCP A3 High: 1,000 Gbps per VM (Google Cloud "Networking and GPU machines"), of which the four GPUDirect-TCPX
        # NICs carry 800 -> 100 Gb/s per GPU; the fifth NIC (gVNIC) serves host traffic
        over["network_gbps"] = 100.0
    if "dgx-2" in t:
        over.update(gpus_per_node=16, nvlink_domain=16)
    gid = next((g for g, names in _GPU_NAMES if any(n in t for n in names)), None)
    if gid is None:
        return None, {}
    limit = re.search(r"(\d{2,4})\s*w (?:power )?(?:limit|cap)|power (?:limit|cap)(?: of| at|:)? ?(\d{2,4})\s*w\b", t)
    if limit:  # an enforced board power limit (nvidia-smi -pl): cosearch.model.power
        over["power_limit_w"] = float(limit.group(1) or limit.group(2))
    if gid == "h100-sxm" and "hbm2e" in t and ("96gb" in t or "96 gb" in t):
        # Meta's Grand Teton H100: 96 GB HBM2e at 2.4 TB/s (torchtitan docs/performance.md states both)
        over.update(hbm_gib=96.0, hbm_tbps=2.4)
    if gid == "gh200":
        big = "144" in t or "hbm3e" in t
        over.update(hbm_gib=144.0 if big else 96.0, hbm_tbps=4.9 if big else 4.0, gpus_per_node=4, nvlink_domain=4)
        return "h200", over
    if gid in ("a100", "a800"):
        if gid == "a800":
            over["nvlink_gbps"] = 200.0
        if "80gb" in t or "80 gb" in t:
            if "selene" in t or "dgx a100" in t:
                over["network_gbps"] = 200.0  # DGX A100: 8x 200 Gb/s HDR per node
            return "a100-80gb", over
        return "a100-40gb", over
    return gid, over
