"""Memory per GPU: weights, gradients, optimizer states and activations, in bytes.

Model states follow ZeRO (Rajbhandari et al. 2020): mixed-precision Adam keeps 16-bit weights (2 B)
and gradients (2 B) plus fp32 master weights, momentum and variance (12 B) per parameter; ZeRO
stage 1 shards the 12 B, stage 2 also the gradients, stage 3 (FSDP) also the weights, over the
sharding group. ``training.optimizer_states`` narrows the 12 B (:data:`OPTIMIZER_STATE_BYTES`): 16-bit
moments beside the fp32 master (8 B), a 16-bit master copy beside 16-bit moments (6 B), or pure 16-bit
training with no master copy (4 B).

Activations follow Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", eqs. 1-6), generalized to grouped-query attention, any MLP width, gated MLPs, dropout off and
fp8. Per layer and micro-batch of b sequences of s tokens (s/cp per rank under context parallelism):
  replicated part  (8 + 2*dropout)*s*b*h  (2 norm inputs and 2 norm outputs = the QKV and MLP inputs,
                   2 dropout masks of 1 B when dropout is on; / tp with SP)
  split over tp    2*s*b*(h + 2*kv) + 2*s*b*h + (4 or 6)*s*b*f   (Q,K,V; projection input; MLP)
  scores           (2 + 3*dropout)*a*s^2*b  (standard attention only: softmax output, and with dropout
                   its mask and output; flash attention keeps no scores)
With dropout (GPT-3, Megatron-LM 2019-22) the replicated part is Korthikanti's 10*s*b*h; modern
recipes (Llama, Nemotron, MPT) train without dropout. Under fp8 (Transformer Engine) the inputs of
the linear layers are saved as 1-byte fp8 copies: the two norm outputs and the fc2 input drop to
half, and the projection input gains a 1-byte copy beside the 16-bit attention output the attention
backward keeps.
Selective recomputation drops the scores and (with flash attention, where there are none) the
activation-function output, 2*s*b*f. Full recomputation keeps only each layer's input, 2*s*b*h
(/ tp with SP), plus one layer's full activations while it is recomputed.
"""
from __future__ import annotations

from . import _ops as ops

GIB = float(2**30)
WEIGHT_BYTES = 2.0
GRAD_BYTES = 2.0
OPTIMIZER_BYTES = 12.0  # fp32 master weights + Adam momentum + variance
#: ``training.optimizer_states`` words and their codes (the model column ``optimizer_states``).
OPTIMIZER_STATE_CODES = {"fp32": 0, "bf16_moments": 1, "bf16": 2, "bf16_master": 3}
#: Optimizer-state bytes per parameter by code, beside the 16-bit weights and gradients:
#: fp32 -- fp32 master, m and v (mixed-precision Adam, Micikevicius et al. 2018; Megatron's default);
#: bf16_moments -- fp32 master, 16-bit m and v (DeepSeek-V3, arXiv 2412.19437 sec. 3.3.3 "BF16 ... to track
#: the first and second moments"; Megatron-Core's precision-aware optimizer, --exp-avg-dtype/--exp-avg-sq-dtype
#: bf16); bf16 -- no master copy, 16-bit m and v (parameters created in bf16 and torch.optim.Adam keeping its
#: states in the parameters' dtype: NeMo AutoModel's MoE models, ``initialize_weights(dtype=torch.bfloat16)``);
#: bf16_master -- a 16-bit master copy of the owned parameters beside 16-bit m and v (Apex ``DistributedFusedAdam``
#: with ``dtype=torch.bfloat16``, NeMo 1.x's ``optim.name: distributed_fused_adam`` with ``optim.dtype: bf16``:
#: ``StateBucket`` allocates ``params_shard``, ``exp_avg_shard`` and ``exp_avg_sq_shard`` in ``dtype``;
#: NVIDIA/apex apex/contrib/optimizers/distributed_fused_adam.py). The codes are names, not an order.
OPTIMIZER_STATE_BYTES = (OPTIMIZER_BYTES, 8.0, 4.0, 6.0)
#: Bytes the Adam update reads and writes per parameter it owns, by code: fp32 reads the 16-bit gradient and
#: the fp32 master, m, v and writes the last three and the 16-bit weight, 2*(2+4+4+4) = 28; bf16_moments
#: 2*(2+4+2+2) = 20; bf16 reads gradient, weight, m, v and writes the last three, 8 + 6 = 14; bf16_master reads the
#: gradient and its 16-bit master, m, v and writes the last three and the 16-bit weight, 8 + 8 = 16.
OPTIMIZER_TRAFFIC_BYTES = (28.0, 20.0, 14.0, 16.0)


def _by_state(code, table):
    """``table``'s entry for each ``optimizer_states`` code (some code > 0)."""
    low = ops.where(code >= 2, table[2], ops.where(code >= 1, table[1], table[0]))
    return ops.where(code >= 3, table[3], low)


def optimizer_bytes(code):
    """(state bytes held, HBM bytes one Adam update moves) per owned parameter of the ``optimizer_states``
    code(s) (:data:`OPTIMIZER_STATE_BYTES`, :data:`OPTIMIZER_TRAFFIC_BYTES`): what the memory model and the
    optimizer-step time each need. The fp32 constants where every row is fp32 (the common case costs nothing)."""
    if not ops.any(code > 0):
        return OPTIMIZER_STATE_BYTES[0], OPTIMIZER_TRAFFIC_BYTES[0]
    return _by_state(code, OPTIMIZER_STATE_BYTES), _by_state(code, OPTIMIZER_TRAFFIC_BYTES)


def state_divisors(zero, shard_group):
    """What ZeRO stage ``zero`` divides the (weights, gradients, optimizer) states by: the shard group
    from stage 3, 2 and 1 on (computed once for the several ranks :func:`model_state_bytes` sizes)."""
    shard = ops.maximum(shard_group, 1.0)
    return ops.where(zero >= 3, shard, 1.0), ops.where(zero >= 2, shard, 1.0), ops.where(zero >= 1, shard, 1.0)


def weight_bytes(fp8, fp8_params=0.0):
    """Bytes per model weight: 16-bit, plus Transformer Engine's 1-byte fp8 copy under fp8 training; with fp8
    parameters (``fp8_params`` = 1 under fp8: Megatron ``--fp8-param-gather``, TE ``fp8_model_init``, torchtitan's
    float8 FSDP all-gather) the weights are held in fp8 alone, 1 byte, the fp32 master staying with the optimizer."""
    return WEIGHT_BYTES + fp8 - WEIGHT_BYTES * fp8_params


def model_state_bytes(params_local, zero, shard_group, fp8, divisors=None, optimizer_bytes=OPTIMIZER_BYTES,
                      fp8_params=0.0):
    """(weights, gradients, optimizer) bytes of ``params_local`` parameters under ZeRO stage ``zero``;
    ``divisors``: :func:`state_divisors` of (``zero``, ``shard_group``) where already known;
    ``optimizer_bytes``: optimizer states per parameter (the first of :func:`optimizer_bytes`);
    ``fp8``, ``fp8_params``: 0/1, as :func:`weight_bytes` reads them.
    """
    div_w, div_g, div_o = divisors or state_divisors(zero, shard_group)
    weights = params_local * weight_bytes(fp8, fp8_params) / div_w
    grads = params_local * GRAD_BYTES / div_g
    optimizer = params_local * optimizer_bytes / div_o
    return weights, grads, optimizer


#: ``plan.recompute`` op's code (torchtitan's per-op SAC): between selective (1) and full (2), as what it reruns
#: is, so ``recompute > 1`` reads "op or full" (:data:`cosearch.model.columns.RECOMPUTE_CODES`).
OP_SAC = 1.5


def layer_activation_bytes(seq_local, seq_full, micro, hidden, heads, kv_width, ffn, gated, tp, sp, recompute,
                           attention, dropout=1.0, fp8=0.0):
    """Activation bytes one layer keeps for one micro-batch on one GPU, for each recompute mode.

    ``recompute``: 0 none, 1 selective, :data:`OP_SAC` op (torchtitan's per-op SAC: the block input and the outputs of the
    matmuls it saves, :func:`op_sac_saved_values`), 2 full; ``attention``: 0 flash, 1 standard, 2 triton flash;
    ``kv_width``: K (or V) width per tensor-parallel rank; ``sp``, ``dropout``, ``fp8``: 0/1. Returns (kept under ``recompute``, kept with no recompute).
    """
    sbh = seq_local * micro * hidden
    sbf = seq_local * micro * ffn
    rep_div = ops.where(sp > 0, tp, 1.0)
    norm_out = 2.0 - fp8                                  # bytes per value of the saved QKV / MLP inputs
    replicated = (4.0 + 2.0 * norm_out + 2.0 * (dropout > 0)) * sbh / rep_div
    mlp = (2.0 + 2.0 * gated) * sbf / tp + (2.0 - fp8) * sbf / tp
    # Q is split over the TP ranks; ``kv_width`` is already the per-rank K (or V) width
    split = 2.0 * seq_local * micro * (hidden / tp + 2.0 * kv_width) + (2.0 + fp8) * sbh / tp + mlp
    standard = attention == 1
    scores = standard * (2.0 + 3.0 * (dropout > 0)) * heads * seq_local * seq_full * micro / tp
    none = replicated + split + scores
    selective_saving = ops.where(standard, scores, (2.0 - fp8) * sbf / tp)
    selective = none - selective_saving
    full = 2.0 * sbh / rep_div
    partial = ops.where(recompute >= 1, selective, none)
    if ops.any(recompute == OP_SAC):  # only where some row runs torchtitan's per-op SAC
        op = 2.0 * seq_local * micro * op_sac_saved_values(hidden, kv_width, ffn, gated, tp, rep_div)
        partial = ops.where(recompute > 1, op, partial)
    return ops.where(recompute >= 2, full, partial), none


def op_sac_saved_values(hidden, kv_width, ffn, gated, tp, rep_div):
    """16-bit values per token one layer keeps under torchtitan's per-op SAC (``_save_list``: the outputs of
    ``aten.mm``, the SDPA kernels and TP reduce-scatters, except every second matmul of the block,
    ``parallelize_llama._apply_ac_to_transformer_block``): the block input, the attention output and the
    outputs of the odd matmuls in call order wq, wk, wv, wo, w1, w3, w2 -- wq, wv, w1, w2 (a GeLU MLP:
    wq, wv, w1). Everything else is rerun from them."""
    return hidden / rep_div + 2.0 * hidden / tp + kv_width + ffn / tp + gated * hidden / rep_div


def stage_layers(layers, pp, interleave):
    """Transformer layers on the fullest, the first and the last pipeline rank.

    The fullest rank holds ceil(layers / (pp*v)) * v layers. When the split is uneven, the ranks
    that also hold the embedding (first) and the loss (last) get one layer fewer -- Megatron-LM's
    ``account_for_embedding/loss_in_pipeline_split`` and Llama 3's 405B layout (126 layers on 16
    stages: 7 on the first and last, 8 on the others; Dubey et al. 2024, sec. 3.3.2)."""
    fullest = ops.ceil(layers / (pp * interleave)) * interleave
    deficit = ops.where(pp > 1, pp * fullest - layers, 0.0)
    return fullest, fullest - (deficit >= 1), fullest - (deficit >= 2)


def inflight_layers(stage_layers, pp, interleave, num_microbatches, rank=0):
    """Layer-activations pipeline rank ``rank`` (holding ``stage_layers`` layers) keeps at its peak.

    Under 1F1B rank r keeps min(m, pp - r) micro-batches in flight, so the first rank holds
    about ``layers`` in all (Narayanan et al. 2021); the interleaved schedule adds (pp-1)/(pp*v) of
    that (Korthikanti et al. 2022, sec. 4.2).
    """
    inflight = ops.minimum(num_microbatches, ops.maximum(pp - rank, 1.0))
    extra = ops.where(interleave > 1, 1.0 + (pp - 1.0) / (pp * interleave), 1.0)
    return stage_layers * inflight * extra


def usable_hbm_bytes(hbm_gib, reserved_gib, fragmentation):
    """HBM left for the model after the CUDA context, NCCL buffers and allocator fragmentation."""
    return ops.maximum(hbm_gib - reserved_gib, 0.0) * (1.0 - fragmentation) * GIB
