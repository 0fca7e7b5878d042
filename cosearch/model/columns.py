"""The vectorized model's inputs: one numeric column per knob, broadcast to a common shape.

A configuration is a row across these columns. Categorical knobs are integer codes (below) so that
millions of rows fit in a handful of float arrays.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from ..errors import CosearchError
from .burst import DEFAULT_INTERFERENCE
from .collectives import COLLECTIVE_CODES
from .expansion import OFFLOAD_CODES
from .memory import OP_SAC, OPTIMIZER_STATE_CODES
from .schedules import SCHEDULE_CODES

#: op: torchtitan's per-op selective activation checkpointing (``selective_ac_option = "op"``): between
#: selective and full in what it recomputes, hence the code between theirs (model.layer, model.memory).
RECOMPUTE_CODES = {"none": 0, "selective": 1, "op": OP_SAC, "full": 2}
PRECISION_CODES = {"bf16": 0, "fp16": 0, "fp8": 1}
#: flash: the GPU's own fused attention kernel (FlashAttention-2 on Ampere, FlashAttention-3 / cuDNN /
#: Transformer Engine on Hopper and later); standard: unfused (pre-2022 Megatron-LM); triton: the 2023
#: Triton flash-attention kernel (llm-foundry, ALiBi); flash2: FlashAttention-2 (or PyTorch SDPA's flash
#: backend) on any GPU, which on Hopper runs without the architecture's wgmma/TMA path.
ATTENTION_CODES = {"flash": 0, "standard": 1, "triton": 2, "flash2": 3}
#: fused: memory-bound ops fused into few kernels (Transformer Engine / Megatron, torch.compile, XLA); eager:
#: PyTorch eager mode, one kernel per op (compute.EAGER_ELEMENTWISE_RELATIVE).
FUSION_CODES = {"fused": 0, "eager": 1}
#: The loss's cross-entropy: fused (16-bit logits and one fp32 softmax whose gradient is written in place) or
#: eager (PyTorch F.cross_entropy on fp32 logits: the fp32 log-softmax and its fp32 gradient pair; evaluate.py).
CROSS_ENTROPY_CODES = {"fused": 0, "eager": 1}
#: Passes whose tensor-parallel collectives ``tp_comm_overlap`` hides: all (Transformer Engine userbuffers
#: overlap the forward and the backward GEMMs) or forward (PyTorch's async TP, evaluate.py).
TP_OVERLAP_PASSES_CODES = {"all": 0, "forward": 1}

#: Per-GPU columns from a catalog entry's efficiency block (besides the datasheet values):
#: :func:`cosearch.hardware.catalog` fills them; every per-GPU column set lists them from here.
EFFICIENCY_COLUMNS = ("matmul_efficiency", "matmul_efficiency_fp8", "legacy_attention_efficiency", "attention_speedup")

#: Scenario fields given as words, and their numeric codes (column name -> {word: code}).
#: A new categorical knob registers its codes here; scenario and search space pick it up.
CATEGORICAL_CODES: dict[str, dict[str, int]] = {
    "recompute": RECOMPUTE_CODES, "precision": PRECISION_CODES, "attention": ATTENTION_CODES,
    "offload": OFFLOAD_CODES, "tp_collective": COLLECTIVE_CODES, "dp_collective": COLLECTIVE_CODES,
    "schedule": SCHEDULE_CODES, "optimizer_states": OPTIMIZER_STATE_CODES, "fusion": FUSION_CODES,
    "tp_overlap_passes": TP_OVERLAP_PASSES_CODES, "cross_entropy": CROSS_ENTROPY_CODES,
}

#: Input columns and their defaults (None: required).
INPUT_COLUMNS: dict[str, float | None] = {
    # model
    "layers": None, "hidden": None, "heads": None, "kv_heads": None, "ffn_hidden": None,
    "gated_mlp": 0.0, "vocab": None, "seq_len": None, "tied_embeddings": 1.0,
    "mtp_layers": 0.0,                # multi-token-prediction modules (DeepSeek-V3: 1), each one layer more
    # training
    "global_batch": None, "precision": 0.0, "tokens": np.nan, "attention": 0.0,
    "dropout": 0.0,                   # 1: dropout layers on (GPT-3, Megatron-LM 2019-22); their masks are kept
    "optimizer_states": 0.0,          # memory.OPTIMIZER_STATE_CODES: 0 fp32 master + m + v, 1 bf16 moments, 2 pure bf16, 3 bf16 master + moments
    "target_tokens": np.nan,          # E_min: tokens to the target loss at a tiny batch (time-to-accuracy)
    "critical_batch_tokens": np.nan,  # B_noise (McCandlish et al. 2018), tokens; NaN = infinite
    "fusion": 0.0,                    # FUSION_CODES: 0 fused memory-bound kernels, 1 PyTorch eager
    "cross_entropy": 0.0,             # CROSS_ENTROPY_CODES: 0 fused loss (6 B per logit), 1 eager fp32 (12 B)
    # hardware (resolved from the catalog plus overrides)
    "peak_tflops": None, "matmul_efficiency": None, "hbm_gib": None, "hbm_tbps": None,
    "attention_speedup": 1.0,  # the GPU's attention kernel vs the profile's ratio to GEMMs (Blackwell Ultra 1.35)
    "legacy_attention_efficiency": np.nan,  # fraction of 16-bit peak pre-architecture attention kernels reach; NaN: no cap
    "matmul_efficiency_fp8": np.nan,  # fraction of the fp8 peak large GEMMs reach; NaN: bf16 value x profile ratio
    "nvlink_gbps": None, "nvlink_domain": None, "gpus_per_node": None, "network_gbps": None,
    "power_w": None, "price_usd_per_gpu_hour": None,
    "power_limit_w": np.nan,    # enforced board power limit, W (model.power); NaN: the rated power_w
    # cluster co-design knobs (defaults: no expansion tier, full-bisection network)
    "expansion_gib": 0.0,       # expansion tier capacity per GPU (per node when expansion_pooled), GiB
    "expansion_gbps": 0.0,      # expansion tier bandwidth per GPU, GB/s
    "expansion_pooled": 0.0,    # 1: expansion_gib is one pool per node
    "oversubscription": 1.0,    # leaf-to-spine oversubscription (1 = full bisection)
    "leaf_gpus": np.nan,        # GPUs under one leaf switch; NaN = one NVLink domain per leaf
    # plan
    "gpus": None, "tp": 1.0, "pp": 1.0, "dp": None, "cp": 1.0, "microbatch": 1.0,
    "interleave": 1.0, "recompute": 0.0, "sequence_parallel": 0.0, "zero": 0.0,
    "zero_group": np.nan,  # NaN: shard over all dp x cp ranks (FSDP FULL_SHARD; torchtitan dp_shard_cp)
    "zero3_live_params": np.nan,  # DeepSpeed stage3_max_live_parameters; NaN: FSDP (two wrapped layers gathered)
    "fsdp_overlap": np.nan,      # share of compute that hides FSDP traffic; NaN: the profile's fsdp_overlap
    "recompute_early_stop": 0.0,  # 1: full recompute skips the dense MLP's last GEMM (PyTorch non-reentrant, JAX)
    "recompute_mla_up_proj": 0.0,  # 1: MLA's q/k/v are rebuilt from the latents in the backward, not kept
    "overlap_grad_reduce": 1.0,  # 0: gradients reduced after the backward pass (Megatron-LM before 2022)
    "fp8_param_gather": 0.0,     # 1 (under fp8): weights held and all-gathered in fp8 (Megatron --fp8-param-gather)
    "tp_comm_overlap": 0.0,      # 1: tensor-parallel collectives overlapped with GEMMs (TE userbuffers)
    "tp_overlap_passes": 0.0,    # TP_OVERLAP_PASSES_CODES: 0 every pass overlapped, 1 the forward only (async TP)
    "offload": 0.0,              # bit set: 1 optimizer states, 2 weights+gradients, 4 activations
    "tp_collective": 0.0,        # collective algorithm codes (collectives.COLLECTIVE_CODES), 0 = nccl
    "dp_collective": 0.0,
    # DeepPool (cosearch.model.burst); NaN: the feature is absent and costs nothing
    "burst": np.nan,                 # 1: per-block data-parallel widths (burst parallelism)
    "burst_block_layers": 1.0,       # layers per burst block
    "burst_amplification": np.nan,   # DeepPool's amplification limit on a block's GPU time; NaN: none
    "multiplex": np.nan,             # 1: a background job runs in the idle GPU time
    "multiplex_interference": DEFAULT_INTERFERENCE,  # share of the idle time the background job loses
    "background_tokens_per_gpu_s": np.nan,  # its standalone rate; NaN: this model's compute rate on one GPU
    "schedule": np.nan,          # pipeline schedule code (schedules.SCHEDULE_CODES); NaN: 1F1B, interleaved when v > 1
}
# --- issue 13: mixture-of-experts and MLA columns (cosearch.model.moe); defaults = a dense model ---
from .moe import DISPATCHER_CODES, GROUPED_GEMM_CODES, MOE_INPUT_COLUMNS, MOE_MODEL_COLUMNS  # noqa: E402

INPUT_COLUMNS.update(MOE_INPUT_COLUMNS)
CATEGORICAL_CODES["moe_dispatcher"] = DISPATCHER_CODES
CATEGORICAL_CODES["moe_grouped_gemm"] = GROUPED_GEMM_CODES
# --- sliding-window attention (cosearch.model.window); defaults = full attention in every layer ---
from .window import WINDOW_INPUT_COLUMNS  # noqa: E402

INPUT_COLUMNS.update(WINDOW_INPUT_COLUMNS)
#: Columns a caller may leave out at no cost: broadcast_columns keeps them 0-d (their defaults describe
#: a model without the feature).
LAZY_COLUMNS = (frozenset(MOE_INPUT_COLUMNS) | frozenset(WINDOW_INPUT_COLUMNS)
                | {"mtp_layers", "fusion", "cross_entropy", "power_limit_w", "tp_overlap_passes"})
#: Model columns of the optional architecture fields (cosearch.presets.MOE_ARCH_FIELDS; ``mla`` from ``attention``).
OPTIONAL_MODEL_COLUMNS = MOE_MODEL_COLUMNS + ("mtp_layers",) + tuple(WINDOW_INPUT_COLUMNS)


def _full_columns(cols: Mapping[str, object]) -> dict[str, object]:
    """``cols`` with every default filled; a missing required or an unknown column is a one-line error."""
    if not isinstance(cols, Mapping):
        raise CosearchError("columns", f"expects a mapping of column name -> number or array (got {type(cols).__name__})")
    missing = [k for k, v in INPUT_COLUMNS.items() if v is None and k not in cols and k != "dp"]
    if missing:
        raise CosearchError("columns", f"missing model input columns: {', '.join(missing)}")
    unknown = sorted(map(str, cols.keys() - INPUT_COLUMNS.keys()))
    if unknown:
        raise CosearchError("columns", f"unknown model input columns: {', '.join(unknown[:10])}"
                            + (" ..." if len(unknown) > 10 else "") + "; allowed: cosearch.model.columns.INPUT_COLUMNS")
    return {k: cols.get(k, v) for k, v in INPUT_COLUMNS.items()}


def _float_array(name: str, value: object) -> np.ndarray:
    """Column ``name`` as float64; text (a word where its code belongs) is a one-line error naming it."""
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        codes = CATEGORICAL_CODES.get(name)
        hint = f" (codes: {', '.join(f'{w}={c:g}' for w, c in codes.items())})" if codes else ""
        raise CosearchError(f"columns.{name}", f"expects numbers{hint}") from None


def broadcast_columns(cols: Mapping[str, object], lean: bool = False) -> dict[str, np.ndarray]:
    """Fill defaults, derive ``dp`` when absent, and broadcast every column to one float64 shape.

    Exception: a :data:`LAZY_COLUMNS` column (mixture of experts, MLA, sliding windows, multi-token
    prediction) the caller does not give stays a 0-d array of its default, which broadcasts wherever
    it is used; a dense batch then does not pay for a dozen filled columns it never reads. ``lean`` (the evaluator's own input) keeps
    every single-valued column 0-d that way, except ``gpus`` and ``dp``, which carry the shape."""
    full = _full_columns(cols)
    # None is "not given" (NaN), as in scalar_columns; only an absent dp stays None, to be derived below
    full = {k: v if v is None and k == "dp" else _float_array(k, v) for k, v in full.items()}
    if full["dp"] is None:
        full["dp"] = full["gpus"] / (full["tp"] * full["pp"] * full["cp"])
    if lean:  # 0-d columns stay 0-d: the same values wherever they broadcast, none of the copies
        keys = [k for k, v in full.items() if v.ndim or k in ("gpus", "dp")]
    else:
        keys = [k for k in full if k in cols or k not in LAZY_COLUMNS or k == "dp"]
    try:
        arrays = np.broadcast_arrays(*(full[k] for k in keys))
    except ValueError:
        shapes = sorted({(k, np.shape(full[k])) for k in keys if np.ndim(full[k])}, key=lambda x: x[1])
        raise CosearchError("columns", "column shapes do not broadcast together: "
                            + ", ".join(f"{k} {s}" for k, s in shapes[:6])) from None
    # ascontiguousarray would turn a 0-d column into shape (1,): all-scalar input gives 0-d outputs, as numpy broadcasts
    out = {k: np.ascontiguousarray(a) if a.ndim else np.array(a) for k, a in zip(keys, arrays)}
    return {k: out[k] if k in out else full[k] for k in full}


_FLOAT_ONLY = frozenset((float,))


def scalar_columns(cols: Mapping[str, object]) -> dict[str, float]:
    """One configuration as plain Python floats (defaults filled, ``dp`` derived when absent), the same
    values as :func:`broadcast_columns` gives in 0-d arrays: the input of the scalar path
    (:func:`cosearch.model.evaluate_scalar`). Every value must be a scalar (a number, a numpy scalar or
    an array of one element)."""
    if type(cols) is dict and _NEEDED <= cols.keys() <= _KNOWN and set(map(type, cols.values())) <= _FLOAT_ONLY:
        out = _DEFAULTS.copy()  # every column given as a float (cosearch.scenario.scenario_columns)
        out.update(cols)        # keeps the column order
        return out
    out: dict[str, float] = {}
    present = 0
    get = cols.get
    for k, default in _DEFAULT_ITEMS:
        v = get(k, _ABSENT)
        if v is _ABSENT:
            v = default
        else:
            present += 1
        if type(v) is not float:
            if v is None:
                if k == "dp":
                    continue
                if v is default:  # a required column is missing
                    _full_columns(cols)
                v = np.nan  # np.asarray(None, dtype=float)
            elif type(v) in (int, bool):
                v = float(v)
            elif np.size(v) == 1:
                v = float(np.asarray(v, dtype=float).reshape(-1)[0])
            else:
                raise ValueError(f"scalar_columns: column {k!r} holds {np.size(v)} values, not one")
        out[k] = v
    if present != len(cols):  # unknown columns: the error broadcast_columns raises
        _full_columns(cols)
    if "dp" not in out:
        with np.errstate(divide="ignore", invalid="ignore"):  # the same quotient as broadcast_columns
            out["dp"] = float(np.float64(out["gpus"]) / (np.float64(out["tp"]) * out["pp"] * out["cp"]))
        out = {k: out[k] for k in INPUT_COLUMNS}  # the column order
    return out


_ABSENT = object()
_DEFAULT_ITEMS = tuple(INPUT_COLUMNS.items())
_DEFAULTS = dict(INPUT_COLUMNS)
_KNOWN = INPUT_COLUMNS.keys()
_NEEDED = frozenset(k for k, v in INPUT_COLUMNS.items() if v is None)  # the required ones and dp
