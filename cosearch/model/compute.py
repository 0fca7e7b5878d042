"""Kernel times on one GPU: GEMMs (shape-dependent efficiency), attention and memory-bound kernels.

GEMM time is ``t0 + max(2mnk / (eta * peak), bytes / (hbm_eff * hbm_bw))``: a fixed per-kernel
cost plus the roofline of the larger of compute and memory traffic. On the measured H100 GEMMs
(experiments/data/measurements/h100/gemm.csv) this form has a median error of 2.3 % (experiments/fit_gemm.py).
"""
from __future__ import annotations

from . import _ops as ops

BYTES_16BIT = 2.0
#: Fused attention's backward over its forward: five matmuls instead of two, the scores recomputed (Dao 2023).
#: Measured on one H100 (experiments/results/gpu/moe_attention_h100.csv) the backward takes 2.7-3.7x the
#: forward (median 3.2): it runs slower per FLOP. The rate is not fitted; forward + backward the model is
#: within -26..+19 % of cuDNN at 2k-32k tokens (experiments/gpu/compare_layer.py), the forward alone further off.
FLASH_BACKWARD_RELATIVE = 2.5
#: FlashAttention-2's forward + backward rate on a GPU it has no path for (Hopper: the catalog's
#: ``legacy_attention`` cap, FA2's published forward rate there, 35 % of H100 peak, Shah et al. 2024) over that
#: cap. Measured on one H100 at Llama 3 8B's shape (32 query / 8 KV heads of 128, 8,192 causal tokens), PyTorch
#: SDPA's flash backend ran 281.8 TFLOP/s forward + backward (forward alone 311.6, the backward 2.87x the
#: forward; experiments/results/gpu/moe_attention_h100.csv): 281.8 / (0.35 x 989.4). The 2023 Triton kernel,
#: not measured there, keeps the published forward cap over Dao's ratio (profile.triton_attention_relative).
FLASH2_CAPPED_FWD_BWD_RELATIVE = 281.8 / (0.35 * 989.4)
#: Peak 16-bit matmul FLOPs per exponential the special-function unit computes on H100 SXM: 989 TFLOP/s
#: against 3.9 T exponentials/s (Shah et al. 2024, FlashAttention-3, arXiv 2407.08608, sec. 3.1).
MATMUL_FLOPS_PER_EXP = 989.4 / 3.9
#: Head width at which the fused-attention rates (``flash_attention_relative``, gpus.yaml) hold.
REFERENCE_HEAD_DIM = 128.0
#: Query and key rows of one tile of a fused attention kernel: FlashAttention-2/3, cuDNN and FlexAttention all
#: tile 128 rows on Hopper (FlexAttention's BlockMask default is 128 x 128); a kernel skips whole key blocks only.
ATTENTION_BLOCK = 128.0
#: Fixed cost of one query block's pass through a fused attention kernel (loading its queries, the softmax's
#: final rescale, writing the output and its log-sum-exp; in the backward its dQ), in keys of work per query:
#: a kernel whose queries visit k keys on average runs at 1 / (1 + K0 / k) of its long-sequence rate. Fit of
#: that form to cuDNN's forward + backward on one H100 (experiments/results/gpu/attention_h100.csv, head width
#: 128, causal 2,048-32,768 tokens: 353-570 TFLOP/s): K0 = 738 keys, every rate within 1.6 %. The same form,
#: not fitted to them, gives FlashAttention-2's 4k/8k ratio 0.873 (measured 0.881) and FlexAttention's windows
#: of 128 and 1,024 keys in 4,096 at 0.35 and 0.61 of the full causal time (measured 0.36 and 0.58;
#: experiments/results/gpu/moe_attention_h100.csv), where the tile count alone gives 0.12 and 0.48. Assumed the
#: same on every GPU (no measurement elsewhere). Not charged to the 2023 Triton kernel (``triton``): MosaicML's 22
#: runs with it, 512-65,536 tokens on A100-40GB, A100-80GB and H100, show no trend of error with the length
#: under a flat rate (experiments/data/validation, source S18), and a fixed cost of 738 keys would make one
#: of 5-15 points (the 512-token runs slower, the 65,536-token runs faster).
ATTENTION_FIXED_KEYS = 738.0
#: Keys a query visits at the point where the catalog's fused-attention rates hold: a causal pass over 8,192
#: tokens, where FLASH2_CAPPED_FWD_BWD_RELATIVE was measured and cuDNN ran 479-501 TFLOP/s (the model: 480).
REFERENCE_CAUSAL_TOKENS = 8192.0


def causal_keys_per_query(seq_len, block=ATTENTION_BLOCK):
    """Keys a query visits on average in a causal pass over ``seq_len`` tokens, counted in whole tiles:
    query block i of n = ceil(s / B) visits i + 1 key blocks, B (n + 1) / 2 keys on average."""
    return block * (ops.ceil(seq_len / block) + 1.0) / 2.0


def attention_span_factor(keys_per_query, fixed_keys=ATTENTION_FIXED_KEYS):
    """Fused attention's time per FLOP with ``keys_per_query`` keys per query over that at the reference
    (:data:`REFERENCE_CAUSAL_TOKENS`): (1 + K0 / k) / (1 + K0 / k_ref), :data:`ATTENTION_FIXED_KEYS`."""
    ref = 1.0 + fixed_keys / causal_keys_per_query(REFERENCE_CAUSAL_TOKENS)
    return (1.0 + fixed_keys / ops.maximum(keys_per_query, 1.0)) / ref


def gemm_time_s(m, n, k, flops_per_s, hbm_bytes_per_s, overhead_s, input_bytes=BYTES_16BIT):
    """Time of C[m,n] = A[m,k] @ B[k,n] with fp32 accumulation and a 16-bit result; the inputs are
    ``input_bytes`` wide (2, or 1 for fp8 GEMMs)."""
    flops = 2.0 * m * n * k
    traffic = input_bytes * (m * k + k * n) + BYTES_16BIT * m * n
    return overhead_s + ops.maximum(flops / flops_per_s, traffic / hbm_bytes_per_s)


def fp8_matmul_eta(eta, eta_fp8, relative):
    """The fp8 matmul efficiency the model uses: the GPU's own ``eta_fp8``, or where it has no fp8 measurement
    (NaN) its bf16 ``eta`` x ``relative`` (``profile.fp8_matmul_relative``). Floats or arrays."""
    return ops.where(ops.isnan(eta_fp8), eta * relative, eta_fp8)


def flash_attention_time_s(batch, seq_q, seq_kv, hidden_local, flops_per_s, causal=True):
    """Forward time of fused (flash) attention for ``seq_q`` queries against ``seq_kv`` keys.

    FLOPs are 4*b*s_q*s_kv*h_local; the causal mask skips half of them (Dao 2023). Backward costs
    2.5x the forward (five matmuls instead of two, recomputing the scores).
    """
    flops = 4.0 * batch * seq_q * seq_kv * hidden_local * (0.5 if causal else 1.0)
    return flops / flops_per_s


def attention_head_width_factor(qk_head_dim, v_head_dim):
    """Fused attention's rate at these head widths over its rate at :data:`REFERENCE_HEAD_DIM`.

    Each score costs 2(d_qk + d_v) matmul FLOPs in the forward and one exponential on the special-function
    unit, which runs about 1/250 of the matmul rate (FlashAttention-3, sec. 3.1): time per score is
    proportional to 1 + r / (2(d_qk + d_v)), so narrow heads spend relatively more of it in the softmax.
    Capped at 1: wider heads are not measured faster. On one H100 (experiments/gpu/measure_moe.py) head
    width 64 ran at 0.71-0.88 of 128 (cuDNN, FlashAttention-2, FlexAttention; this gives 0.75), 96 at
    0.77-0.90 (0.90), 256 and MLA's 192/128 at 0.83-0.99 (1). The H100's ratio r is used for every GPU.
    """
    r = MATMUL_FLOPS_PER_EXP
    ref = 1.0 + r / (4.0 * REFERENCE_HEAD_DIM)
    return ops.minimum(ref / (1.0 + r / (2.0 * (qk_head_dim + v_head_dim))), 1.0)


def standard_attention_time_s(batch, seq_q, seq_kv, hidden_local, heads_local, flops_per_s, hbm_bytes_per_s):
    """Forward time of unfused attention (pre-2022 Megatron): two batched GEMMs on all s^2 scores,
    plus about 7 reads/writes of the 16-bit score matrix (scale-mask-softmax, dropout, mask, A.V)."""
    flops = 4.0 * batch * seq_q * seq_kv * hidden_local
    score_bytes = 7.0 * BYTES_16BIT * batch * heads_local * seq_q * seq_kv
    return flops / flops_per_s + score_bytes / hbm_bytes_per_s


#: HBM traffic of a layer's memory-bound ops in PyTorch eager mode over the fused count of
#: :func:`elementwise_bytes_per_token`: one kernel per op (casts, norms in fp32, separate bias-gradient
#: reductions, residual adds) instead of fused ones. Measured on one H100 (experiments/results/gpu/step_h100.csv
#: vs step_compiled_h100.csv, the same GPT steps eager and with each block through torch.compile): eager
#: steps took 19-21 ms more, 2.31-2.50x the model's fused elementwise time (tests/test_stack_physics.py recomputes it).
EAGER_ELEMENTWISE_RELATIVE = 2.4


def fusion_factor(fusion):
    """Memory-bound traffic over the fused count: 1 fused, :data:`EAGER_ELEMENTWISE_RELATIVE` eager."""
    return ops.where(fusion > 0, EAGER_ELEMENTWISE_RELATIVE, 1.0) if ops.any(fusion > 0) else 1.0


def elementwise_bytes_per_token(hidden_replicated, ffn_local, gated_mlp):
    """Forward HBM traffic of one layer's memory-bound kernels per token, bytes.

    Two norms (read + write h each), two bias-dropout-residual adds (read 2h, write h, mask h),
    and the MLP activation (read f or 2f when gated, write f): (10h + (2 + gated) f) 16-bit values.
    ``hidden_replicated`` is h, or h/tp under sequence parallelism.
    """
    return BYTES_16BIT * (10.0 * hidden_replicated + (2.0 + gated_mlp) * ffn_local)


def fp8_cast_bytes_per_token(hidden, hidden_local, ffn_local):
    """Forward HBM traffic of casting the inputs of a layer's four GEMMs to fp8: Transformer Engine's
    fused cast-transpose reads the 16-bit input (2 B) and writes the fp8 copy and its transpose for
    the weight gradient (1 + 1 B). Inputs per token: QKV and fc1 h, projection h/tp, fc2 f/tp."""
    return 4.0 * (2.0 * hidden + hidden_local + ffn_local)


def fp8_grad_cast_bytes_per_token(hidden, qkv_local, fc1_out_local):
    """Backward HBM traffic of casting the output gradients of the four GEMMs to fp8 (E5M2) with
    their transposes (read 2 B, write 1 + 1 B), per token: QKV (h/tp + 2 kv), projection h, fc1
    f(1 + gated)/tp, fc2 h."""
    return 4.0 * (2.0 * hidden + qkv_local + fc1_out_local)
